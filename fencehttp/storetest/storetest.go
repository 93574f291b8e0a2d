// Package storetest is the conformance suite of fencehttp.Store: every
// store runs it (memstore, sqlstore on SQLite and on PostgreSQL,
// redisstore), and so must a new one (docs/fenced-resources.md). It drives the store
// through a fencehttp.Guard and a client with fencehttp.Transport, over
// real HTTP, and checks what a resource must promise: an older token
// refused, the same epoch from another member refused, a newer one
// accepted, a duplicate idempotency key answered with the first result,
// a 5xx answer undone but the token kept, and, under concurrency, exactly
// one of two same-epoch tenures winning a scope and exactly one execution
// per key; and, for a store that is a fencehttp.ScopeResetter, that an
// operator's reset pins the scope to the new holder (the previous
// incarnation's epochs refused until an epoch above the floor is stored),
// is a compare-and-set, and is audited.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/sink"
)

// Resource is the resource a store guards, as the suite's handler uses it.
type Resource struct {
	// Write writes key to the resource, from the handler of the request
	// whose context ctx is (through the store's unit, for a store that
	// is the resource's database).
	Write func(ctx context.Context, key string) error
	// Written returns how many times each key's write is in the
	// resource now.
	Written func(t testing.TB) map[string]int
	// Transactional says that a unit's Abort undoes the handler's
	// writes (the store is the resource's database). The suite then
	// checks that a 5xx answer leaves nothing written.
	Transactional bool
}

// Open returns a new, empty store and its resource.
type Open func(t *testing.T) (fencehttp.Store, Resource)

// Run runs the suite on the stores open returns, one per subtest.
func Run(t *testing.T, open Open) {
	t.Run("NewerAccepted", func(t *testing.T) { testNewerAccepted(t, newWorld(t, open)) })
	t.Run("OlderRefused", func(t *testing.T) { testOlderRefused(t, newWorld(t, open)) })
	t.Run("SameEpochOtherMemberRefused", func(t *testing.T) { testSameEpochOtherMember(t, newWorld(t, open)) })
	t.Run("DuplicateKeyAnsweredFromFirstResult", func(t *testing.T) { testDuplicate(t, newWorld(t, open)) })
	t.Run("ServerErrorUndoneTokenKept", func(t *testing.T) { testAbort(t, newWorld(t, open)) })
	t.Run("ScopesAndGroupsIndependent", func(t *testing.T) { testIndependent(t, newWorld(t, open)) })
	t.Run("MissingOrMalformedFence", func(t *testing.T) { testMalformed(t, newWorld(t, open)) })
	t.Run("ConcurrentTenuresOneWins", func(t *testing.T) { testConcurrentTenures(t, newWorld(t, open)) })
	t.Run("ConcurrentSameKeyOnce", func(t *testing.T) { testConcurrentSameKey(t, newWorld(t, open)) })
	t.Run("ResetPinsPreviousIncarnation", func(t *testing.T) { testResetPins(t, newWorld(t, open)) })
	t.Run("ResetConflictChangesNothing", func(t *testing.T) { testResetConflict(t, newWorld(t, open)) })
	t.Run("ResetAudited", func(t *testing.T) { testResetAudited(t, newWorld(t, open)) })
}

// tok returns the suite's token of partition part at epoch, held by member.
func tok(part, epoch int32, member string) epochs.Token {
	return epochs.Token{Group: "payments", Topic: "charges", Partition: part, Epoch: epoch, Member: member}
}

type world struct {
	store  fencehttp.Store
	srv    *httptest.Server
	client *http.Client
	res    Resource
	runs   atomic.Int64 // handler executions
	// fail, if it holds a key, makes the handler answer 500 for it.
	fail sync.Map
}

func newWorld(t *testing.T, open Open) *world {
	store, res := open(t)
	g, err := fencehttp.New(fencehttp.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{store: store, res: res}
	w.srv = httptest.NewServer(g.Wrap(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		f, ok := fencehttp.FenceFrom(r.Context())
		if !ok {
			http.Error(rw, "no fence in the handler's context", http.StatusInternalServerError)
			return
		}
		n := w.runs.Add(1)
		if err := res.Write(r.Context(), f.Key); err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, ok := w.fail.Load(f.Key); ok {
			http.Error(rw, "failing on purpose", http.StatusInternalServerError)
			return
		}
		rw.Header().Set("X-Run", fmt.Sprint(n))
		rw.WriteHeader(http.StatusCreated)
		fmt.Fprintf(rw, "%s by %s run %d", f.Key, f.Token, n)
	})))
	t.Cleanup(w.srv.Close)
	w.client = &http.Client{Transport: &fencehttp.Transport{Base: w.srv.Client().Transport}}
	return w
}

