package sinktest

import (
	"context"
	"errors"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// mustProofRequired asserts that a claim by tok was refused for want of a
// proof of membership, not fenced.
func mustProofRequired(t testing.TB, err error, tok epochs.Token) {
	t.Helper()
	if !errors.Is(err, sink.ErrProofRequired) || errors.Is(err, sink.ErrFenced) {
		t.Fatalf("unproven Claim by %s: %v, want sink.ErrProofRequired (not ErrFenced)", tok, err)
	}
}

// mustFence asserts scope's fence as the sink's Lister reports it, if the
// sink has one.
func mustFence(t testing.TB, s any, want sink.Fence) {
	t.Helper()
	lister, ok := s.(sink.Lister)
	if !ok {
		return
	}
	if got := fenceOf(t, lister, want.Scope); !got.Equal(want) {
		t.Fatalf("Fences[%s] = %+v, want %+v", want.Scope, got, want)
	}
}

// resetter returns s's Resetter and its Lister (nil if it has none), or
// skips the test.
func (c *suite[Tx]) resetter(t testing.TB, s sink.Sink[Tx]) (sink.Resetter, any) {
	t.Helper()
	r, ok := sink.As[sink.Resetter](s)
	if !ok {
		t.Skip("sinktest: the sink does not implement sink.Resetter")
	}
	var lister any
	if l, ok := sink.As[sink.Lister](s); ok {
		lister = l
	}
	return r, lister
}

// reset resets scope's fence, expecting it at holder and next.
func reset(t testing.TB, r sink.Resetter, scope epochs.Scope, holder epochs.Token, next int64) {
	t.Helper()
	if _, err := r.ResetFence(t.Context(), sink.ResetRequest{Scope: scope, Expect: sink.Fence{Scope: scope, Holder: holder, NextOffset: next},
		Reason: "sinktest: " + t.Name()}); err != nil {
		t.Fatalf("ResetFence (holder %s at %d): %v", holder, next, err)
	}
}

// testResetProofFloor: after a reset, not only the first claim needs a
// proof of membership: every claim at or below the epoch the reset cleared
// does, for good (docs/design.md#admin-reset), so the group's previous
// incarnation cannot come back after the new one's first claim.
func (c *suite[Tx]) testResetProofFloor(t *testing.T) {
	s := c.h.Open(t)
	r, lister := c.resetter(t, s)
	ctx := t.Context()
	scope := scopeFor(t)
	old := tokenFor(scope, 10, "old-10")
	c.claim(t, s, old)
	c.apply(t, s, old, offsetsRange(0, 2), c.putEffect(t, "k", offsetsRange(0, 2), "old"))
	reset(t, r, scope, old, 2)
	mustFence(t, lister, sink.Fence{Scope: scope, NextOffset: 2, ProofRequired: true, ProofBelow: 11})

	// The new incarnation's first claim, at epoch 1, with a proof.
	fresh := tokenFor(scope, 1, "new-1")
	_, err := s.Claim(ctx, fresh, sink.Observed{})
	mustProofRequired(t, err, fresh)
	if next, err := s.Claim(ctx, fresh, sink.Observed{MemberProven: true}); err != nil || next != 2 {
		t.Fatalf("proven Claim by %s after the reset = %d, %v; want 2", fresh, next, err)
	}
	mustFence(t, lister, sink.Fence{Scope: scope, Holder: fresh, NextOffset: 2, ProofBelow: 11})
	// The holder's own re-claim needs no proof.
	if next := c.claim(t, s, fresh); next != 2 {
		t.Fatalf("re-claim by the holder %s = %d, want 2", fresh, next)
	}

	// A never-proven member of the previous incarnation, at epoch 9 (and at
	// the cleared epoch 10 itself), is refused although 9 > 1.
	zombie, cleared := tokenFor(scope, 9, "old-9"), tokenFor(scope, 10, "old-10b")
	for _, z := range []epochs.Token{zombie, cleared} {
		_, err := s.Claim(ctx, z, sink.Observed{})
		mustProofRequired(t, err, z)
	}
	// The refusals changed nothing: the new incarnation still writes.
	c.apply(t, s, fresh, []int64{2}, c.putEffect(t, "k", []int64{2}, "new"))
	mustFence(t, lister, sink.Fence{Scope: scope, Holder: fresh, NextOffset: 3, ProofBelow: 11})
	_, err = s.Apply(ctx, zombie, []int64{3}, c.putEffect(t, "k", []int64{3}, "zombie"))
	mustFenced(t, err, sink.OpApply, fresh, zombie)
	c.mustAbsent(t, s, key(t, "k", 3))

	// A member that proves its membership at epoch 9 is a member of the
	// new incarnation: accepted.
	proven := tokenFor(scope, 9, "new-9")
	if next, err := s.Claim(ctx, proven, sink.Observed{MemberProven: true}); err != nil || next != 3 {
		t.Fatalf("proven Claim by %s = %d, %v; want 3", proven, next, err)
	}
	// Above the floor no proof is needed.
	above := tokenFor(scope, 11, "new-11")
	if next := c.claim(t, s, above); next != 3 {
		t.Fatalf("Claim by %s above the floor = %d, want 3", above, next)
	}
	mustFence(t, lister, sink.Fence{Scope: scope, Holder: above, NextOffset: 3, ProofBelow: 11})

	// A second reset raises the floor past the epoch it cleared.
	reset(t, r, scope, above, 3)
	mustFence(t, lister, sink.Fence{Scope: scope, NextOffset: 3, ProofRequired: true, ProofBelow: 12})
	low := tokenFor(scope, 2, "new-2")
	if _, err := s.Claim(ctx, low, sink.Observed{MemberProven: true}); err != nil {
		t.Fatalf("proven Claim by %s after the second reset: %v", low, err)
	}
	// A third reset, of a lower holder, keeps the highest floor; so does a
	// reset of a scope with no holder.
	reset(t, r, scope, low, 3)
	mustFence(t, lister, sink.Fence{Scope: scope, NextOffset: 3, ProofRequired: true, ProofBelow: 12})
	reset(t, r, scope, epochs.Token{}, 3)
	mustFence(t, lister, sink.Fence{Scope: scope, NextOffset: 3, ProofRequired: true, ProofBelow: 12})
	if _, err := s.Claim(ctx, low, sink.Observed{MemberProven: true}); err != nil {
		t.Fatalf("proven Claim by %s after the third reset: %v", low, err)
	}
	for _, z := range []epochs.Token{zombie, tokenFor(scope, 11, "old-11")} {
		_, err := s.Claim(ctx, z, sink.Observed{})
		mustProofRequired(t, err, z)
	}
	if next := c.claim(t, s, tokenFor(scope, 12, "new-12")); next != 3 {
		t.Fatalf("Claim at epoch 12, above the floor = %d, want 3", next)
	}
	c.mustGet(t, s, key(t, "k", 2), "new")
}

// testResetProofFloorDurable: the proof floor survives reopening the sink.
func (c *suite[Tx]) testResetProofFloorDurable(t *testing.T) {
	if c.h.Reopen == nil {
		t.Skip("sinktest: Harness.Reopen is nil: the backend is not durable, so the proof floor across reopen is not tested")
	}
	s := c.h.Open(t)
	r, _ := c.resetter(t, s)
	scope := scopeFor(t)
	old, fresh := tokenFor(scope, 10, "old-10"), tokenFor(scope, 1, "new-1")
	c.claim(t, s, old)
	reset(t, r, scope, old, 0)
	if _, err := s.Claim(t.Context(), fresh, sink.Observed{MemberProven: true}); err != nil {
		t.Fatalf("proven Claim by %s after the reset: %v", fresh, err)
	}
	s = c.h.Reopen(t, s)
	if l, ok := sink.As[sink.Lister](s); ok {
		mustFence(t, l, sink.Fence{Scope: scope, Holder: fresh, ProofBelow: 11})
	}
	zombie := tokenFor(scope, 9, "old-9")
	_, err := s.Claim(t.Context(), zombie, sink.Observed{})
	mustProofRequired(t, err, zombie)
	c.mustNext(t, s, fresh, 0)
}

// testSameEpochAfterReset: after a reset, member b may claim (with a
// proof) at the very epoch a held before the reset. a, a zombie, still has
// a token of that epoch: its writes must be fenced by the member, not only
// by the epoch.
func (c *suite[Tx]) testSameEpochAfterReset(t *testing.T) {
	s := c.h.Open(t)
	r, _ := c.resetter(t, s)
	ctx := t.Context()
	scope := scopeFor(t)
	a, b := tokenFor(scope, 5, "a"), tokenFor(scope, 5, "b")
	c.claim(t, s, a)
	c.apply(t, s, a, []int64{0}, c.putEffect(t, "k", []int64{0}, "a"))
	reset(t, r, scope, a, 1)
	if next, err := s.Claim(ctx, b, sink.Observed{MemberProven: true}); err != nil || next != 1 {
		t.Fatalf("proven Claim by %s at a's epoch after the reset = %d, %v; want 1", b, next, err)
	}
	_, err := s.Apply(ctx, a, []int64{1}, c.putEffect(t, "k", []int64{1}, "a"))
	mustFenced(t, err, sink.OpApply, b, a)
	c.mustAbsent(t, s, key(t, "k", 1))
	if dl, ok := sink.As[sink.DeadLetterer](s); ok {
		_, err := dl.DeadLetter(ctx, a, poison(1))
		mustFenced(t, err, sink.OpDeadLetter, b, a)
		if store, ok := sink.As[sink.DeadLetterStore](s); ok {
			if got, err := store.DeadLetters(ctx, sink.DeadLetterFilter{Group: scope.Group}); err != nil || len(got) != 0 {
				t.Fatalf("dead letters after a's fenced dead letter = %+v, %v; want none", got, err)
			}
		}
	}
	_, err = s.Claim(ctx, a, sink.Observed{MemberProven: true})
	mustFenced(t, err, sink.OpClaim, b, a)
	c.mustNext(t, s, b, 1)
}

// testSameEpochResetDuringApply: the same, with the reset and b's claim
// landing while a's Apply runs its effect. A backend that checks the holder
// early and again at the end must check the member at the end too.
func (c *suite[Tx]) testSameEpochResetDuringApply(t *testing.T) {
	if c.h.WritesSerialized {
		t.Skip("sinktest: Harness.WritesSerialized: a write cannot land while an Apply runs its effect, so this race cannot happen")
	}
	s := c.h.Open(t)
	r, _ := c.resetter(t, s)
	ctx := t.Context()
	scope := scopeFor(t)
	a, b := tokenFor(scope, 5, "a"), tokenFor(scope, 5, "b")
	c.claim(t, s, a)
	var raced bool
	_, err := s.Apply(ctx, a, []int64{0}, func(ctx context.Context, tx Tx, i int) error {
		if !raced {
			raced = true
			reset(t, r, scope, a, 0)
			if _, err := s.Claim(t.Context(), b, sink.Observed{MemberProven: true}); err != nil {
				t.Errorf("proven Claim by %s during a's Apply: %v", b, err)
			}
		}
		return c.h.Put(ctx, tx, key(t, "k", 0), "a")
	})
	if !raced {
		t.Fatal("a's Apply never ran its effect: the race did not happen")
	}
	mustFenced(t, err, sink.OpApply, b, a)
	c.mustAbsent(t, s, key(t, "k", 0))
	c.mustNext(t, s, b, 0)
}
