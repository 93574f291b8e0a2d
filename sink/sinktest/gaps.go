package sinktest

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// The tests of sink.Features.Gaps, the checkpoint with gaps
// (docs/design.md#gaps). They run when the sink under test declares it,
// and Harness.RequireGaps makes its absence a failure. The
// effects write key(t, "g", offset) = "v" (or "at <offset>" for the
// ID-keyed ones), so a record that ran twice or under a fenced tenure
// shows.

// testGapsRequired: a harness that sets RequireGaps fails when its sink
// does not declare Features.Gaps (every backend of this module does), and
// when the metrics wrapper loses it.
func (c *suite[Tx]) testGapsRequired(t *testing.T) {
	s := c.h.Open(t)
	if !s.Features().Gaps {
		if c.h.RequireGaps {
			t.Fatalf("sinktest: %T does not declare Features.Gaps (docs/design.md#gaps: every backend of this module must)", s)
		}
		t.Skip("sinktest: the sink does not declare Features.Gaps (Harness.RequireGaps is false)")
	}
	if !wrapMetrics(t, s).Features().Gaps {
		t.Fatalf("the metrics wrapper of %T does not declare Features.Gaps", s)
	}
}

// gaps returns s if it declares Features.Gaps, or skips the test.
func (c *suite[Tx]) gaps(t testing.TB, s sink.Sink[Tx]) sink.Sink[Tx] {
	t.Helper()
	if !s.Features().Gaps {
		t.Skip("sinktest: the sink does not declare Features.Gaps")
	}
	return s
}

// plain returns a batch whose records cover only their own offsets.
func plain(offs ...int64) sink.Batch {
	return sink.Batch{Offsets: offs, From: slices.Clone(offs)}
}

// cp is a checkpoint literal: next, then From, To pairs.
func cp(next int64, spans ...int64) sink.Checkpoint {
	c := sink.Checkpoint{NextOffset: next}
	for i := 0; i+1 < len(spans); i += 2 {
		c.Done = append(c.Done, sink.Span{From: spans[i], To: spans[i+1]})
	}
	return c
}

func sameCheckpoint(a, b sink.Checkpoint) bool {
	return a.NextOffset == b.NextOffset && slices.Equal(a.Done, b.Done)
}

// claimGapped claims with Claim and fails the test on an error.
func claimGapped[Tx any](t testing.TB, g sink.Sink[Tx], tok epochs.Token) sink.Checkpoint {
	t.Helper()
	got, err := g.Claim(t.Context(), tok, sink.Observed{})
	if err != nil {
		t.Fatalf("Claim(%s): %v", tok, err)
	}
	if err := got.Valid(); err != nil {
		t.Fatalf("Claim(%s) = %+v: %v", tok, got, err)
	}
	return got
}

// claimGappedProven claims tok's scope with Claim as the consumer
// does after a reset: it claims; if the sink asks a proof of membership,
// it claims again with a proof made at the fence version the refusal
// names (a test stands in for the broker: its proof always holds).
func claimGappedProven[Tx any](t testing.TB, g sink.Sink[Tx], tok epochs.Token) (sink.Checkpoint, error) {
	t.Helper()
	got, err := g.Claim(t.Context(), tok, sink.Observed{})
	var pe *sink.ProofRequiredError
	if errors.As(err, &pe) {
		got, err = g.Claim(t.Context(), tok, sink.Observed{Proof: &sink.Proof{Version: pe.Version}})
	}
	return got, err
}

// mustCheckpoint asserts the scope's checkpoint by re-claiming with its
// holder's own token (idempotent).
func mustCheckpoint[Tx any](t testing.TB, g sink.Sink[Tx], holder epochs.Token, want sink.Checkpoint) {
	t.Helper()
	if got := claimGapped(t, g, holder); !sameCheckpoint(got, want) {
		t.Fatalf("checkpoint (Claim by %s) = %+v, want %+v", holder, got, want)
	}
}

// gapEffect writes key(t, "g", offsets[i]) = "v".
func (c *suite[Tx]) gapEffect(t testing.TB, offsets []int64) sink.Effect[Tx] {
	return c.putEffect(t, "g", offsets, "v")
}

// applyGapped applies b with gapEffect and fails the test on an error;
// the result's NextOffset may not be above the exact watermark want (a
// backend may raise it lazily) and may not be below the one before.
func (c *suite[Tx]) applyGapped(t testing.TB, g sink.Sink[Tx], tok epochs.Token, b sink.Batch) sink.Result {
	t.Helper()
	res, err := g.Apply(t.Context(), tok, b, c.gapEffect(t, b.Offsets))
	if err != nil {
		t.Fatalf("Apply of a lane's batch (%s, %v from %v): %v", tok, b.Offsets, b.From, err)
	}
	if got := res.Applied + res.Skipped + len(res.Duplicates); got != len(b.Offsets) {
		t.Fatalf("Apply of a lane's batch: result %+v accounts for %d records of %d", res, got, len(b.Offsets))
	}
	return res
}

// mustApplied asserts Applied and Skipped, and that the result's
// NextOffset is at most next, the exact watermark (a backend may report a
// lower one: sink.Features.Gaps).
func mustApplied(t testing.TB, res sink.Result, applied, skipped int, next int64) {
	t.Helper()
	if res.Applied != applied || res.Skipped != skipped || res.NextOffset > next {
		t.Fatalf("Apply of a lane's batch: result = %+v, want %d applied, %d skipped, NextOffset at most %d", res, applied, skipped, next)
	}
}

func (c *suite[Tx]) mustGapKeys(t testing.TB, s sink.Sink[Tx], offs ...int64) {
	t.Helper()
	for _, o := range offs {
		c.mustGet(t, s, key(t, "g", o), "v")
	}
}

func (c *suite[Tx]) mustNoGapKeys(t testing.TB, s sink.Sink[Tx], offs ...int64) {
	t.Helper()
	for _, o := range offs {
		c.mustAbsent(t, s, key(t, "g", o))
	}
}

