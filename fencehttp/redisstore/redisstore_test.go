package redisstore_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/redisstore"
	"github.com/workrouter/workrouter/fencehttp/storetest"
	"github.com/workrouter/workrouter/internal/testredis"
)

// open returns a Store on the test server under a fresh prefix, whose keys
// are dropped when the test ends.
func open(t testing.TB, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	opt, err := goredis.ParseURL(testredis.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries, opt.DisableIdentity = -1, true
	rdb := goredis.NewClient(opt)
	cfg.Client, cfg.Prefix = rdb, testredis.Prefix()
	s, err := redisstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Drop(ctx); err != nil {
			t.Errorf("drop %s: %v", s.Prefix(), err)
		}
		rdb.Close()
	})
	return s
}

// TestConformance: the store passes the store suite, the handler's write
// an HINCRBY of the key's field in one hash through the unit's Tx, so a
// key written twice counts 2.
func TestConformance(t *testing.T) {
	testredis.URL(t) // skip (or fail under CI=true) once, not per subtest
	storetest.Run(t, func(t *testing.T) (fencehttp.Store, storetest.Resource) {
		s := open(t, redisstore.Config{})
		rdb := client(t, s)
		return s, storetest.Resource{
			Transactional: true,
			Write: func(ctx context.Context, key string) error {
				tx := redisstore.TxFrom(ctx)
				if tx == nil {
					return errors.New("no Tx in the handler's context")
				}
				tx.HIncrBy("effects", key, 1)
				return nil
			},
			Written: func(t testing.TB) map[string]int {
				m, err := rdb.HGetAll(context.Background(), s.Key("effects")).Result()
				if err != nil {
					t.Fatal(err)
				}
				out := make(map[string]int, len(m))
				for k, v := range m {
					out[k], _ = strconv.Atoi(v)
				}
				return out
			},
		}
	})
}

