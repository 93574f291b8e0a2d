package sinktest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// The tests of sink.Features.DedupeWindow (docs/design.md#command-ids). Each
// effect writes, for record i, the key of its command ID (or of its
// offset, for a record without one) = "at <offset>", so that a duplicate
// that ran would overwrite the value its first application committed.

// testDedupeDurable: the applied IDs survive a reopen of the storage.
func (c *suite[Tx]) testDedupeDurable(t *testing.T) {
	if c.h.Reopen == nil {
		t.Skip("sinktest: the backend is not durable (Harness.Reopen is nil)")
	}
	s := c.h.Open(t)
	d := c.dedup(t, s)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	mustResult(t, c.applyOnce(t, d, tok, []int64{0}, "a"), 1, 0, nil, 1)
	s = c.h.Reopen(t, s)
	d = c.dedup(t, s)
	mustResult(t, c.applyOnce(t, d, tok, []int64{1, 2}, "a", "b"), 1, 0, []int{0}, 3)
}

// namedTest is one subtest of Run.
type namedTest struct {
	name string
	fn   func(*testing.T)
}

// dedup returns s if it declares a dedupe window, or skips the test.
func (c *suite[Tx]) dedup(t testing.TB, s sink.Sink[Tx]) sink.Sink[Tx] {
	t.Helper()
	if s.Features().DedupeWindow <= 0 {
		t.Skip("sinktest: the sink does not declare Features.DedupeWindow")
	}
	return s
}

// idKey is the key an idEffect writes for record i.
func idKey(t testing.TB, offsets []int64, ids []string, i int) string {
	if ids[i] == "" {
		return key(t, "off", offsets[i])
	}
	return key(t, "id", ids[i])
}

// idEffect writes idKey = "at <offset>" for record i.
func (c *suite[Tx]) idEffect(t testing.TB, offsets []int64, ids []string) sink.Effect[Tx] {
	return func(ctx context.Context, tx Tx, i int) error {
		return c.h.Put(ctx, tx, idKey(t, offsets, ids, i), "at "+strconv.FormatInt(offsets[i], 10))
	}
}

// applyOnce calls Apply with command IDs and idEffect and fails the test on an error.
func (c *suite[Tx]) applyOnce(t testing.TB, d sink.Sink[Tx], tok epochs.Token, offsets []int64, ids ...string) sink.Result {
	t.Helper()
	res, err := d.Apply(t.Context(), tok, sink.Batch{Offsets: offsets, IDs: ids}, c.idEffect(t, offsets, ids))
	if err != nil {
		t.Fatalf("an Apply with IDs(%s, %v, %q): %v", tok, offsets, ids, err)
	}
	return res
}

// mustResult asserts what an Apply with IDs reported.
func mustResult(t testing.TB, res sink.Result, applied, skipped int, dups []int, next int64) {
	t.Helper()
	if res.Applied != applied || res.Skipped != skipped || !slices.Equal(res.Duplicates, dups) || res.NextOffset != next {
		t.Fatalf("an Apply with IDs result = {Applied:%d Skipped:%d Duplicates:%v NextOffset:%d}, want {Applied:%d Skipped:%d Duplicates:%v NextOffset:%d}",
			res.Applied, res.Skipped, res.Duplicates, res.NextOffset, applied, skipped, dups, next)
	}
}

// mustID asserts the value the first application of command id wrote.
func (c *suite[Tx]) mustID(t testing.TB, s sink.Sink[Tx], id string, at int64) {
	t.Helper()
	c.mustGet(t, s, key(t, "id", id), "at "+strconv.FormatInt(at, 10))
}

// mustDuplicates asserts the scope's fence row counts want duplicates
// (sink.Fence.Duplicates), when the sink lists its fences.
func (c *suite[Tx]) mustDuplicates(t testing.TB, s sink.Sink[Tx], scope epochs.Scope, want int64) {
	t.Helper()
	l, ok := sink.As[fenceadmin.Lister](s)
	if !ok {
		return
	}
	fences, err := l.Fences(t.Context())
	if err != nil {
		t.Fatalf("Fences: %v", err)
	}
	for _, f := range fences {
		if f.Scope == scope {
			if f.Duplicates != want {
				t.Fatalf("the fence row of %s counts %d duplicates, want %d (the duplicates an Apply with IDs reported)", scope, f.Duplicates, want)
			}
			return
		}
	}
	t.Fatalf("Fences lists no row of %s", scope)
}

