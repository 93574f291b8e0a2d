package sinktest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
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
	lister, ok := s.(fenceadmin.Lister)
	if !ok {
		return
	}
	if got := fenceOf(t, lister, want.Scope); !got.Equal(want) {
		t.Fatalf("Fences[%s] = %+v, want %+v", want.Scope, got, want)
	}
}

// resetter returns s's Resetter and its Lister (nil if it has none), or
// skips the test.
func (c *suite[Tx]) resetter(t testing.TB, s sink.Sink[Tx]) (fenceadmin.Resetter, any) {
	t.Helper()
	r, ok := sink.As[fenceadmin.Resetter](s)
	if !ok {
		t.Skip("sinktest: the sink does not implement fenceadmin.Resetter")
	}
	var lister any
	if l, ok := sink.As[fenceadmin.Lister](s); ok {
		lister = l
	}
	return r, lister
}

// reset resets scope's fence, expecting it at holder and next.
func reset(t testing.TB, r fenceadmin.Resetter, scope epochs.Scope, holder epochs.Token, next int64) {
	t.Helper()
	if _, err := r.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: scope, Expect: sink.Fence{Scope: scope, Holder: holder, NextOffset: next},
		Reason: "sinktest: " + t.Name()}); err != nil {
		t.Fatalf("ResetFence (holder %s at %d): %v", holder, next, err)
	}
}

// claimProven claims tok's scope as the consumer does after a reset: it
// claims with obs; if the sink asks a proof of membership, it claims
// again with a proof made at the fence version the refusal names (a test
// stands in for the broker: its proof always holds).
func claimProven[Tx any](t testing.TB, s sink.Sink[Tx], tok epochs.Token, obs sink.Observed) (int64, error) {
	t.Helper()
	next, err := nextOf(s.Claim(t.Context(), tok, obs))
	var pe *sink.ProofRequiredError
	if errors.As(err, &pe) {
		obs.Proof = &sink.Proof{Version: pe.Version}
		next, err = nextOf(s.Claim(t.Context(), tok, obs))
	}
	return next, err
}

// proofVersion claims tok's scope without a proof, asserts that the sink
// asks one, and returns the fence version it names.
func proofVersion[Tx any](t testing.TB, s sink.Sink[Tx], tok epochs.Token) int64 {
	t.Helper()
	_, err := s.Claim(t.Context(), tok, sink.Observed{})
	mustProofRequired(t, err, tok)
	var pe *sink.ProofRequiredError
	if !errors.As(err, &pe) {
		t.Fatalf("unproven Claim by %s: %v, want a *sink.ProofRequiredError", tok, err)
	}
	if pe.Offered != tok || pe.Stale {
		t.Fatalf("unproven Claim by %s: %+v, want Offered %s, not Stale", tok, pe, tok)
	}
	return pe.Version
}

// mustHistoryProven asserts, if the sink has a Historian, that the
// scope's last history entry is a claim by tok, proven or not as said.
func mustHistoryProven[Tx any](t testing.TB, s sink.Sink[Tx], tok epochs.Token, proven bool) {
	t.Helper()
	h, ok := sink.As[fenceadmin.Historian](s)
	if !ok {
		return
	}
	hs, err := h.History(t.Context(), tok.Scope())
	if err != nil || len(hs) == 0 {
		t.Fatalf("History(%s) = %+v, %v", tok.Scope(), hs, err)
	}
	if last := hs[len(hs)-1]; last.Kind != fenceadmin.KindClaim || last.Token != tok || last.Proven != proven {
		t.Fatalf("last history entry of %s = %+v, want a claim by %s with Proven %v", tok.Scope(), last, tok, proven)
	}
}