type answer struct {
	status   int
	body     string
	replayed bool
	err      error // CheckResponse's
}

// call sends one fenced request; it may be called from any goroutine of
// the test (it reports failures with t.Errorf).
func (w *world) call(t testing.TB, tok epochs.Token, key string) answer {
	t.Helper()
	ctx := fencehttp.WithFence(context.Background(), fencehttp.Fence{Token: tok, Key: key})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.srv.URL+"/charge", strings.NewReader("{}"))
	if err != nil {
		t.Errorf("request for key %s: %v", key, err)
		return answer{err: err}
	}
	resp, err := w.client.Do(req)
	if err != nil {
		t.Errorf("request for key %s: %v", key, err)
		return answer{err: err}
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get(fencehttp.ReplayedHeader) == "true", err: fencehttp.CheckResponse(resp)}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("response for key %s: %v", key, err)
	}
	a.body = string(b)
	return a
}

func mustApply(t testing.TB, a answer, what string) {
	t.Helper()
	if a.status != http.StatusCreated || a.err != nil || a.replayed {
		t.Fatalf("%s: got %d replayed=%v err=%v body %q, want 201 from the handler", what, a.status, a.replayed, a.err, a.body)
	}
}

func mustFence(t testing.TB, a answer, stored, presented epochs.Token, what string) {
	t.Helper()
	var fe *fencehttp.FencedError
	if a.status != http.StatusConflict || !errors.As(a.err, &fe) {
		t.Fatalf("%s: got %d err=%v body %q, want 409 with a *FencedError", what, a.status, a.err, a.body)
	}
	if !errors.Is(a.err, fencehttp.ErrFenced) || !errors.Is(a.err, sink.ErrFenced) {
		t.Fatalf("%s: %v does not match fencehttp.ErrFenced and sink.ErrFenced", what, a.err)
	}
	if fe.Stored != stored || fe.Presented != presented {
		t.Fatalf("%s: refusal names stored %v presented %v, want %v and %v", what, fe.Stored, fe.Presented, stored, presented)
	}
}

func (w *world) written(t testing.TB, key string) int {
	t.Helper()
	return w.res.Written(t)[key]
}

func testNewerAccepted(t *testing.T, w *world) {
	mustApply(t, w.call(t, tok(0, 1, "a"), "k1"), "first token of the scope")
	mustApply(t, w.call(t, tok(0, 1, "a"), "k2"), "same tenure again")
	mustApply(t, w.call(t, tok(0, 2, "b"), "k3"), "newer epoch, other member")
	mustApply(t, w.call(t, tok(0, 7, "b"), "k4"), "newer epoch, same member")
	for _, k := range []string{"k1", "k2", "k3", "k4"} {
		if n := w.written(t, k); n != 1 {
			t.Fatalf("key %s written %d times, want 1", k, n)
		}
	}
}

func testOlderRefused(t *testing.T, w *world) {
	mustApply(t, w.call(t, tok(0, 5, "b"), "k1"), "epoch 5")
	mustFence(t, w.call(t, tok(0, 4, "a"), "k2"), tok(0, 5, "b"), tok(0, 4, "a"), "epoch 4 after 5")
	mustFence(t, w.call(t, tok(0, 4, "b"), "k3"), tok(0, 5, "b"), tok(0, 4, "b"), "epoch 4 of the same member")
	if n := w.written(t, "k2") + w.written(t, "k3"); n != 0 || w.runs.Load() != 1 {
		t.Fatalf("refused requests wrote %d times, handler ran %d times (want 0 and 1)", n, w.runs.Load())
	}
	// The refusal changed nothing: the holder is still served.
	mustApply(t, w.call(t, tok(0, 5, "b"), "k4"), "the stored tenure after the refusals")
}

func testSameEpochOtherMember(t *testing.T, w *world) {
	mustApply(t, w.call(t, tok(0, 3, "a"), "k1"), "a at epoch 3")
	mustFence(t, w.call(t, tok(0, 3, "b"), "k2"), tok(0, 3, "a"), tok(0, 3, "b"), "b at epoch 3")
	mustApply(t, w.call(t, tok(0, 3, "a"), "k3"), "a again")
	if w.written(t, "k2") != 0 {
		t.Fatal("the refused member's write landed")
	}
}