// testDedupeAcrossBatches: a command ID applied by one batch is a
// duplicate in a later batch: not run, reported by index, and NextOffset
// still moves past it.
func (c *suite[Tx]) testDedupeAcrossBatches(t *testing.T) {
	s := c.h.Open(t)
	d := c.dedup(t, s)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	mustResult(t, c.applyOnce(t, d, tok, []int64{0, 1}, "a", "b"), 2, 0, nil, 2)
	res := c.applyOnce(t, d, tok, []int64{2, 3, 4}, "c", "a", "b")
	mustResult(t, res, 1, 0, []int{1, 2}, 5)
	c.mustID(t, s, "a", 0)
	c.mustID(t, s, "b", 1)
	c.mustID(t, s, "c", 2)
	c.mustNext(t, s, tok, 5)
	// A batch of duplicates only still moves NextOffset.
	mustResult(t, c.applyOnce(t, d, tok, []int64{7}, "c"), 0, 0, []int{0}, 8)
	c.mustID(t, s, "c", 2)
	c.mustNext(t, s, tok, 8)
	c.mustDuplicates(t, s, tok.Scope(), 3)
}

// testDedupeWithinBatch: an ID that appears twice in one batch is run
// once, at its first index.
func (c *suite[Tx]) testDedupeWithinBatch(t *testing.T) {
	s := c.h.Open(t)
	d := c.dedup(t, s)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	mustResult(t, c.applyOnce(t, d, tok, []int64{0, 1, 2, 3}, "a", "b", "a", "a"), 2, 0, []int{2, 3}, 4)
	c.mustID(t, s, "a", 0)
	c.mustDuplicates(t, s, tok.Scope(), 2)
	// Both were recorded once: a later batch sees them.
	mustResult(t, c.applyOnce(t, d, tok, []int64{4, 5}, "b", "a"), 0, 0, []int{0, 1}, 6)
	c.mustDuplicates(t, s, tok.Scope(), 4)
}

// testDedupeSurvivesNewHolder: the IDs belong to the scope, not the
// tenure: a new holder sees the IDs the old one applied.
func (c *suite[Tx]) testDedupeSurvivesNewHolder(t *testing.T) {
	s := c.h.Open(t)
	d := c.dedup(t, s)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	c.claim(t, s, a)
	mustResult(t, c.applyOnce(t, d, a, []int64{0}, "x"), 1, 0, nil, 1)
	c.claim(t, s, b)
	mustResult(t, c.applyOnce(t, d, b, []int64{1, 2}, "x", "y"), 1, 0, []int{0}, 3)
	c.mustID(t, s, "x", 0)
}

// testDedupeFencedRecordsNoID: a fenced an Apply with IDs runs nothing and
// records no ID, so the holder applies that command.
func (c *suite[Tx]) testDedupeFencedRecordsNoID(t *testing.T) {
	s := c.h.Open(t)
	d := c.dedup(t, s)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	c.claim(t, s, a)
	c.claim(t, s, b)
	_, err := d.Apply(t.Context(), a, sink.Batch{Offsets: []int64{0}, IDs: []string{"x"}}, failIfRun[Tx](t))
	mustFenced(t, err, sink.OpApply, b, a)
	mustResult(t, c.applyOnce(t, d, b, []int64{0}, "x"), 1, 0, nil, 1)
	c.mustID(t, s, "x", 0)
	// A fenced batch of a duplicate counts nothing.
	_, err = d.Apply(t.Context(), a, sink.Batch{Offsets: []int64{1}, IDs: []string{"x"}}, failIfRun[Tx](t))
	mustFenced(t, err, sink.OpApply, b, a)
	c.mustDuplicates(t, s, scope, 0)
}

