package memory_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestLaneEffectsRunConcurrently checks that a holder's
// a lane's Apply calls of one scope run their effects at the same time: each
// of n lanes' effect waits, inside the call, until all n effects have
// started. With the sink's lock held around effects (or installs that
// serialize the effects) the first lane would wait alone until its
// deadline and the test fails.
func TestLaneEffectsRunConcurrently(t *testing.T) {
	const n = 8
	s := memory.New()
	tok := token(1, "a")
	if _, err := s.Claim(t.Context(), tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	errs := make(chan error, n)
	for lane := range n {
		go func() {
			off := int64(lane)
			once := sync.OnceFunc(started.Done)
			_, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{off}, From: []int64{off}}, func(ctx context.Context, tx *memory.Tx, _ int) error {
				once()
				select {
				case <-all:
				case <-ctx.Done():
					return errors.New("the other lanes' effects did not start while this one ran")
				}
				tx.Put("k"+string(rune('a'+lane)), []byte("v"))
				return nil
			})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("a lane's Apply: %v", err)
		}
	}
	cp, err := s.Claim(t.Context(), tok, sink.Observed{})
	if err != nil || cp.NextOffset != n || len(cp.Done) != 0 {
		t.Fatalf("Claim after %d lanes = %+v, %v; want NextOffset %d, no span", n, cp, err, n)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestGappedEventsAndVerify checks the history of gapped applies: the
// events say Gapped and lanes' offsets out of order across calls are no
// O violation.
func TestGappedEventsAndVerify(t *testing.T) {
	s := memory.New()
	tok := token(1, "a")
	if _, err := s.Claim(t.Context(), tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	nop := func(context.Context, *memory.Tx, int) error { return nil }
	for _, off := range []int64{5, 2, 0} {
		if _, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{off}, From: []int64{off}}, nop); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Verify(); err != nil {
		t.Fatalf("Verify after out-of-order lanes: %v", err)
	}
	var gapped []int64
	for _, ev := range s.Events() {
		if ev.Kind == memory.Apply && ev.Gapped {
			gapped = append(gapped, ev.Offsets...)
		}
	}
	if !slices.Equal(gapped, []int64{5, 2, 0}) {
		t.Fatalf("gapped apply events hold offsets %v, want [5 2 0]", gapped)
	}
	cp, err := s.Claim(t.Context(), tok, sink.Observed{})
	if err != nil || cp.NextOffset != 1 || !slices.Equal(cp.Done, []sink.Span{{From: 2, To: 3}, {From: 5, To: 6}}) {
		t.Fatalf("Claim = %+v, %v; want NextOffset 1 and spans [2,3) [5,6)", cp, err)
	}
}

// TestLaneOverlapAppliedOnce checks the install's re-check: two
// a lane's Apply calls of one holder with the same offset run their effects
// at the same time (each waits inside its effect for the other); the
// first to install applies it, the second finds it done at its install,
// runs again on a fresh snapshot and skips it. Without the re-check both
// would land and the history would apply offset 0 twice (X).
func TestLaneOverlapAppliedOnce(t *testing.T) {
	s := memory.New()
	tok := token(1, "a")
	if _, err := s.Claim(t.Context(), tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var both sync.WaitGroup
	both.Add(2)
	type result struct {
		res sink.Result
		err error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			first := true
			res, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}, From: []int64{0}}, func(ctx context.Context, tx *memory.Tx, _ int) error {
				if first {
					first = false
					both.Done()
					both.Wait()
				}
				tx.Put("k", []byte("v"))
				return nil
			})
			results <- result{res, err}
		}()
	}
	applied := 0
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		applied += r.res.Applied
	}
	if applied != 1 {
		t.Fatalf("two overlapping a lane's Apply calls applied offset 0 %d times, want once", applied)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}