// testResetProofEveryClaim: after a reset, every claim needs a proof of
// membership, for good (docs/design.md#admin-reset), whatever its epoch:
// a member of the group's previous incarnation may hold any epoch, above
// the new incarnation's or below, and only the broker can tell it apart.
// The stored holder's own re-claim is the one exception.
func (c *suite[Tx]) testResetProofEveryClaim(t *testing.T) {
	s := c.h.Open(t)
	r, lister := c.resetter(t, s)
	ctx := t.Context()
	scope := scopeFor(t)
	old := tokenFor(scope, 10, "old-10")
	c.claim(t, s, old)
	c.apply(t, s, old, offsetsRange(0, 2), c.putEffect(t, "k", offsetsRange(0, 2), "old"))
	reset(t, r, scope, old, 2)
	mustFence(t, lister, sink.Fence{Scope: scope, NextOffset: 2, ProofRequired: true})

	// The new incarnation's first claim, at epoch 1, with a proof.
	fresh := tokenFor(scope, 1, "new-1")
	v := proofVersion(t, s, fresh)
	if next, err := nextOf(s.Claim(ctx, fresh, sink.Observed{Proof: &sink.Proof{Version: v}})); err != nil || next != 2 {
		t.Fatalf("proven Claim by %s after the reset = %d, %v; want 2", fresh, next, err)
	}
	mustHistoryProven(t, s, fresh, true)
	// The requirement stays after the first claim.
	mustFence(t, lister, sink.Fence{Scope: scope, Holder: fresh, NextOffset: 2, ProofRequired: true})
	// The holder's own re-claim needs no proof.
	if next := c.claim(t, s, fresh); next != 2 {
		t.Fatalf("re-claim by the holder %s = %d, want 2", fresh, next)
	}
	mustHistoryProven(t, s, fresh, false)

	// Never-proven members of the previous incarnation are refused at
	// every epoch: below the cleared one, at it, and above it.
	for _, z := range []epochs.Token{tokenFor(scope, 9, "old-9"), tokenFor(scope, 10, "old-10b"), tokenFor(scope, 11, "old-11"), tokenFor(scope, 40, "old-40")} {
		proofVersion(t, s, z)
	}
	// The refusals changed nothing: the new incarnation still writes.
	c.apply(t, s, fresh, []int64{2}, c.putEffect(t, "k", []int64{2}, "new"))
	mustFence(t, lister, sink.Fence{Scope: scope, Holder: fresh, NextOffset: 3, ProofRequired: true})

	// A member that proves its membership is one of the new incarnation:
	// accepted at its epoch, and the next one must prove too.
	proven := tokenFor(scope, 9, "new-9")
	if next, err := claimProven(t, s, proven, sink.Observed{}); err != nil || next != 3 {
		t.Fatalf("proven Claim by %s = %d, %v; want 3", proven, next, err)
	}
	mustHistoryProven(t, s, proven, true)
	above := tokenFor(scope, 12, "new-12")
	proofVersion(t, s, above)
	if next, err := claimProven(t, s, above, sink.Observed{}); err != nil || next != 3 {
		t.Fatalf("proven Claim by %s = %d, %v; want 3", above, next, err)
	}
	// A proof never lets a claim past the ordering rule.
	_, err := claimProven(t, s, tokenFor(scope, 11, "new-11"), sink.Observed{})
	mustFenced(t, err, sink.OpClaim, above, tokenFor(scope, 11, "new-11"))

	// A second reset keeps the requirement.
	reset(t, r, scope, above, 3)
	mustFence(t, lister, sink.Fence{Scope: scope, NextOffset: 3, ProofRequired: true})
	low := tokenFor(scope, 2, "new-2")
	if _, err := claimProven(t, s, low, sink.Observed{}); err != nil {
		t.Fatalf("proven Claim by %s after the second reset: %v", low, err)
	}
	c.mustGet(t, s, key(t, "k", 2), "new")
}

// testResetPreviousIncarnationAboveCleared is the hole of a reset that
// asked a proof only at or below the epoch it cleared: in the previous
// incarnation A holds p at epoch 10 and a rebalance gives p to Z at epoch
// 12, but Z pauses before its claim, so the sink still holds A@10. The
// operator resets; the new incarnation proves and claims at epoch 1. Z
// wakes and claims at 12, above everything the sink has seen, with no
// proof: it must be refused, and the live worker must keep writing.
func (c *suite[Tx]) testResetPreviousIncarnationAboveCleared(t *testing.T) {
	s := c.h.Open(t)
	r, _ := c.resetter(t, s)
	ctx := t.Context()
	scope := scopeFor(t)
	a, z := tokenFor(scope, 10, "a"), tokenFor(scope, 12, "z")
	c.claim(t, s, a)
	c.apply(t, s, a, []int64{0}, c.putEffect(t, "k", []int64{0}, "a"))
	reset(t, r, scope, a, 1)
	fresh := tokenFor(scope, 1, "new-1")
	if _, err := claimProven(t, s, fresh, sink.Observed{}); err != nil {
		t.Fatalf("proven Claim by %s: %v", fresh, err)
	}
	c.apply(t, s, fresh, []int64{1}, c.putEffect(t, "k", []int64{1}, "new"))
	_, err := s.Claim(ctx, z, sink.Observed{})
	mustProofRequired(t, err, z)
	_, err = s.Apply(ctx, z, sink.Batch{Offsets: []int64{2}}, c.putEffect(t, "k", []int64{2}, "z"))
	mustFenced(t, err, sink.OpApply, fresh, z)
	c.mustAbsent(t, s, key(t, "k", 2))
	c.apply(t, s, fresh, []int64{2}, c.putEffect(t, "k", []int64{2}, "new"))
	c.mustGet(t, s, key(t, "k", 2), "new")
	c.mustNext(t, s, fresh, 3)
}