// testGapsNonContiguous: lanes' batches land out of order; the watermark
// rises over every contiguous run, including offsets without a record
// that a record's From covers.
func (c *suite[Tx]) testGapsNonContiguous(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	a := tokenFor(scopeFor(t), 1, "a")
	if got := claimGapped(t, g, a); !sameCheckpoint(got, cp(0)) {
		t.Fatalf("first Claim = %+v, want offset 0 and no span", got)
	}
	mustApplied(t, c.applyGapped(t, g, a, plain(2, 5)), 2, 0, 0)
	mustCheckpoint(t, g, a, cp(0, 2, 3, 5, 6))
	// 0 and 1 land: the watermark rises over 0..2 and stops at 3.
	mustApplied(t, c.applyGapped(t, g, a, plain(0, 1)), 2, 0, 3)
	mustCheckpoint(t, g, a, cp(3, 5, 6))
	// The record at 4 covers 3 (a transaction marker): the watermark
	// rises over 3..5.
	mustApplied(t, c.applyGapped(t, g, a, sink.Batch{Offsets: []int64{4}, From: []int64{3}}), 1, 0, 6)
	mustCheckpoint(t, g, a, cp(6))
	// From covering offsets between two records of one batch leaves a span
	// that touches nothing below.
	mustApplied(t, c.applyGapped(t, g, a, sink.Batch{Offsets: []int64{9, 12}, From: []int64{8, 10}}), 2, 0, 6)
	mustCheckpoint(t, g, a, cp(6, 8, 13))
	c.mustGapKeys(t, s, 0, 1, 2, 4, 5, 9, 12)
	c.mustNoGapKeys(t, s, 3, 8, 10, 11)
	if next := c.claim(t, s, a); next != 6 {
		t.Fatalf("plain Claim of the gapped scope = %d, want the watermark 6", next)
	}
}