// testDedupeEffectErrorRecordsNoID: a batch whose effect fails records
// none of its IDs, not even those of the records before the failing one.
func (c *suite[Tx]) testDedupeEffectErrorRecordsNoID(t *testing.T) {
	s := c.h.Open(t)
	d := c.dedup(t, s)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	offsets, ids := []int64{0, 1}, []string{"a", "b"}
	put := c.idEffect(t, offsets, ids)
	_, err := d.Apply(t.Context(), tok, sink.Batch{Offsets: offsets, IDs: ids}, func(ctx context.Context, tx Tx, i int) error {
		if i == 1 {
			return errBoom
		}
		return put(ctx, tx, i)
	})
	var ee *sink.EffectError
	if !errors.As(err, &ee) || !errors.Is(err, errBoom) || ee.Index != 1 {
		t.Fatalf("an Apply with IDs with a failing effect: %v, want a *sink.EffectError at index 1", err)
	}
	c.mustAbsent(t, s, key(t, "id", "a"))
	mustResult(t, c.applyOnce(t, d, tok, offsets, ids...), 2, 0, nil, 2)
	c.mustID(t, s, "a", 0)
	// A failed batch with a duplicate in it counts nothing.
	offsets, ids = []int64{2, 3}, []string{"a", "c"}
	if _, err := d.Apply(t.Context(), tok, sink.Batch{Offsets: offsets, IDs: ids}, func(context.Context, Tx, int) error { return errBoom }); !errors.Is(err, errBoom) {
		t.Fatalf("an Apply with IDs with a failing effect: %v, want errBoom", err)
	}
	c.mustDuplicates(t, s, tok.Scope(), 0)
}

// testDedupeNoIDAlwaysApplied: records without an ID are applied as Apply
// applies them, however many there are.
func (c *suite[Tx]) testDedupeNoIDAlwaysApplied(t *testing.T) {
	s := c.h.Open(t)
	d := c.dedup(t, s)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	mustResult(t, c.applyOnce(t, d, tok, []int64{0, 1}, "", ""), 2, 0, nil, 2)
	mustResult(t, c.applyOnce(t, d, tok, []int64{2, 3}, "", "a"), 2, 0, nil, 4)
	for _, o := range []int64{0, 1, 2} {
		c.mustGet(t, s, key(t, "off", o), "at "+strconv.FormatInt(o, 10))
	}
}

// testDedupeReplayIsSkipped: a record below NextOffset is a replay,
// counted as Skipped and never as a duplicate, even with an ID the scope
// applied.
func (c *suite[Tx]) testDedupeReplayIsSkipped(t *testing.T) {
	s := c.h.Open(t)
	d := c.dedup(t, s)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	mustResult(t, c.applyOnce(t, d, tok, []int64{0, 1}, "a", "b"), 2, 0, nil, 2)
	mustResult(t, c.applyOnce(t, d, tok, []int64{0, 1, 2}, "a", "b", "c"), 1, 2, nil, 3)
	// A replay's ID is not recorded: "n" at replayed offset 1 is new at
	// 3, and "r" at replayed offset 2 is new at 5.
	mustResult(t, c.applyOnce(t, d, tok, []int64{1, 3}, "n", "n"), 1, 1, nil, 4)
	c.mustID(t, s, "n", 3)
	mustResult(t, c.applyOnce(t, d, tok, []int64{2, 4}, "r", "s"), 1, 1, nil, 5)
	mustResult(t, c.applyOnce(t, d, tok, []int64{5}, "r"), 1, 0, nil, 6)
	c.mustID(t, s, "r", 5)
}