// testResetStaleProof: a proof is evidence about the moment it was made.
// A member that proved (and was then paused) cannot claim on that proof
// once a reset or another claim has been accepted since: its claim is
// refused as stale, with the version to prove against now. So a member of
// an incarnation that ended while it was paused cannot come back on the
// proof it made while it was still a member.
func (c *suite[Tx]) testResetStaleProof(t *testing.T) {
	s := c.h.Open(t)
	r, _ := c.resetter(t, s)
	ctx := t.Context()
	scope := scopeFor(t)
	a := tokenFor(scope, 3, "a")
	c.claim(t, s, a)
	reset(t, r, scope, a, 0)
	// z, of the incarnation after that reset, proves at epoch 7 and is
	// paused before it claims.
	z := tokenFor(scope, 7, "z")
	before := proofVersion(t, s, z)
	// That incarnation ends; another reset; the next one claims at 1.
	reset(t, r, scope, epochs.Token{}, 0)
	fresh := tokenFor(scope, 1, "new-1")
	if _, err := claimProven(t, s, fresh, sink.Observed{}); err != nil {
		t.Fatalf("proven Claim by %s: %v", fresh, err)
	}
	// z wakes and claims at 7 > 1 on its old proof: refused as stale.
	_, err := s.Claim(ctx, z, sink.Observed{Proof: &sink.Proof{Version: before}})
	mustProofRequired(t, err, z)
	var pe *sink.ProofRequiredError
	if !errors.As(err, &pe) || !pe.Stale || pe.ProvenAt != before || pe.Version == before {
		t.Fatalf("Claim by %s on a proof made at version %d: %v, want a stale *sink.ProofRequiredError naming a newer version", z, before, err)
	}
	_, err = s.Apply(ctx, z, sink.Batch{Offsets: []int64{0}}, c.putEffect(t, "k", []int64{0}, "z"))
	mustFenced(t, err, sink.OpApply, fresh, z)
	c.mustAbsent(t, s, key(t, "k", 0))
	c.mustNext(t, s, fresh, 0)

	// A proof made after another claim of the same incarnation is
	// current: the ordering rule then decides.
	b := tokenFor(scope, 2, "b")
	v := proofVersion(t, s, b)
	if _, err := s.Claim(ctx, b, sink.Observed{Proof: &sink.Proof{Version: v}}); err != nil {
		t.Fatalf("Claim by %s on a proof at the current version %d: %v", b, v, err)
	}
	mustHistoryProven(t, s, b, true)
	// A proof made before b's claim is stale now.
	later := tokenFor(scope, 5, "c")
	_, err = s.Claim(ctx, later, sink.Observed{Proof: &sink.Proof{Version: v}})
	mustProofRequired(t, err, later)
}

// testFenceVersion: a fence's version moves with every accepted claim and
// reset and with nothing else, and a refusal for want of a proof names
// the version Lister shows.
func (c *suite[Tx]) testFenceVersion(t *testing.T) {
	s := c.h.Open(t)
	r, _ := c.resetter(t, s)
	lister, ok := sink.As[fenceadmin.Lister](s)
	if !ok {
		t.Skip("sinktest: the sink does not implement fenceadmin.Lister")
	}
	scope := scopeFor(t)
	version := func() int64 {
		t.Helper()
		fences, err := lister.Fences(t.Context())
		if err != nil {
			t.Fatalf("Fences: %v", err)
		}
		for _, f := range fences {
			if f.Scope == scope {
				return f.Version
			}
		}
		t.Fatalf("Fences lacks scope %s", scope)
		return 0
	}
	a := tokenFor(scope, 1, "a")
	c.claim(t, s, a)
	v1 := version()
	c.apply(t, s, a, []int64{0, 1}, c.putEffect(t, "k", []int64{0, 1}, "a"))
	if v := version(); v != v1 {
		t.Fatalf("version after an Apply = %d, want %d (only claims and resets move it)", v, v1)
	}
	b := tokenFor(scope, 2, "b")
	c.claim(t, s, b)
	v2 := version()
	if v2 == v1 {
		t.Fatalf("version after a claim by %s = %d, unchanged", b, v2)
	}
	_, err := s.Claim(t.Context(), a, sink.Observed{})
	mustFenced(t, err, sink.OpClaim, b, a)
	if v := version(); v != v2 {
		t.Fatalf("version after a fenced claim = %d, want %d", v, v2)
	}
	reset(t, r, scope, b, 2)
	v3 := version()
	if v3 == v2 || v3 == v1 {
		t.Fatalf("version after a reset = %d, not moved from %d", v3, v2)
	}
	if v := proofVersion(t, s, tokenFor(scope, 1, "c")); v != v3 {
		t.Fatalf("a refusal for want of a proof names version %d, Lister shows %d", v, v3)
	}
	if v := version(); v != v3 {
		t.Fatalf("version after a claim refused for want of a proof = %d, want %d", v, v3)
	}
}

