package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testredis"
	"github.com/workrouter/workrouter/sink"
)

// The tests of the watched apply (batches of SET and DEL that read
// nothing: WATCH/MULTI/EXEC instead of the apply script).

func set(v string) sink.Effect[*Tx] {
	return func(ctx context.Context, tx *Tx, i int) error {
		tx.Set("k"+strconv.Itoa(i), v)
		return nil
	}
}

func fenceNext(t *testing.T, s *Sink, tok epochs.Token) string {
	t.Helper()
	n, err := s.Client().HGet(t.Context(), s.fenceKey(tok.Scope()), "n").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A claim that lands between the watched apply's checks and its EXEC
// (a pause there: the holder check passed on what it read) makes EXEC
// write nothing, and the apply fails fenced.
func TestWatchedApplyClaimBeforeExec(t *testing.T) {
	s := openSink(t, "", Config{})
	other := openSink(t, s.Prefix(), Config{})
	ctx := t.Context()
	tok := testToken(t, 1)
	claimed(t, s, tok)
	next := tok
	next.Epoch, next.Member = 2, "m2"
	hooked := 0
	s.hookBeforeExec = func(ctx context.Context) {
		hooked++
		if _, err := other.Claim(ctx, next, sink.Observed{}); err != nil {
			t.Errorf("Claim by the next holder: %v", err)
		}
	}
	_, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1}}, set("zombie"))
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored != next {
		t.Fatalf("Apply across a claim = %v, want a *sink.FencedError naming %v", err, next)
	}
	if hooked != 1 {
		t.Fatalf("the hook ran %d times, want 1 (the apply did not take the watched path)", hooked)
	}
	if _, ok, _ := getKV(ctx, s, "k0"); ok {
		t.Fatal("the fenced batch wrote k0")
	}
	if n := fenceNext(t, s, tok); n != "0" {
		t.Fatalf("NextOffset = %s after the fenced batch, want 0", n)
	}
}

// Another Sink of the same holder applying between the checks and EXEC
// (the fence moved, not the holder): EXEC writes nothing, the apply
// reads the fence again and applies only what is left, each record once.
func TestWatchedApplyMovedBeforeExec(t *testing.T) {
	s := openSink(t, "", Config{})
	other := openSink(t, s.Prefix(), Config{})
	ctx := t.Context()
	tok := testToken(t, 1)
	claimed(t, s, tok)
	once := false
	s.hookBeforeExec = func(ctx context.Context) {
		if once {
			return
		}
		once = true
		if _, err := other.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, set("other")); err != nil {
			t.Errorf("Apply through the other Sink: %v", err)
		}
	}
	res, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1}}, set("s"))
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if !res.Equal(sink.Result{Applied: 1, Skipped: 1, NextOffset: 2}) {
		t.Fatalf("Apply after the fence moved = %+v, want 1 applied, 1 skipped", res)
	}
	if v, _, _ := getKV(ctx, s, "k0"); v != "other" {
		t.Fatalf("k0 = %q, want the other Sink's value (the first EXEC wrote nothing)", v)
	}
	if n := fenceNext(t, s, tok); n != "2" {
		t.Fatalf("NextOffset = %s, want 2", n)
	}
}

// TestStaleCachedNext on the watched path: the NextOffset this Sink
// cached is stale, the check refuses it, the batch runs again on the
// stored one.
func TestWatchedStaleCachedNext(t *testing.T) {
	s1 := openSink(t, "", Config{})
	s2 := openSink(t, s1.Prefix(), Config{})
	ctx := t.Context()
	tok := testToken(t, 1)
	claimed(t, s1, tok)
	runs := 0
	count := func(ctx context.Context, tx *Tx, i int) error {
		runs++
		tx.Set("k"+strconv.Itoa(i), "v")
		return nil
	}
	if _, err := s2.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1}}, set("s2")); err != nil {
		t.Fatal(err)
	}
	res, err := s1.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1, 2, 3}}, count)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Equal(sink.Result{Applied: 2, Skipped: 2, NextOffset: 4}) {
		t.Fatalf("Apply with a stale cache = %+v, want 2 applied, 2 skipped", res)
	}
	if v, _, _ := getKV(ctx, s1, "k0"); v != "s2" {
		t.Fatalf("k0 = %q, want s2's value (offset 0 applied once)", v)
	}
}

// TestStaleCachedIDs on the watched path: the IDs version this Sink
// cached is stale, the check refuses its duplicate decisions.
func TestWatchedStaleCachedIDs(t *testing.T) {
	s1 := openSink(t, "", Config{})
	s2 := openSink(t, s1.Prefix(), Config{})
	ctx := t.Context()
	tok := testToken(t, 1)
	claimed(t, s1, tok)
	if _, err := s1.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}, IDs: []string{"a"}}, set("1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}, IDs: []string{"b"}}, set("2")); err != nil {
		t.Fatal(err)
	}
	res, err := s1.Apply(ctx, tok, sink.Batch{Offsets: []int64{2}, IDs: []string{"b"}}, func(ctx context.Context, tx *Tx, i int) error {
		tx.Set("b-again", "x")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Duplicates) != 1 || res.Applied != 0 {
		t.Fatalf("an Apply with IDs of b again through s1 = %+v, want it a duplicate", res)
	}
	if _, ok, _ := getKV(ctx, s1, "b-again"); ok {
		t.Fatal("the duplicate's effect was written")
	}
}