// client returns a second connection to the test server, for the test's
// own reads and writes.
func client(t *testing.T, _ *redisstore.Store) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(testredis.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableIdentity = true
	c := goredis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

type answer struct {
	status int
	body   string
	err    error
}

func serve(t *testing.T, s *redisstore.Store, h http.HandlerFunc) func(tok epochs.Token, key string) answer {
	t.Helper()
	g, err := fencehttp.New(fencehttp.Config{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Wrap(h))
	t.Cleanup(srv.Close)
	c := &http.Client{Transport: &fencehttp.Transport{Base: srv.Client().Transport}}
	return func(tok epochs.Token, key string) answer {
		ctx := fencehttp.WithFence(context.Background(), fencehttp.Fence{Token: tok, Key: key})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
		resp, err := c.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		a := answer{status: resp.StatusCode, err: fencehttp.CheckResponse(resp)}
		b, _ := io.ReadAll(resp.Body)
		a.body = string(b)
		return a
	}
}

// TestLeaseExpiredCommitFenced: a handler paused past its lease lets the
// next tenure's request of its scope in; that request stores a newer
// token and commits; the paused unit's commit is then refused with 409
// naming the newer token, and its write is not in the resource.
func TestLeaseExpiredCommitFenced(t *testing.T) {
	s := open(t, redisstore.Config{Lease: 150 * time.Millisecond})
	rdb := client(t, s)
	started, release := make(chan struct{}), make(chan struct{})
	call := serve(t, s, func(w http.ResponseWriter, r *http.Request) {
		f, _ := fencehttp.FenceFrom(r.Context())
		redisstore.TxFrom(r.Context()).HIncrBy("effects", f.Key, 1)
		if f.Key == "slow" {
			close(started)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	})
	old, cur := tok(0, 1, "a"), tok(0, 2, "b")
	slow := make(chan answer, 1)
	go func() { slow <- call(old, "slow") }()
	<-started
	// The fault: old's unit holds the scope's lease; cur's request waits
	// for it to expire and goes through while old's handler is paused.
	if a := call(cur, "fast"); a.status != http.StatusCreated {
		t.Fatalf("the newer tenure's request: %d %q, want 201", a.status, a.body)
	}
	select {
	case a := <-slow:
		t.Fatalf("the paused request ended (%d) before its handler returned", a.status)
	default:
	}
	close(release)
	a := <-slow
	var fe *fencehttp.FencedError
	if a.status != http.StatusConflict || !errors.As(a.err, &fe) || fe.Stored != cur || fe.Presented != old {
		t.Fatalf("the paused request's commit: %d %v %q, want 409 naming stored %v presented %v", a.status, a.err, a.body, cur, old)
	}
	m, err := rdb.HGetAll(context.Background(), s.Key("effects")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if m["slow"] != "" || m["fast"] != "1" {
		t.Fatalf("resource %v, want only fast written once", m)
	}
	if tok, err := s.Token(context.Background(), cur.Scope()); err != nil || tok != cur {
		t.Fatalf("stored token %v %v, want %v", tok, err, cur)
	}
}

// TestInvalidCommandWritesNothing: a unit whose second command would fail
// (INCRBY of text set by its first) is refused whole: nothing written, a
// 503, the key released for a retry.
func TestInvalidCommandWritesNothing(t *testing.T) {
	s := open(t, redisstore.Config{})
	rdb := client(t, s)
	broken := true
	call := serve(t, s, func(w http.ResponseWriter, r *http.Request) {
		tx := redisstore.TxFrom(r.Context())
		tx.Set("acct", "text")
		if broken {
			tx.IncrBy("acct", 1)
		}
		w.WriteHeader(http.StatusCreated)
	})
	tok := tok(0, 1, "a")
	a := call(tok, "k")
	if n, err := rdb.Exists(context.Background(), s.Key("acct")).Result(); err != nil || n != 0 {
		t.Fatalf("acct exists=%d err=%v after a refused unit (answered %d), want absent", n, err, a.status)
	}
	if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "INCRBY on a value that is not an integer") {
		t.Fatalf("invalid unit: %d %q, want 503 naming the command", a.status, a.body)
	}
	broken = false
	if a := call(tok, "k"); a.status != http.StatusCreated {
		t.Fatalf("retry: %d %q, want 201", a.status, a.body)
	}
	if v, err := rdb.Get(context.Background(), s.Key("acct")).Result(); err != nil || v != "text" {
		t.Fatalf("acct %q %v after the retry, want text", v, err)
	}
}

// TestReadChangedWritesNothing: a value the handler read changes before
// its commit: the commit writes nothing (503), and the retry, reading the
// new value, lands.
func TestReadChangedWritesNothing(t *testing.T) {
	s := open(t, redisstore.Config{})
	rdb := client(t, s)
	ctx := context.Background()
	if err := rdb.Set(ctx, s.Key("bal"), "10", 0).Err(); err != nil {
		t.Fatal(err)
	}
	interfere := true
	call := serve(t, s, func(w http.ResponseWriter, r *http.Request) {
		tx := redisstore.TxFrom(r.Context())
		v, _, err := tx.Get(r.Context(), "bal")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if interfere { // the fault: another writer between the read and the commit
			interfere = false
			if err := rdb.Set(ctx, s.Key("bal"), "100", 0).Err(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		n, _ := strconv.Atoi(v)
		tx.Set("bal", strconv.Itoa(n-1))
		if _, _, err := tx.Get(r.Context(), "bal"); !errors.Is(err, redisstore.ErrReadAfterWrite) {
			http.Error(w, "read after write: "+strings.TrimSpace(errString(err)), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	tok := tok(0, 1, "a")
	if a := call(tok, "k"); a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "read changed") {
		t.Fatalf("changed read: %d %q, want 503 naming the conflict", a.status, a.body)
	}
	if v, _ := rdb.Get(ctx, s.Key("bal")).Result(); v != "100" {
		t.Fatalf("bal %q after the refused unit, want the other writer's 100", v)
	}
	if a := call(tok, "k"); a.status != http.StatusCreated {
		t.Fatalf("retry: %d %q, want 201", a.status, a.body)
	}
	if v, _ := rdb.Get(ctx, s.Key("bal")).Result(); v != "99" {
		t.Fatalf("bal %q after the retry, want 99", v)
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestLeaseLostKeyWrittenOnce: a handler paused past its lease lets a
// retry of the same key (same tenure) in, which runs and records the key;
// the paused unit's commit then fails with a 503 (ErrLeaseLost) and the
// key's write is in the resource once, answered with the retry's result.
func TestLeaseLostKeyWrittenOnce(t *testing.T) {
	s := open(t, redisstore.Config{Lease: 150 * time.Millisecond})
	rdb := client(t, s)
	started, release := make(chan struct{}), make(chan struct{})
	runs := 0
	call := serve(t, s, func(w http.ResponseWriter, r *http.Request) {
		f, _ := fencehttp.FenceFrom(r.Context())
		redisstore.TxFrom(r.Context()).HIncrBy("effects", f.Key, 1)
		runs++
		if runs == 1 {
			close(started)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("run " + strconv.Itoa(runs)))
	})
	tok := tok(0, 1, "a")
	first := make(chan answer, 1)
	go func() { first <- call(tok, "k") }()
	<-started
	// The fault: the first unit's lease and claim expire while its
	// handler is paused; the retry takes the key and commits.
	if a := call(tok, "k"); a.status != http.StatusCreated || a.body != "run 2" {
		t.Fatalf("the retry: %d %q, want 201 run 2", a.status, a.body)
	}
	close(release)
	if a := <-first; a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "claim on its key was lost") {
		t.Fatalf("the paused unit's commit: %d %q, want 503 naming the lost claim", a.status, a.body)
	}
	if v, err := rdb.HGet(context.Background(), s.Key("effects"), "k").Result(); err != nil || v != "1" {
		t.Fatalf("k written %q times (%v), want 1", v, err)
	}
	if a := call(tok, "k"); a.status != http.StatusCreated || a.body != "run 2" {
		t.Fatalf("a third request: %d %q, want the recorded 201 run 2", a.status, a.body)
	}
}

// TestCommitAcrossResetRefused: a reset does not wait for the units open
// on its scope (a lease is not a lock it could wait on for sure), so the
// commit of a unit open across a reset is refused, with 409 and nothing
// written, even when the reset stores the unit's own token (the unit was
// admitted under the state the operator replaced): the reset's version,
// which Begin hands the unit, has moved.
func TestCommitAcrossResetRefused(t *testing.T) {
	s := open(t, redisstore.Config{})
	rdb := client(t, s)
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		tok, to   epochs.Token
		wantFloor int32
	}{
		{"previous incarnation", tok(0, 9, "old"), tok(0, 2, "new"), 9},
		{"the reset's own token", tok(1, 5, "h"), tok(1, 5, "h"), 5},
	} {
		u, rec, err := s.Begin(ctx, c.tok, "open-"+c.name)
		if err != nil || rec != nil || u != nil && u.Context(ctx) == nil {
			t.Fatalf("%s: Begin: %v %v", c.name, rec, err)
		}
		redisstore.TxFrom(u.Context(ctx)).HIncrBy("effects", c.name, 1)
		st, err := s.State(ctx, c.tok.Scope())
		if err != nil {
			t.Fatal(err)
		}
		// The fault: the operator resets the scope while the unit is open.
		if _, err := s.ResetScope(ctx, fencehttp.ResetRequest{Scope: c.tok.Scope(), Expect: st, To: c.to, Floor: c.wantFloor, Reason: "test"}); err != nil {
			t.Fatalf("%s: ResetScope: %v", c.name, err)
		}
		err = u.Commit(ctx, fencehttp.Result{Status: http.StatusCreated})
		var fe *fencehttp.FencedError
		if !errors.As(err, &fe) || fe.Stored != c.to || !fe.Pinned || fe.Floor != c.wantFloor {
			t.Fatalf("%s: commit across the reset: %v, want a pinned *FencedError naming %v at floor %d", c.name, err, c.to, c.wantFloor)
		}
		if v, err := rdb.HGet(ctx, s.Key("effects"), c.name).Result(); !errors.Is(err, goredis.Nil) {
			t.Fatalf("%s: the refused unit's write is in the resource: %q %v", c.name, v, err)
		}
	}
}

// tok returns a token of partition part at epoch, held by member.
func tok(part, epoch int32, member string) epochs.Token {
	return epochs.Token{Group: "payments", Topic: "charges", Partition: part, Epoch: epoch, Member: member}
}