func testDuplicate(t *testing.T, w *world) {
	first := w.call(t, tok(0, 1, "a"), "order-1")
	mustApply(t, first, "first request")
	again := w.call(t, tok(0, 1, "a"), "order-1")
	if again.status != first.status || again.body != first.body || !again.replayed || again.err != nil {
		t.Fatalf("duplicate: got %d %q replayed=%v err=%v, want the first result %d %q replayed", again.status, again.body, again.replayed, again.err, first.status, first.body)
	}
	// The next tenure retrying the same command gets the first result too,
	// and its token is stored.
	next := w.call(t, tok(0, 2, "b"), "order-1")
	if next.body != first.body || !next.replayed {
		t.Fatalf("duplicate from the next tenure: got %d %q replayed=%v, want the first result replayed", next.status, next.body, next.replayed)
	}
	mustFence(t, w.call(t, tok(0, 1, "a"), "order-1"), tok(0, 2, "b"), tok(0, 1, "a"), "the old tenure after the replay")
	if n, runs := w.written(t, "order-1"), w.runs.Load(); n != 1 || runs != 1 {
		t.Fatalf("order-1 written %d times, handler ran %d times; want 1 and 1", n, runs)
	}
}

func testAbort(t *testing.T, w *world) {
	mustApply(t, w.call(t, tok(0, 2, "a"), "k0"), "epoch 2")
	w.fail.Store("k1", true)
	a := w.call(t, tok(0, 3, "b"), "k1")
	if a.status != http.StatusInternalServerError || a.replayed {
		t.Fatalf("failing handler: got %d replayed=%v, want its 500", a.status, a.replayed)
	}
	if w.res.Transactional {
		if n := w.written(t, "k1"); n != 0 {
			t.Fatalf("the 500's write is in the resource %d times, want 0", n)
		}
	}
	// The token's advance is kept: epoch 2 is now stale.
	mustFence(t, w.call(t, tok(0, 2, "a"), "k2"), tok(0, 3, "b"), tok(0, 2, "a"), "epoch 2 after epoch 3's failed request")
	// The key was released: a retry runs the handler again.
	w.fail.Delete("k1")
	before := w.runs.Load()
	mustApply(t, w.call(t, tok(0, 3, "b"), "k1"), "retry after the 500")
	if w.runs.Load() != before+1 {
		t.Fatal("the retry after a 500 did not run the handler")
	}
	if w.res.Transactional {
		if n := w.written(t, "k1"); n != 1 {
			t.Fatalf("k1 written %d times after the retry, want 1", n)
		}
	}
}

func testIndependent(t *testing.T, w *world) {
	mustApply(t, w.call(t, tok(0, 9, "a"), "k1"), "partition 0 at epoch 9")
	mustApply(t, w.call(t, tok(1, 1, "b"), "k2"), "partition 1 at epoch 1")
	other := tok(0, 1, "c")
	other.Group = "audit"
	mustApply(t, w.call(t, other, "k1"), "another group, same partition, same key")
	if n := w.written(t, "k1"); n != 2 {
		t.Fatalf("k1 written %d times, want once per group (2)", n)
	}
}

func testMalformed(t *testing.T, w *world) {
	for _, c := range []struct {
		name   string
		set    func(h http.Header)
		status int
	}{
		{"no headers", func(http.Header) {}, http.StatusPreconditionRequired},
		{"no key", func(h http.Header) { h.Set(fencehttp.TokenHeader, "AQ") }, http.StatusPreconditionRequired},
		{"garbage token", func(h http.Header) { h.Set(fencehttp.TokenHeader, "!!"); h.Set(fencehttp.KeyHeader, "k") }, http.StatusBadRequest},
		{"invalid token", func(h http.Header) { h.Set(fencehttp.TokenHeader, "AQAAAAAA"); h.Set(fencehttp.KeyHeader, "k") }, http.StatusBadRequest},
	} {
		req, _ := http.NewRequest(http.MethodPost, w.srv.URL, nil)
		c.set(req.Header)
		resp, err := w.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		err = fencehttp.CheckResponse(resp)
		resp.Body.Close()
		if resp.StatusCode != c.status || !errors.Is(err, fencehttp.ErrInvalidFence) {
			t.Errorf("%s: got %d %v, want %d matching ErrInvalidFence", c.name, resp.StatusCode, err, c.status)
		}
	}
	if w.runs.Load() != 0 {
		t.Fatalf("the handler ran %d times for malformed requests", w.runs.Load())
	}
	// And the client refuses to send without a fence.
	req, _ := http.NewRequest(http.MethodPost, w.srv.URL, nil)
	if _, err := w.client.Do(req); !errors.Is(err, fencehttp.ErrNoFence) {
		t.Fatalf("a request without a fence: %v, want ErrNoFence", err)
	}
}

