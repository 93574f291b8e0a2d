package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/memory"
	"github.com/workrouter/workrouter/sink/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// harness adapts the memory sink to the conformance suite.
func harness() sinktest.Harness[*memory.Tx] {
	return sinktest.Harness[*memory.Tx]{
		Open: func(t testing.TB) sink.Sink[*memory.Tx] {
			s := memory.New()
			t.Cleanup(func() {
				if err := s.Verify(); err != nil {
					t.Errorf("history of the conformance sink: %v", err)
				}
			})
			return s
		},
		Put: func(_ context.Context, tx *memory.Tx, key, value string) error {
			tx.Put(key, []byte(value))
			return nil
		},
		Get: func(_ context.Context, s sink.Sink[*memory.Tx], key string) (string, bool, error) {
			v, ok := s.(*memory.Sink).Get(key)
			return string(v), ok, nil
		},
		RequireGaps: true,
	}
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, harness())
}

func token(epoch int32, member string) epochs.Token {
	return epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: epoch, Member: member}
}

// TestBlockedEffectDoesNotBlockClaim checks that Apply runs effects without
// the sink's lock: a handler stuck inside Apply (a paused zombie) must not
// stop the new tenure's Claim, and once it wakes its write is fenced.
func TestBlockedEffectDoesNotBlockClaim(t *testing.T) {
	s := memory.New()
	old, newer := token(1, "zombie"), token(2, "successor")
	if _, err := s.Claim(t.Context(), old, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	applyDone := make(chan error, 1)
	go func() {
		_, err := s.Apply(t.Context(), old, sink.Batch{Offsets: []int64{0, 1}}, func(_ context.Context, tx *memory.Tx, i int) error {
			tx.Put("k"+strconv.Itoa(i), []byte("zombie"))
			if i == 0 {
				close(entered)
				<-release
			}
			return nil
		})
		applyDone <- err
	}()
	<-entered

	claimDone := make(chan error, 1)
	go func() {
		_, err := s.Claim(t.Context(), newer, sink.Observed{})
		claimDone <- err
	}()
	select {
	case err := <-claimDone:
		if err != nil {
			t.Fatalf("Claim by %s while an Apply is blocked: %v", newer, err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		<-applyDone
		t.Fatal("Claim blocked behind an Apply whose effect is blocked")
	}
	// Reads and listings are not blocked either.
	if _, ok := s.Get("k0"); ok {
		t.Fatal("effect of the blocked Apply visible before it committed")
	}
	if _, err := s.Fences(t.Context()); err != nil {
		t.Fatal(err)
	}

	close(release)
	err := <-applyDone
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Op != sink.OpApply || fe.Stored != newer || fe.Offered != old {
		t.Fatalf("woken Apply: error %v, want *sink.FencedError{apply, stored %s, offered %s}", err, newer, old)
	}
	for _, k := range []string{"k0", "k1"} {
		if v, ok := s.Get(k); ok {
			t.Fatalf("fenced Apply left %s=%q", k, v)
		}
	}
	if next, err := nextOf(s.Claim(t.Context(), newer, sink.Observed{})); err != nil || next != 0 {
		t.Fatalf("re-Claim = %d, %v; want 0, nil", next, err)
	}
	if got := s.Rejected(); got != 1 {
		t.Fatalf("Rejected() = %d, want 1", got)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestConflictingAppliesSerialize runs read-modify-write effects on one
// shared key from many scopes at once: optimistic validation must re-run
// effects whose reads went stale, so no increment is lost.
func TestConflictingAppliesSerialize(t *testing.T) {
	const workers, batches, perBatch = 8, 20, 3
	s := memory.New()
	var wg sync.WaitGroup
	for w := range workers {
		tok := epochs.Token{Group: "g", Topic: "t", Partition: int32(w), Epoch: 1, Member: "m"}
		if _, err := s.Claim(t.Context(), tok, sink.Observed{}); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for b := range batches {
				offs := []int64{int64(b * perBatch), int64(b*perBatch + 1), int64(b*perBatch + 2)}
				_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offs}, func(_ context.Context, tx *memory.Tx, i int) error {
					v, _ := tx.Get("counter")
					n, _ := strconv.Atoi(string(v))
					tx.Put("counter", []byte(strconv.Itoa(n+1)))
					return nil
				})
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	v, _ := s.Get("counter")
	if want := strconv.Itoa(workers * batches * perBatch); string(v) != want {
		t.Fatalf("counter = %s, want %s (lost updates)", v, want)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestPrefixScanConflict checks that a Keys scan is validated too: an
// effect that counts keys under a prefix and records the count must be
// re-run if another commit adds a key under that prefix.
func TestPrefixScanConflict(t *testing.T) {
	s := memory.New()
	a := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "a"}
	b := epochs.Token{Group: "g", Topic: "t", Partition: 1, Epoch: 1, Member: "b"}
	for _, tok := range []epochs.Token{a, b} {
		if _, err := s.Claim(t.Context(), tok, sink.Observed{}); err != nil {
			t.Fatal(err)
		}
	}
	var runs int
	_, err := s.Apply(t.Context(), a, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx *memory.Tx, _ int) error {
		runs++
		n := len(tx.Keys("item/"))
		if runs == 1 {
			// Another scope commits a new item while this effect runs.
			if _, err := s.Apply(ctx, b, sink.Batch{Offsets: []int64{0}}, func(_ context.Context, tx2 *memory.Tx, _ int) error {
				tx2.Put("item/b", []byte("x"))
				return nil
			}); err != nil {
				return err
			}
		}
		tx.Put("count", []byte(strconv.Itoa(n)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Fatalf("effect ran %d times, want 2 (stale scan must force a re-run)", runs)
	}
	if v, _ := s.Get("count"); string(v) != "1" {
		t.Fatalf("count = %s, want 1", v)
	}
}

func TestTxSemantics(t *testing.T) {
	s := memory.New()
	tok := token(1, "m")
	if _, err := s.Claim(t.Context(), tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	put := func(off int64, f func(tx *memory.Tx)) {
		t.Helper()
		if _, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{off}}, func(_ context.Context, tx *memory.Tx, _ int) error {
			f(tx)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	put(0, func(tx *memory.Tx) {
		tx.Put("a/1", []byte("one"))
		tx.Put("a/2", []byte("two"))
		tx.Put("b/1", []byte("other"))
	})
	put(1, func(tx *memory.Tx) {
		if v, ok := tx.Get("a/1"); !ok || string(v) != "one" {
			t.Errorf("Tx.Get(a/1) = %q, %v", v, ok)
		}
		tx.Put("a/1", []byte("uno"))
		if v, _ := tx.Get("a/1"); string(v) != "uno" {
			t.Errorf("Tx.Get does not see own write: %q", v)
		}
		tx.Delete("a/2")
		if _, ok := tx.Get("a/2"); ok {
			t.Error("Tx.Get sees a key deleted in the same Tx")
		}
		tx.Put("a/3", []byte("three"))
		if got := fmt.Sprint(tx.Keys("a/")); got != "[a/1 a/3]" {
			t.Errorf("Tx.Keys(a/) = %s, want [a/1 a/3]", got)
		}
		if got := fmt.Sprint(s.Keys("a/")); got != "[a/1 a/2]" {
			t.Errorf("uncommitted writes visible: Sink.Keys(a/) = %s", got)
		}
		v, _ := tx.Get("b/1")
		v[0] = 'X' // Get returns a copy
	})
	if got := fmt.Sprint(s.Keys("a/")); got != "[a/1 a/3]" {
		t.Errorf("Sink.Keys(a/) = %s, want [a/1 a/3]", got)
	}
	if v, _ := s.Get("b/1"); string(v) != "other" {
		t.Errorf("b/1 = %q, mutated through a returned slice", v)
	}
	if v, _ := s.Get("a/1"); string(v) != "uno" {
		t.Errorf("a/1 = %q", v)
	}
	if _, ok := s.Get("a/2"); ok {
		t.Error("deleted a/2 still present")
	}
}

func TestResetFenceAudit(t *testing.T) {
	s := memory.New()
	tok := token(4, "m")
	if _, err := s.Claim(t.Context(), tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	seen := sink.Fence{Scope: tok.Scope(), Holder: tok}
	if _, err := s.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: tok.Scope(), Expect: seen, Reason: " "}); !errors.Is(err, memory.ErrNoReason) {
		t.Fatalf("ResetFence with blank reason: %v, want ErrNoReason", err)
	}
	if _, err := s.ResetFence(t.Context(), fenceadmin.ResetRequest{Reason: "why"}); !errors.Is(err, epochs.ErrInvalidToken) {
		t.Fatalf("ResetFence of invalid scope: %v, want epochs.ErrInvalidToken", err)
	}
	if _, err := s.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: tok.Scope(), Expect: seen, Reason: "group recreated"}); err != nil {
		t.Fatal(err)
	}
	audit := s.Audit()
	if len(audit) != 1 {
		t.Fatalf("Audit() has %d entries, want 1", len(audit))
	}
	a := audit[0]
	if a.Scope != tok.Scope() || a.Before.Holder != tok || a.Reason != "group recreated" {
		t.Fatalf("audit entry %+v", a)
	}
	evs := s.Events()
	last := evs[len(evs)-1]
	if last.Seq != a.Seq || last.Kind != memory.Reset || last.Stored != tok || last.Reason != a.Reason {
		t.Fatalf("last event %+v does not match audit %+v", last, a)
	}
	// A lower epoch claims after the reset: not a violation.
	if _, err := s.Claim(t.Context(), token(1, "new"), sink.Observed{Proof: &sink.Proof{Version: versionOf(t, s, token(1, "new").Scope())}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestEventsRecordDecisions(t *testing.T) {
	s := memory.New()
	a, b := token(1, "a"), token(2, "b")
	ctx := t.Context()
	noop := func(context.Context, *memory.Tx, int) error { return nil }
	s.Claim(ctx, a, sink.Observed{})
	s.Apply(ctx, a, sink.Batch{Offsets: []int64{0, 1}}, noop)
	s.Apply(ctx, a, sink.Batch{Offsets: []int64{1, 2}}, noop) // 1 skipped
	s.Claim(ctx, b, sink.Observed{})
	s.Apply(ctx, a, sink.Batch{Offsets: []int64{3}}, noop) // fenced
	s.Claim(ctx, a, sink.Observed{})                       // fenced
	got := s.Events()
	for i := range got {
		if got[i].At.IsZero() {
			t.Errorf("event %d has no time", got[i].Seq)
		}
		got[i].At = time.Time{}
	}
	want := []memory.Event{
		{Seq: 1, Kind: memory.Claim, Scope: a.Scope(), Token: a, Accepted: true},
		{Seq: 2, Kind: memory.Apply, Scope: a.Scope(), Token: a, Offsets: []int64{0, 1}, Accepted: true, Stored: a},
		{Seq: 3, Kind: memory.Apply, Scope: a.Scope(), Token: a, Offsets: []int64{2}, Accepted: true, Stored: a},
		{Seq: 4, Kind: memory.Claim, Scope: a.Scope(), Token: b, Accepted: true, Stored: a, NextOffset: 3},
		{Seq: 5, Kind: memory.Apply, Scope: a.Scope(), Token: a, Stored: b},
		{Seq: 6, Kind: memory.Claim, Scope: a.Scope(), Token: a, Stored: b},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Events() =\n%v\nwant\n%v", got, want)
	}
	if s.Rejected() != 2 {
		t.Fatalf("Rejected() = %d, want 2", s.Rejected())
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestEventsKeepBatchIDs: the event of an Apply with IDs lists the IDs of the
// records it ran, by index of its offsets ("" for a record without one),
// and none of the duplicates, also after the caller reused the slice it
// passed; an Apply with IDs that ran nothing has an empty list, a plain Apply
// none (nil), before and after events with IDs.
func TestEventsKeepBatchIDs(t *testing.T) {
	s := memory.New()
	a := token(1, "a")
	ctx := t.Context()
	noop := func(context.Context, *memory.Tx, int) error { return nil }
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0}}, noop); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0}, IDs: []string{"w"}}, noop); err != nil { // below NextOffset: skipped
		t.Fatal(err)
	}
	ids := []string{"x", "", "y", "x"}
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{1, 2, 3, 4}, IDs: ids}, noop); err != nil {
		t.Fatal(err)
	}
	ids[0], ids[2] = "changed", "changed"
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{5, 6}, IDs: []string{"y", "z"}}, noop); err != nil { // y: a duplicate
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{3}, IDs: []string{"w"}}, noop); err != nil { // below NextOffset: skipped
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{7}}, noop); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	var nils []bool
	for _, ev := range s.Events() {
		if ev.Kind == memory.Apply {
			got, nils = append(got, ev.IDs), append(nils, ev.IDs == nil)
		}
	}
	want := [][]string{nil, {}, {"x", "", "y"}, {"z"}, {}, nil}
	wantNil := []bool{true, false, false, false, false, true}
	if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(nils) != fmt.Sprint(wantNil) {
		t.Fatalf("the Apply events' IDs are %q (nil: %v), want %q (nil: %v)", got, nils, want, wantNil)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

func ExampleSink() {
	ctx := context.Background()
	s := memory.New()
	tok := epochs.Token{Group: "billing", Topic: "invoices", Partition: 0, Epoch: 1, Member: "worker-a"}

	next, _ := nextOf(s.Claim(ctx, tok, sink.Observed{}))
	fmt.Println("resume at", next)

	send := func(_ context.Context, tx *memory.Tx, i int) error {
		tx.Put("invoice/"+strconv.Itoa(i), []byte("sent"))
		return nil
	}
	res, _ := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1}}, send)
	fmt.Println("applied", res.Applied, "next", res.NextOffset)

	// worker-a pauses; the group hands the partition to worker-b.
	successor := tok
	successor.Epoch, successor.Member = 2, "worker-b"
	next, _ = nextOf(s.Claim(ctx, successor, sink.Observed{}))
	fmt.Println("successor resumes at", next)

	// worker-a wakes up and writes: the sink refuses it.
	_, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{2}}, send)
	fmt.Println("zombie fenced:", errors.Is(err, sink.ErrFenced))

	fmt.Println(s.Keys("invoice/"))
	fmt.Println("verify:", s.Verify(), "rejected:", s.Rejected())
	// Output:
	// resume at 0
	// applied 2 next 2
	// successor resumes at 2
	// zombie fenced: true
	// [invoice/0 invoice/1]
	// verify: <nil> rejected: 1
}

// versionOf returns the version of scope's fence in s (what a claimer
// reads before it proves its membership).
func versionOf(t testing.TB, s *memory.Sink, scope epochs.Scope) int64 {
	t.Helper()
	fences, err := s.Fences(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fences {
		if f.Scope == scope {
			return f.Version
		}
	}
	t.Fatalf("no fence of %s", scope)
	return 0
}