// A watched apply refused after its WATCH (a stale token) leaves no
// watch on the pooled connection: with a pool of one connection, a
// MULTI/EXEC after the fence changed still commits.
func TestWatchedRefusalReleasesWatch(t *testing.T) {
	opt, err := goredis.ParseURL(testredis.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.PoolSize, opt.MaxRetries = 1, -1
	rdb := goredis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	s := openSink(t, "", Config{Client: rdb})
	other := openSink(t, s.Prefix(), Config{})
	ctx := t.Context()
	old, tok := testToken(t, 1), testToken(t, 2)
	claimed(t, s, old) // s caches old as the holder: its apply goes to the WATCH
	claimed(t, other, tok)
	var fe *sink.FencedError
	if _, err := s.Apply(ctx, old, sink.Batch{Offsets: []int64{0}}, set("zombie")); !errors.As(err, &fe) {
		t.Fatalf("Apply of the superseded token = %v, want fenced", err)
	}
	if _, err := other.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, set("v")); err != nil { // touches the fence
		t.Fatal(err)
	}
	// A transaction on the client's pool (TxPipelined on the client may
	// take a connection of its own pipeline pool, Watch does not).
	if err := rdb.Watch(ctx, func(tx *goredis.Tx) error {
		_, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Set(ctx, s.Key("after"), "1", 0)
			return nil
		})
		return err
	}); err != nil {
		t.Fatalf("MULTI/EXEC on the connection the refused apply used: %v (a watch was left on it)", err)
	}
}

// With WaitReplicas, a watched apply that no replica acknowledges fails
// with ErrNotReplicated (the test server has no replica).
func TestWatchedWaitReplicas(t *testing.T) {
	s := openSink(t, "", Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	info, err := s.Client().Info(t.Context(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "connected_slaves:0") {
		t.Skipf("the test server has replicas: the unacknowledged write cannot be provoked")
	}
	tok := testToken(t, 1)
	if _, err := s.Claim(t.Context(), tok, sink.Observed{}); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Claim: %v, want ErrNotReplicated", err) // the claim landed, unreplicated
	}
	_, err = s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0}}, set("v"))
	if !errors.Is(err, ErrNotReplicated) || !s.IsSinkFailure(err) {
		t.Fatalf("watched Apply with WaitReplicas 1 and no replica: %v, want ErrNotReplicated, a sink failure", err)
	}
}

// TestWatchedPathStaleIDsVersion runs the watched path itself (the other
// watched tests of IDs run on a held watch): lanes always take it, and so
// does a plain an Apply with IDs with the held watches off. s1's cache of the
// scope's command IDs is at a version s2's batch moved since; s1's batch
// of the ID s2 applied first runs on s1's stale checkpoint (refused:
// the spans or NextOffset moved), then on the stored one with its stale
// IDs, which only the IDs version the watched check compares refuses;
// then it loads the IDs and finds the duplicate.
func TestWatchedPathStaleIDsVersion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		held  int
		apply func(s *Sink, tok epochs.Token, off int64, id string, effect sink.Effect[*Tx]) (sink.Result, error)
	}{
		{"Lanes", 0, func(s *Sink, tok epochs.Token, off int64, id string, effect sink.Effect[*Tx]) (sink.Result, error) {
			return s.Apply(context.Background(), tok, sink.Batch{Offsets: []int64{off}, From: []int64{off}, IDs: []string{id}}, effect)
		}},
		{"an Apply with IDsHeldOff", -1, func(s *Sink, tok epochs.Token, off int64, id string, effect sink.Effect[*Tx]) (sink.Result, error) {
			return s.Apply(context.Background(), tok, sink.Batch{Offsets: []int64{off}, IDs: []string{id}}, effect)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s1 := openSink(t, "", Config{HeldWatches: tc.held})
			s2 := openSink(t, s1.Prefix(), Config{HeldWatches: tc.held})
			ctx := t.Context()
			tok := testToken(t, 1)
			if _, err := s1.Claim(ctx, tok, sink.Observed{}); err != nil {
				t.Fatal(err)
			}
			if _, err := tc.apply(s1, tok, 0, "a", set("1")); err != nil {
				t.Fatal(err)
			}
			if _, err := tc.apply(s2, tok, 1, "b", set("2")); err != nil {
				t.Fatal(err)
			}
			if v, ok := s1.ids.Version(tok.Scope()); !ok || strconv.FormatInt(v+1, 10) != fenceField(t, s1, tok, "iv") {
				t.Fatalf("s1's IDs cache at version %d (%v), the fence's %s: want it one behind", v, ok, fenceField(t, s1, tok, "iv"))
			}
			res, err := tc.apply(s1, tok, 2, "b", func(ctx context.Context, tx *Tx, i int) error {
				tx.Set("b-again", "x")
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Duplicates) != 1 || res.Applied != 0 {
				t.Fatalf("b again through s1 = %+v, want it a duplicate", res)
			}
			if _, ok, _ := getKV(ctx, s1, "b-again"); ok {
				t.Fatal("the duplicate's effect was written")
			}
			for _, s := range []*Sink{s1, s2} {
				for _, o := range []string{heldOK, heldMoved, heldRefused, heldArmed, heldDropped, heldEvicted, heldNoPlaces} {
					if n := s.held.outcomes[o].Load(); n != 0 {
						t.Fatalf("a held watch counted %v %s: the batches did not all take the watched path", n, o)
					}
				}
			}
		})
	}
}

// fenceField reads field f of tok's scope's fence hash.
func fenceField(t *testing.T, s *Sink, tok epochs.Token, f string) string {
	t.Helper()
	v, err := s.Client().HGet(t.Context(), s.fenceKey(tok.Scope()), f).Result()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