// testGapsSkipDone: records in a done span, or below the watermark, are
// skipped, never run; the others of the batch run.
func (c *suite[Tx]) testGapsSkipDone(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	a := tokenFor(scopeFor(t), 1, "a")
	claimGapped(t, g, a)
	c.applyGapped(t, g, a, plain(0, 3, 4))
	b := plain(0, 2, 3, 5)
	var ran []int64
	res, err := g.Apply(t.Context(), a, b, func(ctx context.Context, tx Tx, i int) error {
		ran = append(ran, b.Offsets[i])
		return c.h.Put(ctx, tx, key(t, "g", b.Offsets[i]), "again")
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ran, []int64{2, 5}) {
		t.Fatalf("effects ran for offsets %v, want only the undone [2 5] (a backend may retry, but never run a done offset)", ran)
	}
	mustApplied(t, res, 2, 2, 6)
	mustCheckpoint(t, g, a, cp(1, 2, 6))
	c.mustGet(t, s, key(t, "g", 0), "v")
	c.mustGet(t, s, key(t, "g", 3), "v")
	c.mustGet(t, s, key(t, "g", 2), "again")
}

// testGapsReplay: a gapped batch replayed whole is a no-op, and replayed
// partly runs only what it did not apply.
func (c *suite[Tx]) testGapsReplay(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	a := tokenFor(scopeFor(t), 1, "a")
	claimGapped(t, g, a)
	b := sink.Batch{Offsets: []int64{3, 7, 9}, From: []int64{2, 6, 8}}
	c.applyGapped(t, g, a, b)
	want := cp(0, 2, 4, 6, 10)
	mustCheckpoint(t, g, a, want)
	res, err := g.Apply(t.Context(), a, b, failIfRun[Tx](t))
	if err != nil {
		t.Fatal(err)
	}
	mustApplied(t, res, 0, 3, 0)
	mustCheckpoint(t, g, a, want)
	// A partial replay: 7 and 9 again, with 12 new.
	p := sink.Batch{Offsets: []int64{7, 9, 12}, From: []int64{6, 8, 10}}
	var ran []int64
	res, err = g.Apply(t.Context(), a, p, func(ctx context.Context, tx Tx, i int) error {
		ran = append(ran, p.Offsets[i])
		return c.h.Put(ctx, tx, key(t, "g", p.Offsets[i]), "v")
	})
	if err != nil || !slices.Equal(ran, []int64{12}) {
		t.Fatalf("partial replay ran %v (%v), want only [12]", ran, err)
	}
	mustApplied(t, res, 1, 2, 0)
	mustCheckpoint(t, g, a, cp(0, 2, 4, 6, 13))
}

// testGapsClaimAfterCrash: a worker applied lanes ahead of each other and
// crashed; the new owner's Claim returns exactly the watermark and
// the spans, and it applies exactly the rest.
func (c *suite[Tx]) testGapsClaimAfterCrash(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	claimGapped(t, g, a)
	c.applyGapped(t, g, a, plain(0, 1))
	c.applyGapped(t, g, a, plain(4, 6))
	c.applyGapped(t, g, a, sink.Batch{Offsets: []int64{9}, From: []int64{8}})
	// a crashes here. b takes over.
	got := claimGapped(t, g, b)
	want := cp(2, 4, 5, 6, 7, 8, 10)
	if !sameCheckpoint(got, want) {
		t.Fatalf("the new owner's Claim = %+v, want %+v", got, want)
	}
	for _, o := range []int64{0, 1, 4, 6, 8, 9, 12} {
		if got.Contains(o) != slices.Contains([]int64{0, 1, 4, 6, 8, 9}, o) {
			t.Fatalf("checkpoint %+v Contains(%d) = %v", got, o, got.Contains(o))
		}
	}
	rest := plain(2, 3, 4, 5, 6, 7, 9, 10)
	var ran []int64
	_, err := g.Apply(t.Context(), b, rest, func(ctx context.Context, tx Tx, i int) error {
		ran = append(ran, rest.Offsets[i])
		return c.h.Put(ctx, tx, key(t, "g", rest.Offsets[i]), "v")
	})
	if err != nil || !slices.Equal(ran, []int64{2, 3, 5, 7, 10}) {
		t.Fatalf("the new owner ran %v (%v), want exactly the offsets not done [2 3 5 7 10]", ran, err)
	}
	mustCheckpoint(t, g, b, cp(11))
}

// zombieSetup opens a sink whose scope a holds (epoch 1) with offset 1
// applied by a lane, and returns it with the token b (epoch 2) of the
// tenure that supersedes a: the start of the zombie-lane tests.
func (c *suite[Tx]) zombieSetup(t *testing.T) (sink.Sink[Tx], sink.Sink[Tx], epochs.Token, epochs.Token) {
	t.Helper()
	s := c.h.Open(t)
	g := c.gaps(t, s)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	claimGapped(t, g, a)
	c.applyGapped(t, g, a, plain(1))
	return s, g, a, b
}

// testGapsZombieLane: a lane of the old tenure that applies after the new
// owner's Claim is fenced and writes nothing, and the checkpoint
// does not move.
func (c *suite[Tx]) testGapsZombieLane(t *testing.T) {
	s, g, a, b := c.zombieSetup(t)
	claimGapped(t, g, b)
	_, err := g.Apply(t.Context(), a, plain(0, 3), failIfRun[Tx](t))
	mustFenced(t, err, sink.OpApply, b, a)
	mustCheckpoint(t, g, b, cp(0, 1, 2))
	c.mustNoGapKeys(t, s, 0, 3)
	_, err = g.DeadLetter(t.Context(), a, poison(0).InLane(0))
	mustFenced(t, err, sink.OpDeadLetter, b, a)
	mustCheckpoint(t, g, b, cp(0, 1, 2))
}

// testGapsClaimDuringLaneEffect: a lane whose tenure is superseded while
// its effects run (it read the fence as the holder, then the new owner's
// Claim landed) is fenced at its end and writes nothing: neither
// its effects nor its offsets. This is the zombie lane in flight: its
// early read saw the old holder, so only the check in the lane's write
// can catch it (or, in a backend that learns of the claim through the
// same sink, that knowledge: Redis refuses it before its script runs).
func (c *suite[Tx]) testGapsClaimDuringLaneEffect(t *testing.T) {
	if c.h.WritesSerialized {
		t.Skip("sinktest: Harness.WritesSerialized: a claim cannot land while a lane runs its effect, so this race cannot happen")
	}
	s, g, a, b := c.zombieSetup(t)
	offs := []int64{0, 3}
	put := c.gapEffect(t, offs)
	var (
		raced   bool
		claimed sink.Checkpoint
	)
	_, err := g.Apply(t.Context(), a, plain(offs...), func(ctx context.Context, tx Tx, i int) error {
		if !raced {
			raced = true
			claimed = claimGapped(t, g, b)
		}
		return put(ctx, tx, i)
	})
	if !raced {
		t.Fatal("the lane never ran its effect: the race did not happen")
	}
	if !sameCheckpoint(claimed, cp(0, 1, 2)) {
		t.Fatalf("Claim by %s during the lane's effect = %+v, want %+v", b, claimed, cp(0, 1, 2))
	}
	mustFenced(t, err, sink.OpApply, b, a)
	c.mustNoGapKeys(t, s, offs...)
	mustCheckpoint(t, g, b, cp(0, 1, 2))
}

// testGapsSameEpochResetDuringLane: a lane of a (epoch 5) whose effects
// are running when an operator resets the scope and member b claims it,
// with a proof, at the very epoch 5, is fenced at its end and writes
// nothing: the lane's check compares the member, not only the epoch.
// (testSameEpochResetDuringApply is the plain path's.)
func (c *suite[Tx]) testGapsSameEpochResetDuringLane(t *testing.T) {
	if c.h.WritesSerialized {
		t.Skip("sinktest: Harness.WritesSerialized: a reset cannot land while a lane runs its effect, so this race cannot happen")
	}
	s := c.h.Open(t)
	g := c.gaps(t, s)
	r, _ := c.resetter(t, s)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 5, "a"), tokenFor(scope, 5, "b")
	claimGapped(t, g, a)
	c.applyGapped(t, g, a, plain(1))
	offs := []int64{0, 3}
	put := c.gapEffect(t, offs)
	raced := false
	_, err := g.Apply(t.Context(), a, plain(offs...), func(ctx context.Context, tx Tx, i int) error {
		if !raced {
			raced = true
			reset(t, r, scope, a, 0)
			if _, err := claimGappedProven(t, g, b); err != nil {
				t.Errorf("proven Claim by %s during a's lane: %v", b, err)
			}
		}
		return put(ctx, tx, i)
	})
	if !raced {
		t.Fatal("a's lane never ran its effect: the race did not happen")
	}
	mustFenced(t, err, sink.OpApply, b, a)
	c.mustNoGapKeys(t, s, offs...)
	mustCheckpoint(t, g, b, cp(0, 1, 2))
}

// testGapsConcurrentLanes: many goroutines of one holder apply disjoint
// offsets of one scope at once, in batches; every record lands once and
// the final checkpoint is exact.
func (c *suite[Tx]) testGapsConcurrentLanes(t *testing.T) {
	const lanes, perLane, batch = 16, 24, 4
	s := c.h.Open(t)
	g := c.gaps(t, s)
	a := tokenFor(scopeFor(t), 1, "a")
	claimGapped(t, g, a)
	var wg sync.WaitGroup
	for lane := range lanes {
		wg.Go(func() {
			// Lane l owns the offsets l, l+lanes, …; each record covers
			// only itself.
			for k := 0; k < perLane; k += batch {
				var offs []int64
				for j := k; j < k+batch; j++ {
					offs = append(offs, int64(j*lanes+lane))
				}
				if _, err := g.Apply(t.Context(), a, plain(offs...), c.gapEffect(t, offs)); err != nil {
					t.Errorf("lane %d Apply(%v): %v", lane, offs, err)
					return
				}
			}
		})
	}
	wg.Wait()
	n := int64(lanes * perLane)
	mustCheckpoint(t, g, a, cp(n))
	c.mustGapKeys(t, s, offsetsRange(0, n)...)
}