// testResetProofDurable: the proof requirement survives reopening the
// sink.
func (c *suite[Tx]) testResetProofDurable(t *testing.T) {
	if c.h.Reopen == nil {
		t.Skip("sinktest: Harness.Reopen is nil: the backend is not durable, so the proof requirement across reopen is not tested")
	}
	s := c.h.Open(t)
	r, _ := c.resetter(t, s)
	scope := scopeFor(t)
	old, fresh := tokenFor(scope, 10, "old-10"), tokenFor(scope, 1, "new-1")
	c.claim(t, s, old)
	reset(t, r, scope, old, 0)
	if _, err := claimProven(t, s, fresh, sink.Observed{}); err != nil {
		t.Fatalf("proven Claim by %s after the reset: %v", fresh, err)
	}
	s = c.h.Reopen(t, s)
	if l, ok := sink.As[fenceadmin.Lister](s); ok {
		mustFence(t, l, sink.Fence{Scope: scope, Holder: fresh, ProofRequired: true})
	}
	for _, z := range []epochs.Token{tokenFor(scope, 9, "old-9"), tokenFor(scope, 11, "old-11")} {
		_, err := s.Claim(t.Context(), z, sink.Observed{})
		mustProofRequired(t, err, z)
	}
	mustHistoryProven(t, s, fresh, true)
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
	if next, err := claimProven(t, s, b, sink.Observed{}); err != nil || next != 1 {
		t.Fatalf("proven Claim by %s at a's epoch after the reset = %d, %v; want 1", b, next, err)
	}
	_, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{1}}, c.putEffect(t, "k", []int64{1}, "a"))
	mustFenced(t, err, sink.OpApply, b, a)
	c.mustAbsent(t, s, key(t, "k", 1))
	if dl, ok := s, s.Features().DeadLetters; ok {
		_, err := dl.DeadLetter(ctx, a, poison(1))
		mustFenced(t, err, sink.OpDeadLetter, b, a)
		if store, ok := sink.As[dlq.Store](s); ok {
			if got, err := store.DeadLetters(ctx, dlq.Filter{Group: scope.Group}); err != nil || len(got) != 0 {
				t.Fatalf("dead letters after a's fenced dead letter = %+v, %v; want none", got, err)
			}
		}
	}
	_, err = claimProven(t, s, a, sink.Observed{})
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
	_, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx Tx, i int) error {
		if !raced {
			raced = true
			reset(t, r, scope, a, 0)
			if _, err := claimProven(t, s, b, sink.Observed{}); err != nil {
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

// fencedVersion claims with tok and obs, asserts the claim was fenced by
// holder, and returns the fence version the refusal names.
func fencedVersion[Tx any](t testing.TB, s sink.Sink[Tx], tok epochs.Token, obs sink.Observed, holder epochs.Token) int64 {
	t.Helper()
	_, err := s.Claim(t.Context(), tok, obs)
	mustFenced(t, err, sink.OpClaim, holder, tok)
	var fe *sink.FencedError
	if !errors.As(err, &fe) {
		t.Fatalf("Claim by %s: %v, want a *sink.FencedError", tok, err)
	}
	return fe.Version
}

// testProvenTakeover: a group that expired or was recreated comes back
// at epochs below the stored holder's (docs/design.md#expired-groups). A
// claim below the holder passes only with a proof of membership made at
// the fence's current version whose group epoch, observed after that
// version was read, is below the holder's epoch and not below the
// claimer's own: the holder then belongs to an earlier incarnation. The
// takeover is recorded as a reset of that holder followed by a proven
// claim, and leaves a proof required of every later claim, so the
// earlier incarnation stays out.
func (c *suite[Tx]) testProvenTakeover(t *testing.T) {
	s := c.h.Open(t)
	ctx := t.Context()
	scope := scopeFor(t)
	old := tokenFor(scope, 10, "old")
	c.claim(t, s, old)
	c.apply(t, s, old, offsetsRange(0, 2), c.putEffect(t, "k", offsetsRange(0, 2), "old"))
	fresh := tokenFor(scope, 1, "new-1")
	v := fencedVersion(t, s, fresh, sink.Observed{}, old)
	// What does not prove that the holder is of an earlier incarnation.
	for _, p := range []sink.Proof{
		{Version: v},                    // no group epoch observed
		{Version: v, GroupEpoch: 10},    // the group reached the holder's epoch
		{Version: v + 1, GroupEpoch: 3}, // a proof made at another version
		{Version: v - 1, GroupEpoch: 3}, // a proof made at another version
		{Version: v, GroupEpoch: 12},    // above the holder's epoch
	} {
		if got := fencedVersion(t, s, fresh, sink.Observed{Proof: &p}, old); got != v {
			t.Fatalf("refused claim with proof %+v names version %d, want %d", p, got, v)
		}
	}
	above := tokenFor(scope, 5, "new-5")
	fencedVersion(t, s, above, sink.Observed{Proof: &sink.Proof{Version: v, GroupEpoch: 3}}, old) // a claimer above the group epoch it saw

	// The takeover.
	next, err := nextOf(s.Claim(ctx, fresh, sink.Observed{Proof: &sink.Proof{Version: v, GroupEpoch: 3}}))
	if err != nil || next != 2 {
		t.Fatalf("proven takeover by %s below %s = %d, %v; want 2", fresh, old, next, err)
	}
	if l, ok := sink.As[fenceadmin.Lister](s); ok {
		mustFence(t, l, sink.Fence{Scope: scope, Holder: fresh, NextOffset: 2, ProofRequired: true})
	}
	if h, ok := sink.As[fenceadmin.Historian](s); ok {
		hs, err := h.History(ctx, scope)
		if err != nil || len(hs) < 3 {
			t.Fatalf("History = %+v, %v", hs, err)
		}
		rs, cl := hs[len(hs)-2], hs[len(hs)-1]
		if rs.Kind != fenceadmin.KindReset || rs.Token != old || rs.NextOffset != 2 || rs.Reason != fenceadmin.TakeoverReason ||
			!strings.Contains(rs.Detail, "group epoch 3") {
			t.Fatalf("the takeover's audit row = %+v, want a reset of %s at 2 with the takeover reason and the group epoch", rs, old)
		}
		if cl.Kind != fenceadmin.KindClaim || cl.Token != fresh || !cl.Proven {
			t.Fatalf("the takeover's claim row = %+v, want a proven claim by %s", cl, fresh)
		}
	}
	// The earlier incarnation stays out: its writes are fenced, and its
	// claims at any epoch need a proof it cannot make.
	_, err = s.Apply(ctx, old, sink.Batch{Offsets: []int64{2}}, c.putEffect(t, "k", []int64{2}, "old"))
	mustFenced(t, err, sink.OpApply, fresh, old)
	for _, z := range []epochs.Token{old, tokenFor(scope, 12, "old-12")} {
		proofVersion(t, s, z)
	}
	c.apply(t, s, fresh, []int64{2}, c.putEffect(t, "k", []int64{2}, "new"))
	c.mustGet(t, s, key(t, "k", 2), "new")
	c.mustNext(t, s, fresh, 3)
}

// testTakeoverStaleProof: a takeover's proof is checked against the
// version it was made at, like every proof. A claimer that read the
// fence, and proved, before another claim was accepted cannot take over
// on that proof: the group epoch it saw may be older than the claim.
func (c *suite[Tx]) testTakeoverStaleProof(t *testing.T) {
	s := c.h.Open(t)
	ctx := t.Context()
	scope := scopeFor(t)
	old := tokenFor(scope, 10, "old")
	c.claim(t, s, old)
	fresh := tokenFor(scope, 1, "new-1")
	v := fencedVersion(t, s, fresh, sink.Observed{}, old)
	newer := tokenFor(scope, 11, "newer")
	c.claim(t, s, newer)
	got := fencedVersion(t, s, fresh, sink.Observed{Proof: &sink.Proof{Version: v, GroupEpoch: 3}}, newer)
	if got == v {
		t.Fatalf("the refusal names version %d, the one before %s claimed", got, newer)
	}
	// Proven again, at the version the refusal named, it takes over.
	if _, err := s.Claim(ctx, fresh, sink.Observed{Proof: &sink.Proof{Version: got, GroupEpoch: 3}}); err != nil {
		t.Fatalf("proven takeover at the current version: %v", err)
	}
	c.mustNext(t, s, fresh, 0)
}