// testConcurrentTenures: two tenures of the same epoch race for a fresh
// scope, each with many requests at once: one member wins every request
// it sends, the other is refused every time.
func testConcurrentTenures(t *testing.T, w *world) {
	const perMember = 12
	for round := range 3 {
		part := int32(10 + round)
		a, b := tok(part, 4, "a"), tok(part, 4, "b")
		answers := make(map[string][]answer)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range perMember {
			for _, tok := range []epochs.Token{a, b} {
				wg.Go(func() {
					ans := w.call(t, tok, fmt.Sprintf("r%d-%s-%d", round, tok.Member, i))
					mu.Lock()
					answers[tok.Member] = append(answers[tok.Member], ans)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		won := map[string]int{}
		for m, as := range answers {
			for _, ans := range as {
				switch ans.status {
				case http.StatusCreated:
					won[m]++
				case http.StatusConflict:
					if !errors.Is(ans.err, fencehttp.ErrFenced) {
						t.Fatalf("409 without a FencedError: %v", ans.err)
					}
				default:
					t.Fatalf("member %s: unexpected %d %q", m, ans.status, ans.body)
				}
			}
		}
		if !(won["a"] == perMember && won["b"] == 0) && !(won["b"] == perMember && won["a"] == 0) {
			t.Fatalf("round %d: accepted a=%d b=%d, want all %d of one member and none of the other", round, won["a"], won["b"], perMember)
		}
		written := w.res.Written(t)
		for _, m := range []string{"a", "b"} {
			n := 0
			for i := range perMember {
				n += written[fmt.Sprintf("r%d-%s-%d", round, m, i)]
			}
			if n != won[m] {
				t.Fatalf("round %d: member %s has %d writes in the resource, %d accepted", round, m, n, won[m])
			}
		}
	}
}

// testConcurrentSameKey: an old and a new tenure send the same key at once,
// many times: the key's write happens exactly once, and every answer is
// that write's result or a refusal.
func testConcurrentSameKey(t *testing.T, w *world) {
	const rounds, perTok = 8, 4
	for round := range rounds {
		key := fmt.Sprintf("same-%d", round)
		old, cur := tok(20, int32(2*round+1), "old"), tok(20, int32(2*round+2), "new")
		var mu sync.Mutex
		var bodies []string
		var wg sync.WaitGroup
		for range perTok {
			for _, tok := range []epochs.Token{old, cur} {
				wg.Go(func() {
					ans := w.call(t, tok, key)
					switch ans.status {
					case http.StatusCreated:
						mu.Lock()
						bodies = append(bodies, ans.body)
						mu.Unlock()
					case http.StatusConflict:
					default:
						t.Errorf("round %d: unexpected %d %q", round, ans.status, ans.body)
					}
				})
			}
		}
		wg.Wait()
		if n := w.written(t, key); n != 1 {
			t.Fatalf("round %d: key written %d times, want exactly 1", round, n)
		}
		for _, b := range bodies {
			if b != bodies[0] {
				t.Fatalf("round %d: answers differ for one key: %q and %q", round, bodies[0], b)
			}
		}
		if len(bodies) < perTok {
			t.Fatalf("round %d: %d requests answered 201, want at least the new tenure's %d", round, len(bodies), perTok)
		}
	}
}

// resetter returns the world's store as a fencehttp.ScopeResetter, or
// skips the test, saying so, for a store without one (the capability is
// optional).
func (w *world) resetter(t *testing.T) fencehttp.ScopeResetter {
	t.Helper()
	rs, ok := w.store.(fencehttp.ScopeResetter)
	if !ok {
		t.Skipf("%T is not a fencehttp.ScopeResetter: its resets are not tested", w.store)
	}
	return rs
}

func (w *world) state(t testing.TB, rs fencehttp.ScopeResetter, part int32) fencehttp.ScopeState {
	t.Helper()
	st, err := rs.State(context.Background(), tok(part, 0, "x").Scope())
	if err != nil {
		t.Fatalf("State of partition %d: %v", part, err)
	}
	return st
}

func mustPinned(t testing.TB, a answer, stored, presented epochs.Token, floor int32, what string) {
	t.Helper()
	mustFence(t, a, stored, presented, what)
	var fe *fencehttp.FencedError
	errors.As(a.err, &fe)
	if !fe.Pinned || fe.Floor != floor || !strings.Contains(a.body, fmt.Sprintf(`"floor":%d`, floor)) {
		t.Fatalf("%s: refusal pinned=%v floor=%d body %q, want pinned at floor %d (and the body's floor member)", what, fe.Pinned, fe.Floor, a.body, floor)
	}
}

// testResetPins: the previous incarnation of the group stored epoch 9;
// the new incarnation's holder, at epoch 2, is refused until an operator
// resets the scope to it with floor 9. Then the holder is admitted, and
// every epoch at or below the floor from anyone else (the previous
// incarnation's members) is refused, pinned, until a token above the
// floor is stored, which lifts the pin.
func testResetPins(t *testing.T, w *world) {
	rs := w.resetter(t)
	old, holder := tok(0, 9, "old"), tok(0, 2, "new")
	mustApply(t, w.call(t, old, "k-old"), "the previous incarnation at epoch 9")
	mustFence(t, w.call(t, holder, "k1"), old, holder, "the new incarnation's holder at epoch 2, before the reset")
	st := w.state(t, rs, 0)
	if st != (fencehttp.ScopeState{Scope: old.Scope(), Token: old, Floor: fencehttp.NoFloor}) || st.Pinned() {
		t.Fatalf("state before the reset: %+v, want token %v and no floor", st, old)
	}
	before, err := rs.ResetScope(context.Background(), fencehttp.ResetRequest{Scope: old.Scope(), Expect: st, To: holder, Floor: 9, Reason: "group recreated"})
	if err != nil {
		t.Fatalf("ResetScope: %v", err)
	}
	if before != st {
		t.Fatalf("ResetScope returned %+v, want the state it found %+v", before, st)
	}
	if st := w.state(t, rs, 0); st.Token != holder || st.Floor != 9 || !st.Pinned() {
		t.Fatalf("state after the reset: %+v, want the holder pinned below floor 9", st)
	}
	mustApply(t, w.call(t, holder, "k1"), "the holder after the reset")
	mustPinned(t, w.call(t, old, "k2"), holder, old, 9, "the previous incarnation's token after the reset")
	other := tok(0, 5, "other")
	mustPinned(t, w.call(t, other, "k3"), holder, other, 9, "another member at an epoch below the floor")
	mustPinned(t, w.call(t, tok(0, 9, "new"), "k3"), holder, tok(0, 9, "new"), 9, "an epoch at the floor")
	mustApply(t, w.call(t, holder, "k4"), "the holder again")
	if n := w.written(t, "k2") + w.written(t, "k3"); n != 0 {
		t.Fatalf("requests refused under the pin wrote %d times", n)
	}
	// Another scope is not pinned.
	mustApply(t, w.call(t, tok(1, 9, "old"), "k5"), "partition 1 at the previous incarnation's epoch")
	// A token above the floor lifts the pin.
	next := tok(0, 10, "next")
	mustApply(t, w.call(t, next, "k6"), "epoch 10, above the floor")
	if st := w.state(t, rs, 0); st.Token != next || st.Floor != 9 || st.Pinned() {
		t.Fatalf("state after epoch 10: %+v, want token %v, floor 9 kept, not pinned", st, next)
	}
	a := w.call(t, old, "k7")
	mustFence(t, a, next, old, "the previous incarnation after the pin lifted")
	var fe *fencehttp.FencedError
	if errors.As(a.err, &fe); fe.Pinned || strings.Contains(a.body, `"floor"`) {
		t.Fatalf("a refusal of a scope whose pin lifted says pinned=%v, body %q", fe.Pinned, a.body)
	}
	for _, k := range []string{"k-old", "k1", "k4", "k5", "k6"} {
		if n := w.written(t, k); n != 1 {
			t.Fatalf("key %s written %d times, want 1", k, n)
		}
	}
}

// testResetConflict: a reset whose Expect is not the scope's state any
// more (a request stored a newer token since), or that is malformed,
// changes nothing.
func testResetConflict(t *testing.T, w *world) {
	rs := w.resetter(t)
	ctx := context.Background()
	old, holder := tok(0, 9, "old"), tok(0, 2, "new")
	mustApply(t, w.call(t, old, "k1"), "epoch 9")
	seen := w.state(t, rs, 0)
	moved := tok(0, 11, "old2")
	mustApply(t, w.call(t, moved, "k2"), "epoch 11 after the inspection")
	want := fencehttp.ScopeState{Scope: old.Scope(), Token: moved, Floor: fencehttp.NoFloor}
	_, err := rs.ResetScope(ctx, fencehttp.ResetRequest{Scope: old.Scope(), Expect: seen, To: holder, Floor: 11, Reason: "group recreated"})
	if !errors.Is(err, fencehttp.ErrResetConflict) {
		t.Fatalf("a reset of a moved scope: %v, want ErrResetConflict", err)
	}
	for _, bad := range []fencehttp.ResetRequest{
		{Scope: old.Scope(), Expect: want, To: holder, Floor: 11},                                                             // no reason
		{Scope: old.Scope(), Expect: want, To: holder, Floor: 1, Reason: "r"},                                                 // floor below To
		{Scope: old.Scope(), Expect: want, To: tok(1, 2, "new"), Floor: 11, Reason: "r"},                                      // To of another scope
		{Scope: old.Scope(), Expect: want, Floor: 11, Reason: "r"},                                                            // no To
		{Scope: old.Scope(), Expect: fencehttp.ScopeState{Scope: tok(1, 0, "x").Scope()}, To: holder, Floor: 11, Reason: "r"}, // Expect of another scope
	} {
		if _, err := rs.ResetScope(ctx, bad); !errors.Is(err, fencehttp.ErrBadReset) {
			t.Fatalf("malformed reset %+v: %v, want ErrBadReset", bad, err)
		}
	}
	if st := w.state(t, rs, 0); st != want {
		t.Fatalf("state after the refused resets: %+v, want %+v", st, want)
	}
	if rr, err := rs.Resets(ctx, old.Scope()); err != nil || len(rr) != 0 {
		t.Fatalf("refused resets audited: %+v, %v", rr, err)
	}
	mustFence(t, w.call(t, holder, "k3"), moved, holder, "the holder after the refused resets")
	mustApply(t, w.call(t, moved, "k4"), "the stored token after the refused resets")
}

// testResetAudited: every reset leaves an entry with the state it found,
// the state it stored, the reason and the detail; a later reset with a
// lower floor keeps the higher one.
func testResetAudited(t *testing.T, w *world) {
	rs := w.resetter(t)
	ctx := context.Background()
	start := time.Now().Add(-time.Minute)
	old := tok(0, 9, "old")
	mustApply(t, w.call(t, old, "k1"), "epoch 9")
	s0 := w.state(t, rs, 0)
	if _, err := rs.ResetScope(ctx, fencehttp.ResetRequest{Scope: old.Scope(), Expect: s0, To: tok(0, 2, "new"), Floor: 9, Reason: "INC-1", Detail: `{"why":"recreated"}`}); err != nil {
		t.Fatal(err)
	}
	s1 := w.state(t, rs, 0)
	if _, err := rs.ResetScope(ctx, fencehttp.ResetRequest{Scope: old.Scope(), Expect: s1, To: tok(0, 3, "newer"), Floor: 4, Reason: "INC-2"}); err != nil {
		t.Fatal(err)
	}
	s2 := w.state(t, rs, 0)
	if s2.Token != tok(0, 3, "newer") || s2.Floor != 9 {
		t.Fatalf("after a reset with floor 4 over floor 9: %+v, want floor 9 kept", s2)
	}
	rr, err := rs.Resets(ctx, old.Scope())
	if err != nil {
		t.Fatal(err)
	}
	if len(rr) != 2 {
		t.Fatalf("%d resets audited, want 2: %+v", len(rr), rr)
	}
	want := []fencehttp.ResetEntry{
		{Before: s0, After: s1, Reason: "INC-1", Detail: `{"why":"recreated"}`},
		{Before: s1, After: s2, Reason: "INC-2"},
	}
	for i, e := range rr {
		if e.Before != want[i].Before || e.After != want[i].After || e.Reason != want[i].Reason || e.Detail != want[i].Detail {
			t.Fatalf("reset %d audited as %+v, want %+v", i, e, want[i])
		}
		if e.At.Before(start) || e.At.After(time.Now().Add(time.Minute)) {
			t.Fatalf("reset %d recorded at %v, not around now", i, e.At)
		}
	}
	if rr[1].Seq <= rr[0].Seq {
		t.Fatalf("reset seqs %d then %d: want them growing", rr[0].Seq, rr[1].Seq)
	}
	if other, err := rs.Resets(ctx, tok(1, 0, "x").Scope()); err != nil || len(other) != 0 {
		t.Fatalf("resets of a scope never reset: %+v, %v", other, err)
	}
}