// testGapsOverlapAppliedOnce: units of one holder that share offsets,
// each of which read them as not done before either committed (a late
// attempt and a retry of another shape: a prefix after a handler error,
// a batch again after a same-token re-claim), apply every shared offset
// once: the unit that commits second finds them done and runs again
// without them (sink.Features.Gaps: offsets already done are skipped, never
// run twice). The overlap is made deterministic: the second unit runs
// whole inside the first one's effect (both orders of the shapes, and a
// dead letter as the second), or both wait inside their first effect
// until the other is there too. Every unit writes keys of its own, so a
// record applied by both shows.
func (c *suite[Tx]) testGapsOverlapAppliedOnce(t *testing.T) {
	if c.h.WritesSerialized {
		t.Skip("sinktest: Harness.WritesSerialized: a unit holds the write lock while its effects run, so no other unit can read, let alone commit, before it commits: two units cannot both read an offset as not done")
	}
	t.Run("InnerPrefix", func(t *testing.T) { c.overlapNested(t, []int64{0, 1, 2}, []int64{0, 1}) })
	t.Run("InnerLonger", func(t *testing.T) { c.overlapNested(t, []int64{0, 1}, []int64{0, 1, 2}) })
	t.Run("Concurrent", c.overlapConcurrent)
	t.Run("DeadLetter", c.overlapDeadLetter)
}

// unitEffect returns an effect that records the offsets it runs in ran
// and writes key(t, "g", offset, "-", unit) = "v".
func (c *suite[Tx]) unitEffect(t testing.TB, unit string, offs []int64, ran *[]int64) sink.Effect[Tx] {
	return func(ctx context.Context, tx Tx, i int) error {
		*ran = append(*ran, offs[i])
		return c.h.Put(ctx, tx, key(t, "g", offs[i], "-", unit), "v")
	}
}

// mustAppliedBy asserts that every offset of offs was applied by exactly
// one of units (its key of that unit is written, the others' are not) and
// returns which unit applied each.
func (c *suite[Tx]) mustAppliedBy(t testing.TB, s sink.Sink[Tx], offs []int64, units ...string) map[int64]string {
	t.Helper()
	by := map[int64]string{}
	for _, o := range offs {
		var applied []string
		for _, u := range units {
			if _, ok, err := c.h.Get(t.Context(), s, key(t, "g", o, "-", u)); err != nil {
				t.Fatalf("Get: %v", err)
			} else if ok {
				applied = append(applied, u)
			}
		}
		if len(applied) != 1 {
			t.Fatalf("offset %d was applied by %v, want exactly one of %v", o, applied, units)
		}
		by[o] = applied[0]
	}
	return by
}

// overlapNested: the unit outer reads its offsets as not done and, in its
// first effect, the unit inner (sharing offsets with it) runs and commits
// whole; then outer commits.
func (c *suite[Tx]) overlapNested(t *testing.T, outer, inner []int64) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	a := tokenFor(scopeFor(t), 1, "a")
	claimGapped(t, g, a)
	var (
		raced              bool
		outerRan, innerRan []int64
		innerRes           sink.Result
		innerErr           error
	)
	put := c.unitEffect(t, "outer", outer, &outerRan)
	res, err := g.Apply(t.Context(), a, plain(outer...), func(ctx context.Context, tx Tx, i int) error {
		if !raced {
			// outer runs its effects: it read every offset as not done.
			raced = true
			innerRes, innerErr = g.Apply(t.Context(), a, plain(inner...), c.unitEffect(t, "inner", inner, &innerRan))
		}
		return put(ctx, tx, i)
	})
	if !raced {
		t.Fatal("the outer unit never ran an effect: the overlap did not happen")
	}
	if innerErr != nil || !slices.Equal(innerRan, inner) || innerRes.Applied != len(inner) {
		t.Fatalf("the inner unit, inside the outer one's effect: ran %v: %+v, %v; want all of %v run and applied (it read none done)", innerRan, innerRes, innerErr, inner)
	}
	if err != nil {
		t.Fatalf("the outer unit: %v", err)
	}
	var rest []int64 // outer's offsets the inner unit did not apply
	for _, o := range outer {
		if !slices.Contains(inner, o) {
			rest = append(rest, o)
		}
	}
	if res.Applied != len(rest) || res.Skipped != len(outer)-len(rest) {
		t.Fatalf("the outer unit = %+v, want %d applied (%v) and the %d offsets the inner unit applied skipped (its effects ran for %v)",
			res, len(rest), rest, len(outer)-len(rest), outerRan)
	}
	all := append(slices.Clone(outer), inner...)
	slices.Sort(all)
	all = slices.Compact(all)
	by := c.mustAppliedBy(t, s, all, "outer", "inner")
	for _, o := range inner {
		if by[o] != "inner" {
			t.Fatalf("offset %d applied by %s, want by the inner unit, which committed first", o, by[o])
		}
	}
	mustCheckpoint(t, g, a, cp(int64(len(all))))
}