// testDedupeWindowHorizon: an ID applied at offset p is a duplicate for a
// record at offset o while p >= o - DedupeWindow(), and is applied again
// after that (the documented horizon). Offsets with gaps reach past the
// window in two batches.
func (c *suite[Tx]) testDedupeWindowHorizon(t *testing.T) {
	s := c.h.Open(t)
	d := c.dedup(t, s)
	w := d.Features().DedupeWindow
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	mustResult(t, c.applyOnce(t, d, tok, []int64{0, 1}, "old", "edge"), 2, 0, nil, 2)
	// At offset w, "old" (applied at 0) is at the horizon: a duplicate.
	mustResult(t, c.applyOnce(t, d, tok, []int64{w}, "old"), 0, 0, []int{0}, w+1)
	// At w+1, "edge" (applied at 1) is at the horizon: a duplicate; at
	// w+2, "old" is past it: applied again.
	mustResult(t, c.applyOnce(t, d, tok, []int64{w + 1, w + 2}, "edge", "old"), 1, 0, []int{0}, w+3)
	c.mustID(t, s, "old", w+2)
	c.mustID(t, s, "edge", 1)
	// Far past the window, both are forgotten.
	far := 3*w + 10
	mustResult(t, c.applyOnce(t, d, tok, []int64{far, far + 1}, "old", "edge"), 2, 0, nil, far+2)
	c.mustID(t, s, "edge", far+1)
}

// testDedupeKeptAcrossReset: an admin reset keeps the scope's IDs, also
// one onto a new log whose offsets start again at 0: a command the old log
// carried is a duplicate if the new log carries it again.
func (c *suite[Tx]) testDedupeKeptAcrossReset(t *testing.T) {
	s := c.h.Open(t)
	d := c.dedup(t, s)
	r, _ := c.resetter(t, s)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 5, "a"), tokenFor(scope, 1, "b")
	c.claim(t, s, a)
	mustResult(t, c.applyOnce(t, d, a, []int64{40, 41}, "x", "y"), 2, 0, nil, 42)
	zero := int64(0)
	if _, err := r.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: scope, Expect: sink.Fence{Scope: scope, Holder: a, NextOffset: 42},
		NextOffset: &zero, TopicID: "new-log", Reason: "sinktest: " + t.Name()}); err != nil {
		t.Fatalf("ResetFence: %v", err)
	}
	if _, err := claimProven(t, s, b, sink.Observed{TopicID: "new-log", LogStart: 0, LogEnd: 10}); err != nil {
		t.Fatalf("Claim after the reset: %v", err)
	}
	mustResult(t, c.applyOnce(t, d, b, []int64{0, 1}, "y", "z"), 1, 0, []int{0}, 2)
	c.mustID(t, s, "y", 41)
	c.mustDuplicates(t, s, scope, 1)
	// The count is kept by a reset too.
	if _, err := r.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: scope, Expect: sink.Fence{Scope: scope, Holder: b, NextOffset: 2, TopicID: "new-log"},
		Reason: "sinktest: " + t.Name()}); err != nil {
		t.Fatalf("ResetFence: %v", err)
	}
	c.mustDuplicates(t, s, scope, 1)
}

// testDedupeBadBatch: ids of another length than offsets, or an ID
// longer than sink.MaxCommandIDLen, fail with ErrBadBatch and run nothing.
func (c *suite[Tx]) testDedupeBadBatch(t *testing.T) {
	s := c.h.Open(t)
	d := c.dedup(t, s)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	for _, ids := range [][]string{{"a"}, {"a", "b", "c"}, {}, {"a", strings.Repeat("x", sink.MaxCommandIDLen+1)}} {
		if _, err := d.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0, 1}, IDs: ids}, failIfRun[Tx](t)); !errors.Is(err, sink.ErrBadBatch) {
			t.Fatalf("an Apply with IDs with %d ids for 2 offsets: %v, want sink.ErrBadBatch", len(ids), err)
		}
	}
	if _, err := d.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{1, 0}, IDs: []string{"a", "b"}}, failIfRun[Tx](t)); !errors.Is(err, sink.ErrBadBatch) {
		t.Fatalf("an Apply with IDs with descending offsets: %v, want sink.ErrBadBatch", err)
	}
	long := strings.Repeat("x", sink.MaxCommandIDLen)
	mustResult(t, c.applyOnce(t, d, tok, []int64{0, 1}, long, long), 1, 0, []int{1}, 2)
	c.mustNext(t, s, tok, 2)
}