// overlapConcurrent: two units wait inside their first effect until both
// are there (so both read every offset as not done), then commit.
func (c *suite[Tx]) overlapConcurrent(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	a := tokenFor(scopeFor(t), 1, "a")
	claimGapped(t, g, a)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	units := map[string][]int64{"u1": {0, 1, 2}, "u2": {0, 1}}
	var (
		both    sync.WaitGroup
		wg      sync.WaitGroup
		mu      sync.Mutex
		results = map[string]sink.Result{}
		met     = map[string]bool{}
	)
	both.Add(len(units))
	for name, offs := range units {
		wg.Go(func() {
			var ran []int64
			put := c.unitEffect(t, name, offs, &ran)
			first := true
			res, err := g.Apply(ctx, a, plain(offs...), func(ctx context.Context, tx Tx, i int) error {
				if first {
					first = false
					both.Done()
					waited := make(chan struct{})
					go func() { both.Wait(); close(waited) }()
					select {
					case <-waited:
						mu.Lock()
						met[name] = true
						mu.Unlock()
					case <-ctx.Done():
						return errors.New("the other unit never ran its effects while this one ran its own")
					}
				}
				return put(ctx, tx, i)
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("unit %s Apply(%v): %v", name, offs, err)
			}
			results[name] = res
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if !met["u1"] || !met["u2"] {
		t.Fatalf("the units did not both run their first effect before either committed (%v): the overlap did not happen", met)
	}
	if n := results["u1"].Applied + results["u2"].Applied; n != 3 {
		t.Fatalf("results %+v: %d records applied, want 3 (0, 1 and 2 once each)", results, n)
	}
	c.mustAppliedBy(t, s, []int64{0, 1, 2}, "u1", "u2")
	mustCheckpoint(t, g, a, cp(3))
}

// overlapDeadLetter: a lane's unit reads offsets 0 and 1 as not done and,
// in its first effect, a dead letter of offset 0 (another attempt, after
// the handler failed there) commits; the record at 0 must then have the
// dead letter and no effect, never both.
func (c *suite[Tx]) overlapDeadLetter(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	scope := scopeFor(t)
	a := tokenFor(scope, 1, "a")
	claimGapped(t, g, a)
	offs := []int64{0, 1}
	var (
		raced bool
		ran   []int64
		dl    sink.DeadLetterResult
		dlErr error
	)
	put := c.unitEffect(t, "lane", offs, &ran)
	res, err := g.Apply(t.Context(), a, plain(offs...), func(ctx context.Context, tx Tx, i int) error {
		if !raced {
			raced = true
			dl, dlErr = g.DeadLetter(t.Context(), a, poison(0).InLane(0))
		}
		return put(ctx, tx, i)
	})
	if !raced {
		t.Fatal("the lane never ran an effect: the overlap did not happen")
	}
	if dlErr != nil || !dl.Stored {
		t.Fatalf("a lane's DeadLetter(0) inside the lane's effect = %+v, %v; want stored (it read offset 0 as not done)", dl, dlErr)
	}
	if err != nil || res.Applied != 1 || res.Skipped != 1 {
		t.Fatalf("the lane = %+v, %v; want offset 1 applied and the dead-lettered 0 skipped", res, err)
	}
	c.mustAbsent(t, s, key(t, "g", 0, "-", "lane"))
	c.mustGet(t, s, key(t, "g", 1, "-", "lane"), "v")
	if store, ok := sink.As[dlq.Store](s); ok {
		got, err := store.DeadLetters(t.Context(), dlq.Filter{Group: scope.Group})
		if err != nil || len(got) != 1 || got[0].Record.Offset != 0 {
			t.Fatalf("DeadLetters = %+v, %v; want exactly the dead letter at 0", got, err)
		}
	}
	mustCheckpoint(t, g, a, cp(2))
}

// testGapsApplyRacingClaim: lanes apply while a new owner claims; each
// lane's batch either landed before the claim (its offsets are in the
// checkpoint the claim returned, its keys written) or is fenced (nothing
// of it written): the claim's checkpoint is exactly the landed batches.
func (c *suite[Tx]) testGapsApplyRacingClaim(t *testing.T) {
	const lanes, batches = 8, 12
	s := c.h.Open(t)
	g := c.gaps(t, s)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	claimGapped(t, g, a)
	var (
		mu     sync.Mutex
		landed [][]int64
		fenced [][]int64
		wg     sync.WaitGroup
		start  = make(chan struct{})
	)
	for lane := range lanes {
		wg.Go(func() {
			<-start
			for k := range batches {
				offs := []int64{int64((2*k)*lanes + lane), int64((2*k+1)*lanes + lane)}
				_, err := g.Apply(t.Context(), a, plain(offs...), c.gapEffect(t, offs))
				mu.Lock()
				switch {
				case err == nil:
					landed = append(landed, offs)
				case errors.Is(err, sink.ErrFenced):
					fenced = append(fenced, offs)
				default:
					t.Errorf("lane %d Apply(%v): %v", lane, offs, err)
				}
				mu.Unlock()
				runtime.Gosched()
			}
		})
	}
	close(start)
	got := claimGapped(t, g, b)
	wg.Wait()
	var want sink.Checkpoint
	for _, offs := range landed {
		for _, o := range offs {
			want.Add(o, o+1)
		}
		c.mustGapKeys(t, s, offs...)
	}
	for _, offs := range fenced {
		c.mustNoGapKeys(t, s, offs...)
	}
	if !sameCheckpoint(got, want) {
		t.Fatalf("Claim racing %d lanes = %+v, want the %d batches that landed: %+v", lanes, got, len(landed), want)
	}
	mustCheckpoint(t, g, b, want)
	t.Logf("%d batches landed before the claim, %d fenced", len(landed), len(fenced))
}

// testGapsPlainCalls: on a gapped scope, serial Apply, with and without IDs, and
// DeadLetter skip the done offsets and raise the watermark past their
// batch (sink.Checkpoint.Raise), so a worker without lanes can take over.
func (c *suite[Tx]) testGapsPlainCalls(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	claimGapped(t, g, a)
	c.applyGapped(t, g, a, plain(2, 3, 8, 12))
	// b runs without lanes.
	if next := c.claim(t, s, b); next != 0 {
		t.Fatalf("plain Claim of the gapped scope = %d, want the watermark 0", next)
	}
	offs := offsetsRange(0, 5)
	var ran []int64
	res, err := s.Apply(t.Context(), b, sink.Batch{Offsets: offs}, func(ctx context.Context, tx Tx, i int) error {
		ran = append(ran, offs[i])
		return c.h.Put(ctx, tx, key(t, "g", offs[i]), "v")
	})
	if err != nil || !slices.Equal(ran, []int64{0, 1, 4}) || res.Applied != 3 || res.Skipped != 2 || res.NextOffset != 5 {
		t.Fatalf("plain Apply(0..4) on a gapped scope ran %v: %+v, %v; want [0 1 4] run, 2 skipped, NextOffset 5", ran, res, err)
	}
	mustCheckpoint(t, g, b, cp(5, 8, 9, 12, 13))
	if dl, ok := s, s.Features().DeadLetters; ok {
		// A dead letter of a done offset is a replay.
		if r, err := dl.DeadLetter(t.Context(), b, poison(8)); err != nil || r.Stored {
			t.Fatalf("DeadLetter of the done offset 8 = %+v, %v; want not stored", r, err)
		}
		// A dead letter at 10 raises the watermark over 8 and up to 11.
		if r, err := dl.DeadLetter(t.Context(), b, poison(10)); err != nil || !r.Stored || r.NextOffset != 11 {
			t.Fatalf("DeadLetter at 10 = %+v, %v; want stored, NextOffset 11", r, err)
		}
		mustCheckpoint(t, g, b, cp(11, 12, 13))
	}
	if d, ok := s, s.Features().DedupeWindow > 0; ok {
		offs, ids := []int64{11, 12, 13}, []string{"x", "y", "z"}
		var ran []int64
		res, err := d.Apply(t.Context(), b, sink.Batch{Offsets: offs, IDs: ids}, func(ctx context.Context, tx Tx, i int) error {
			ran = append(ran, offs[i])
			return c.h.Put(ctx, tx, key(t, "g", offs[i]), "v")
		})
		if err != nil || !slices.Equal(ran, []int64{11, 13}) || res.Skipped != 1 || res.NextOffset != 14 {
			t.Fatalf("Apply with IDs (11..13) on a gapped scope ran %v: %+v, %v; want [11 13] run, 1 skipped, NextOffset 14", ran, res, err)
		}
		mustCheckpoint(t, g, b, cp(14))
	}
	// A plain Apply far above the spans: Raise drops them all.
	c.applyGapped(t, g, b, plain(20, 22))
	c.apply(t, s, b, []int64{30}, c.gapEffect(t, []int64{30}))
	mustCheckpoint(t, g, b, cp(31))
}

// testGapsDeadLetter: a lane's DeadLetter stores a lane's poison record and
// marks [from, offset+1) done; its replay stores nothing.
func (c *suite[Tx]) testGapsDeadLetter(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	scope := scopeFor(t)
	a := tokenFor(scope, 1, "a")
	claimGapped(t, g, a)
	res, err := g.DeadLetter(t.Context(), a, poison(4).InLane(3))
	if err != nil || !res.Stored || res.ID == 0 || res.NextOffset > 0 {
		t.Fatalf("a lane's DeadLetter(3, 4) = %+v, %v; want stored, NextOffset 0", res, err)
	}
	mustCheckpoint(t, g, a, cp(0, 3, 5))
	if again, err := g.DeadLetter(t.Context(), a, poison(4).InLane(3)); err != nil || again.Stored || again.ID != 0 {
		t.Fatalf("replayed a lane's DeadLetter = %+v, %v; want not stored", again, err)
	}
	c.applyGapped(t, g, a, plain(0, 1, 2))
	mustCheckpoint(t, g, a, cp(5))
	if _, err := g.DeadLetter(t.Context(), a, poison(6).InLane(7)); !errors.Is(err, sink.ErrBadBatch) {
		t.Fatalf("a lane's DeadLetter with from above the offset: %v, want sink.ErrBadBatch", err)
	}
	if store, ok := sink.As[dlq.Store](s); ok {
		got, err := store.DeadLetters(t.Context(), dlq.Filter{Group: scope.Group})
		if err != nil || len(got) != 1 || got[0].ID != res.ID || got[0].Record.Offset != 4 || got[0].Token != a {
			t.Fatalf("DeadLetters = %+v, %v; want exactly the lane's dead letter at 4", got, err)
		}
	}
}

// testGapsLister: Fences reports the done spans of a gapped scope.
func (c *suite[Tx]) testGapsLister(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	lister, ok := sink.As[fenceadmin.Lister](s)
	if !ok {
		t.Skip("sinktest: the sink does not implement fenceadmin.Lister")
	}
	scope := scopeFor(t)
	a := tokenFor(scope, 1, "a")
	claimGapped(t, g, a)
	c.applyGapped(t, g, a, plain(0, 2, 5, 6))
	want := sink.Fence{Scope: scope, Holder: a, NextOffset: 1, Done: []sink.Span{{From: 2, To: 3}, {From: 5, To: 7}}}
	if f := fenceOf(t, lister, scope); !f.Equal(want) {
		t.Fatalf("Fences = %+v, want %+v", f, want)
	}
	c.applyGapped(t, g, a, plain(1, 3, 4))
	if f := fenceOf(t, lister, scope); f.NextOffset != 7 || len(f.Done) != 0 {
		t.Fatalf("Fences after the gaps filled = %+v, want NextOffset 7, no span", f)
	}
}

// testGapsReset: a reset that keeps the checkpoint keeps the spans (the
// same log), and one onto a new NextOffset clears them (another log).
func (c *suite[Tx]) testGapsReset(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	r, lister := c.resetter(t, s)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	claimGapped(t, g, a)
	c.applyGapped(t, g, a, plain(0, 3, 4, 7))
	reset(t, r, scope, a, 1)
	mustFence(t, lister, sink.Fence{Scope: scope, NextOffset: 1, ProofRequired: true, Done: []sink.Span{{From: 3, To: 5}, {From: 7, To: 8}}})
	got, err := claimGappedProven(t, g, b)
	if err != nil || !sameCheckpoint(got, cp(1, 3, 5, 7, 8)) {
		t.Fatalf("Claim after a reset keeping the checkpoint = %+v, %v; want the spans kept", got, err)
	}
	zero := int64(0)
	if _, err := r.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: scope, Expect: sink.Fence{Scope: scope, Holder: b, NextOffset: 1},
		NextOffset: &zero, TopicID: "new", Reason: "sinktest: onto a new log"}); err != nil {
		t.Fatalf("ResetFence onto a new log: %v", err)
	}
	mustFence(t, lister, sink.Fence{Scope: scope, NextOffset: 0, TopicID: "new", ProofRequired: true})
	c2 := tokenFor(scope, 3, "c")
	got, err = claimGappedProven(t, g, c2)
	if err != nil || !sameCheckpoint(got, cp(0)) {
		t.Fatalf("Claim after a reset onto a new log = %+v, %v; want offset 0, no span", got, err)
	}
	// The old log's done offsets are not done on the new one.
	if res := c.applyGapped(t, g, c2, plain(3, 7)); res.Applied != 2 {
		t.Fatalf("a lane's Apply on the new log = %+v, want both records applied", res)
	}
}

// testGapsLogCheck: the claim's log check compares the end of the done
// spans (Checkpoint.End) with the log end: a span above it means the log
// was truncated under the checkpoint, for Claim and Claim alike.
func (c *suite[Tx]) testGapsLogCheck(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	scope := scopeFor(t)
	ctx := t.Context()
	obs := func(start, end int64) sink.Observed {
		return sink.Observed{TopicID: "log", LogStart: start, LogEnd: end}
	}
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	if _, err := g.Claim(ctx, a, obs(0, 20)); err != nil {
		t.Fatal(err)
	}
	c.applyGapped(t, g, a, plain(0, 1, 9))
	// The watermark 2 is below the log end 5, but the span [9, 10) is not.
	_, err := g.Claim(ctx, b, obs(0, 5))
	var lc *sink.LogChangedError
	if !errors.Is(err, sink.ErrLogTruncated) || !errors.As(err, &lc) || lc.NextOffset != 10 {
		t.Fatalf("Claim with a done span above the log end: %v, want sink.ErrLogTruncated naming offset 10", err)
	}
	if _, err := s.Claim(ctx, b, obs(0, 5)); !errors.Is(err, sink.ErrLogTruncated) {
		t.Fatalf("plain Claim with a done span above the log end: %v, want sink.ErrLogTruncated", err)
	}
	// Records deleted above the watermark, where an offset is not done.
	if _, err := g.Claim(ctx, b, obs(3, 20)); !errors.Is(err, sink.ErrRetentionLoss) || !errors.As(err, &lc) || lc.NextOffset != 2 {
		t.Fatalf("Claim with the log start above the watermark: %v, want sink.ErrRetentionLoss naming the watermark 2", err)
	}
	mustCheckpoint(t, g, a, cp(2, 9, 10))
	// The log end at the span's end: accepted.
	if got, err := g.Claim(ctx, b, obs(2, 10)); err != nil || !sameCheckpoint(got, cp(2, 9, 10)) {
		t.Fatalf("Claim with the log end at the spans' end = %+v, %v", got, err)
	}
}

// testGapsDedupe: a lane's Apply with IDs dedupes as an Apply with IDs does, across
// lanes and within a batch; a duplicate's offset is done too.
func (c *suite[Tx]) testGapsDedupe(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	scope := scopeFor(t)
	a := tokenFor(scope, 1, "a")
	claimGapped(t, g, a)
	apply := func(b sink.Batch) sink.Result {
		t.Helper()
		res, err := g.Apply(t.Context(), a, b, c.idEffect(t, b.Offsets, b.IDs))
		if err != nil {
			t.Fatalf("Apply of a lane's batch (%v, %q): %v", b.Offsets, b.IDs, err)
		}
		return res
	}
	b1 := plain(4, 6)
	b1.IDs = []string{"x", "y"}
	if res := apply(b1); res.Applied != 2 || len(res.Duplicates) != 0 {
		t.Fatalf("first lane = %+v", res)
	}
	// Another lane, lower offsets: x again is a duplicate (applied at 4,
	// within the window); "" never is; z twice in the batch once.
	b2 := plain(0, 1, 2, 3)
	b2.IDs = []string{"x", "", "z", "z"}
	res := apply(b2)
	if res.Applied != 2 || !slices.Equal(res.Duplicates, []int{0, 3}) {
		t.Fatalf("second lane = %+v, want 2 applied, duplicates [0 3]", res)
	}
	c.mustID(t, s, "x", 4)
	c.mustID(t, s, "z", 2)
	c.mustGet(t, s, key(t, "off", 1), "at 1")
	mustCheckpoint(t, g, a, cp(5, 6, 7))
	c.mustDuplicates(t, s, scope, 2)
	// A serial Apply with IDs sees the lanes' IDs.
	if d, ok := s, s.Features().DedupeWindow > 0; ok {
		mustResult(t, c.applyOnce(t, d, a, []int64{5, 7}, "y", "w"), 1, 0, []int{0}, 8)
	}
	if _, err := g.Apply(t.Context(), a, sink.Batch{Offsets: []int64{9}, From: []int64{9}, IDs: []string{"a", "b"}}, failIfRun[Tx](t)); !errors.Is(err, sink.ErrBadBatch) {
		t.Fatalf("a lane's Apply with more IDs than offsets: %v, want sink.ErrBadBatch", err)
	}
}

// testGapsManySpans: the done set has no cap: 10,000 disjoint spans are
// stored and returned, and compacted to none as the gaps fill.
func (c *suite[Tx]) testGapsManySpans(t *testing.T) {
	const spans, batch = 10_000, 1_000
	s := c.h.Open(t)
	g := c.gaps(t, s)
	a := tokenFor(scopeFor(t), 1, "a")
	claimGapped(t, g, a)
	nop := func(context.Context, Tx, int) error { return nil }
	fill := func(parity int64) {
		for k := int64(0); k < spans; k += batch {
			var offs []int64
			for j := k; j < k+batch; j++ {
				offs = append(offs, 2*j+parity)
			}
			if _, err := g.Apply(t.Context(), a, plain(offs...), nop); err != nil {
				t.Fatalf("Apply of a lane's batch (%d..%d): %v", offs[0], offs[len(offs)-1], err)
			}
		}
	}
	fill(1) // the odd offsets: 10,000 spans above the watermark 0
	got := claimGapped(t, g, a)
	if got.NextOffset != 0 || len(got.Done) != spans || got.Done[0] != (sink.Span{From: 1, To: 2}) || got.Done[spans-1] != (sink.Span{From: 2*spans - 1, To: 2 * spans}) {
		t.Fatalf("Claim with %d spans: watermark %d, %d spans", spans, got.NextOffset, len(got.Done))
	}
	fill(0)
	mustCheckpoint(t, g, a, cp(2*spans))
}

// testGapsEffectError: a failed effect commits nothing of the batch.
func (c *suite[Tx]) testGapsEffectError(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	a := tokenFor(scopeFor(t), 1, "a")
	claimGapped(t, g, a)
	c.applyGapped(t, g, a, plain(1))
	b := plain(3, 5)
	_, err := g.Apply(t.Context(), a, b, func(ctx context.Context, tx Tx, i int) error {
		if err := c.h.Put(ctx, tx, key(t, "g", b.Offsets[i]), "v"); err != nil {
			return err
		}
		if i == 1 {
			return errBoom
		}
		return nil
	})
	var ee *sink.EffectError
	if !errors.Is(err, errBoom) || !errors.As(err, &ee) || ee.Offset != 5 {
		t.Fatalf("a lane's Apply with a failing effect: %v, want an *sink.EffectError at offset 5", err)
	}
	c.mustNoGapKeys(t, s, 3, 5)
	mustCheckpoint(t, g, a, cp(0, 1, 2))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := g.Apply(ctx, a, plain(3), c.gapEffect(t, []int64{3})); !errors.Is(err, context.Canceled) {
		t.Fatalf("a lane's Apply with a cancelled context: %v, want context.Canceled", err)
	}
	mustCheckpoint(t, g, a, cp(0, 1, 2))
}

// testGapsBadBatch: malformed batches fail with ErrBadBatch, applying
// nothing.
func (c *suite[Tx]) testGapsBadBatch(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	a := tokenFor(scopeFor(t), 1, "a")
	claimGapped(t, g, a)
	for i, b := range []sink.Batch{
		{Offsets: []int64{1, 2}, From: []int64{1}},
		{Offsets: []int64{1, 2}, From: []int64{1, 1}},
		{Offsets: []int64{3}, From: []int64{4}},
		{Offsets: []int64{2, 1}, From: []int64{2, 1}},
	} {
		if _, err := g.Apply(t.Context(), a, b, failIfRun[Tx](t)); !errors.Is(err, sink.ErrBadBatch) {
			t.Errorf("bad batch %d %+v: %v, want sink.ErrBadBatch", i, b, err)
		}
	}
	mustCheckpoint(t, g, a, cp(0))
}

// testGapsDurable: the done spans survive a reopen of the storage.
func (c *suite[Tx]) testGapsDurable(t *testing.T) {
	if c.h.Reopen == nil {
		t.Skip("sinktest: the backend is not durable (Harness.Reopen is nil)")
	}
	s := c.h.Open(t)
	g := c.gaps(t, s)
	a := tokenFor(scopeFor(t), 1, "a")
	claimGapped(t, g, a)
	c.applyGapped(t, g, a, plain(0, 2, 5))
	s = c.h.Reopen(t, s)
	mustCheckpoint(t, c.gaps(t, s), a, cp(1, 2, 3, 5, 6))
}

// testGapsHistoryDone: the history (fenceadmin.Historian) records, with each
// claim, the done spans its checkpoint had above NextOffset — by
// Claim or by a plain Claim — and, with each reset, the spans it
// kept (none onto a new log): the invariant checker's F needs them, since
// a write in a claim's done spans was made before the claim.
func (c *suite[Tx]) testGapsHistoryDone(t *testing.T) {
	s := c.h.Open(t)
	g := c.gaps(t, s)
	h, ok := sink.As[fenceadmin.Historian](s)
	if !ok {
		t.Skip("sinktest: the sink does not implement fenceadmin.Historian")
	}
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	claimGapped(t, g, a)
	c.applyGapped(t, g, a, plain(0, 3, 4, 7))
	if _, err := s.Claim(t.Context(), b, sink.Observed{}); err != nil {
		t.Fatalf("a plain Claim of a gapped scope: %v", err)
	}
	spans := []sink.Span{{From: 3, To: 5}, {From: 7, To: 8}}
	want := []fenceadmin.Entry{{Kind: fenceadmin.KindClaim, Token: a}, {Kind: fenceadmin.KindClaim, Token: b, NextOffset: 1, Done: spans}}
	if r, ok := sink.As[fenceadmin.Resetter](s); ok {
		reset(t, r, scope, b, 1)
		c2 := tokenFor(scope, 1, "c")
		if _, err := claimGappedProven(t, g, c2); err != nil {
			t.Fatalf("Claim after a reset: %v", err)
		}
		zero := int64(0)
		if _, err := r.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: scope, Expect: sink.Fence{Scope: scope, Holder: c2, NextOffset: 1},
			NextOffset: &zero, TopicID: "new", Reason: "sinktest: onto a new log"}); err != nil {
			t.Fatalf("ResetFence onto a new log: %v", err)
		}
		want = append(want,
			fenceadmin.Entry{Kind: fenceadmin.KindReset, Token: b, NextOffset: 1, Done: spans},
			fenceadmin.Entry{Kind: fenceadmin.KindClaim, Token: c2, NextOffset: 1, Done: spans, Proven: true},
			fenceadmin.Entry{Kind: fenceadmin.KindReset, Token: c2, NextOffset: 0, TopicID: "new"})
	}
	got, err := h.History(t.Context(), scope)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("History has %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		e := got[i]
		if e.Kind != w.Kind || e.Token != w.Token || e.NextOffset != w.NextOffset || e.TopicID != w.TopicID || !slices.Equal(e.Done, w.Done) {
			t.Errorf("History[%d] = %+v, want %s by %s at %d on %q with done spans %v", i, e, w.Kind, w.Token, w.NextOffset, w.TopicID, w.Done)
		}
	}
}
