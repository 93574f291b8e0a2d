// Package sinktest is the one conformance suite that every workrouter sink
// backend must pass. It checks the fencing protocol of docs/design.md#protocol from
// the outside, through the [sink.Sink] contract and a few backend-specific
// hooks a backend supplies in a [Harness]: how to open an empty sink, how
// to reopen its durable storage, and how to write and read one key through
// its native transaction handle.
//
// Every check is written so that a sink that skipped the fence check (or
// the offset skip, or the rollback) fails it.
//
// A backend runs the suite from an ordinary test:
//
//	func TestConformance(t *testing.T) {
//		sinktest.Run(t, sinktest.Harness[*sql.Tx]{
//			Open: func(t testing.TB) sink.Sink[*sql.Tx] {
//				s := mysink.OpenTemp(t.TempDir())
//				t.Cleanup(func() { s.Close() })
//				return s
//			},
//			Reopen: func(t testing.TB, s sink.Sink[*sql.Tx]) sink.Sink[*sql.Tx] {
//				return s.(*mysink.Sink).CloseAndReopen(t)
//			},
//			Put: func(ctx context.Context, tx *sql.Tx, key, value string) error {
//				_, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO kv VALUES (?, ?)", key, value)
//				return err
//			},
//			Get: func(ctx context.Context, s sink.Sink[*sql.Tx], key string) (string, bool, error) {
//				return s.(*mysink.Sink).ReadKV(ctx, key)
//			},
//		})
//	}
//
// The features a sink declares ([sink.Features]: command IDs, gaps, dead
// letters) and the optional capabilities it has ([fenceadmin.Lister],
// [fenceadmin.Resetter], [fenceadmin.Historian], [dlq.Store]) are tested
// when it has them, both on the sink and through the metrics wrapper
// (sink/sinkmetrics), which must declare the same features and keep
// every capability reachable with [sink.As]. A backend that is not durable leaves Reopen nil and
// the durability test skips, saying so.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/sinkmetrics"
)

// Harness adapts one backend to the suite. Its functions are called from
// the suite's test goroutines, possibly from several parallel subtests at
// once, so they must be safe for concurrent use.
type Harness[Tx any] struct {
	// Open returns a new, empty sink (its own namespace) and registers its
	// cleanup with t.
	Open func(t testing.TB) sink.Sink[Tx]
	// Reopen closes s and reopens the same durable storage; nil means the
	// backend is not durable (the durability test skips with a message
	// saying so).
	Reopen func(t testing.TB, s sink.Sink[Tx]) sink.Sink[Tx]
	// Put writes key=value through the backend's transaction handle (used
	// inside Apply effects).
	Put func(ctx context.Context, tx Tx, key, value string) error
	// Get reads the committed value of key from s.
	Get func(ctx context.Context, s sink.Sink[Tx], key string) (value string, ok bool, err error)
	// WritesSerialized reports that the backend holds one write lock for
	// the whole of an Apply (SQLite), so that no claim or reset can land
	// while an effect runs: the tests that race one against an effect
	// skip, saying so.
	WritesSerialized bool
	// RequireGaps makes the suite fail when the sink does not declare
	// [sink.Features].Gaps (docs/design.md#gaps): every backend of this
	// module must. Without it, the gapped tests skip for such a
	// sink, saying so.
	RequireGaps bool
}

// Run runs the conformance suite against the backend h describes, as
// parallel subtests of t. Call it from the test goroutine of t.
func Run[Tx any](t *testing.T, h Harness[Tx]) {
	t.Helper()
	if h.Open == nil || h.Put == nil || h.Get == nil {
		t.Fatal("sinktest: Harness.Open, Harness.Put and Harness.Get are required")
	}
	c := &suite[Tx]{h: h}
	// The same backend behind the metrics wrapper: its optional
	// capabilities must stay reachable through sink.As.
	wrapped := &suite[Tx]{h: h}
	wrapped.h.Open = func(t testing.TB) sink.Sink[Tx] { return wrapMetrics(t, h.Open(t)) }
	wrapped.h.Get = func(ctx context.Context, s sink.Sink[Tx], key string) (string, bool, error) {
		return h.Get(ctx, s.(sink.Unwrapper[Tx]).Unwrap(), key)
	}
	wrapped.h.Reopen = nil
	tests := []namedTest{
		{"FirstClaimReturnsZero", c.testFirstClaimReturnsZero},
		{"StaleClaimFenced", c.testStaleClaimFenced},
		{"StaleApplyFenced", c.testStaleApplyFenced},
		{"EqualEpochOtherMemberFenced", c.testEqualEpochOtherMemberFenced},
		{"ReclaimIdempotent", c.testReclaimIdempotent},
		{"ApplyWithoutClaimFenced", c.testApplyWithoutClaimFenced},
		{"ConcurrentClaimsHighestWins", c.testConcurrentClaimsHighestWins},
		{"ApplyRacingClaimAllOrNothing", c.testApplyRacingClaim},
		{"SameMemberNewEpochDuringApply", c.testSameMemberNewEpochDuringApply},
		{"ReplayIsNoop", c.testReplayIsNoop},
		{"PartialOverlapAppliesNewOnly", c.testPartialOverlap},
		{"EffectErrorRollsBack", c.testEffectErrorRollsBack},
		{"EffectErrorTxHealthy", c.testEffectErrorTxHealthy},
		{"BadBatch", c.testBadBatch},
		{"InvalidToken", c.testInvalidToken},
		{"ScopesIndependent", c.testScopesIndependent},
		{"NewTenureResumes", c.testNewTenureResumes},
		{"DurableAcrossReopen", c.testDurable},
		{"CancelledContext", c.testCancelledContext},
		{"ListerFences", c.testLister},
		{"ResetterResetFence", c.testResetter},
		{"LogIdentity", c.testLogIdentity},
		{"ResetOntoNewLog", c.testResetOntoNewLog},
		{"ResetProofEveryClaim", c.testResetProofEveryClaim},
		{"ResetPreviousIncarnationAboveCleared", c.testResetPreviousIncarnationAboveCleared},
		{"ResetStaleProof", c.testResetStaleProof},
		{"FenceVersion", c.testFenceVersion},
		{"ProvenTakeover", c.testProvenTakeover},
		{"TakeoverStaleProof", c.testTakeoverStaleProof},
		{"ResetProofDurable", c.testResetProofDurable},
		{"SameEpochAfterReset", c.testSameEpochAfterReset},
		{"SameEpochResetDuringApply", c.testSameEpochResetDuringApply},
		{"DeadLetterAfterGap", c.testDeadLetterAfterGap},
		{"DeadLetters", c.testDeadLetters},
		{"DeadLetterStore", c.testDeadLetterStore},
		{"HistorianHistory", c.testHistorian},
		{"CapabilitiesSurviveWrapping", c.testCapabilitiesSurviveWrapping},
		{"ThroughMetricsWrapper/ListerFences", wrapped.testLister},
		{"ThroughMetricsWrapper/ResetterResetFence", wrapped.testResetter},
		{"ThroughMetricsWrapper/ResetProofEveryClaim", wrapped.testResetProofEveryClaim},
		{"ThroughMetricsWrapper/ResetStaleProof", wrapped.testResetStaleProof},
		{"ThroughMetricsWrapper/ProvenTakeover", wrapped.testProvenTakeover},
		{"ThroughMetricsWrapper/HistorianHistory", wrapped.testHistorian},
		{"ThroughMetricsWrapper/StaleApplyFenced", wrapped.testStaleApplyFenced},
		{"ThroughMetricsWrapper/DeadLetters", wrapped.testDeadLetters},
		{"ThroughMetricsWrapper/DeadLetterStore", wrapped.testDeadLetterStore},
		{"DedupeDurableAcrossReopen", c.testDedupeDurable},
		{"GapsRequired", c.testGapsRequired},
		{"GapsDurableAcrossReopen", c.testGapsDurable},
	}
	tests = append(tests, c.featureTests("")...)
	tests = append(tests, wrapped.featureTests("ThroughMetricsWrapper/")...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// featureTests are the tests of the declared features, run on the sink
// and through the metrics wrapper: the command-ID window
// (sink.Features.DedupeWindow, dedupe.go) and the checkpoint with gaps
// (sink.Features.Gaps, gaps.go).
func (c *suite[Tx]) featureTests(prefix string) []namedTest {
	return []namedTest{
		{prefix + "DedupeAcrossBatches", c.testDedupeAcrossBatches},
		{prefix + "DedupeWithinBatch", c.testDedupeWithinBatch},
		{prefix + "DedupeSurvivesNewHolder", c.testDedupeSurvivesNewHolder},
		{prefix + "DedupeFencedRecordsNoID", c.testDedupeFencedRecordsNoID},
		{prefix + "DedupeEffectErrorRecordsNoID", c.testDedupeEffectErrorRecordsNoID},
		{prefix + "DedupeNoIDAlwaysApplied", c.testDedupeNoIDAlwaysApplied},
		{prefix + "DedupeReplayIsSkippedNotDuplicate", c.testDedupeReplayIsSkipped},
		{prefix + "DedupeWindowHorizon", c.testDedupeWindowHorizon},
		{prefix + "DedupeKeptAcrossReset", c.testDedupeKeptAcrossReset},
		{prefix + "DedupeBadBatch", c.testDedupeBadBatch},
		{prefix + "GapsNonContiguousAndWatermark", c.testGapsNonContiguous},
		{prefix + "GapsSkipDone", c.testGapsSkipDone},
		{prefix + "GapsReplayBatch", c.testGapsReplay},
		{prefix + "GapsClaimAfterCrash", c.testGapsClaimAfterCrash},
		{prefix + "GapsZombieLaneFenced", c.testGapsZombieLane},
		{prefix + "GapsClaimDuringLaneEffect", c.testGapsClaimDuringLaneEffect},
		{prefix + "GapsSameEpochResetDuringLane", c.testGapsSameEpochResetDuringLane},
		{prefix + "GapsConcurrentLanes", c.testGapsConcurrentLanes},
		{prefix + "GapsOverlapAppliedOnce", c.testGapsOverlapAppliedOnce},
		{prefix + "GapsApplyRacingClaim", c.testGapsApplyRacingClaim},
		{prefix + "GapsPlainCallsOnGappedScope", c.testGapsPlainCalls},
		{prefix + "GapsDeadLetter", c.testGapsDeadLetter},
		{prefix + "GapsListerDone", c.testGapsLister},
		{prefix + "GapsReset", c.testGapsReset},
		{prefix + "GapsLogCheckUsesEnd", c.testGapsLogCheck},
		{prefix + "GapsDedupe", c.testGapsDedupe},
		{prefix + "GapsManySpans", c.testGapsManySpans},
		{prefix + "GapsEffectErrorRollsBack", c.testGapsEffectError},
		{prefix + "GapsBadBatch", c.testGapsBadBatch},
		{prefix + "GapsHistoryDone", c.testGapsHistoryDone},
	}
}

// suite carries the harness to the subtests.
type suite[Tx any] struct {
	h Harness[Tx]
}

// errBoom is the error the suite's failing effects return.
var errBoom = errors.New("sinktest: effect failed on purpose")

// scopeFor returns a scope unique to the running test.
func scopeFor(t testing.TB) epochs.Scope {
	return epochs.Scope{Group: "g-" + t.Name(), Topic: "orders", Partition: 3}
}

// tokenFor returns a token of scope.
func tokenFor(scope epochs.Scope, epoch int32, member string) epochs.Token {
	return epochs.Token{Group: scope.Group, Topic: scope.Topic, Partition: scope.Partition, Epoch: epoch, Member: member}
}

// key returns a key unique to the running test.
func key(t testing.TB, parts ...any) string {
	return t.Name() + "/" + fmt.Sprint(parts...)
}

// putEffect returns an effect that writes, for record i, key(t, prefix, offsets[i]) = value.
func (c *suite[Tx]) putEffect(t testing.TB, prefix string, offsets []int64, value string) sink.Effect[Tx] {
	return func(ctx context.Context, tx Tx, i int) error {
		return c.h.Put(ctx, tx, key(t, prefix, offsets[i]), value)
	}
}

func (c *suite[Tx]) claim(t testing.TB, s sink.Sink[Tx], tok epochs.Token) int64 {
	t.Helper()
	cp, err := s.Claim(t.Context(), tok, sink.Observed{})
	if err != nil {
		t.Fatalf("Claim(%s): %v", tok, err)
	}
	return cp.NextOffset
}

// nextOf is the NextOffset of a Claim's checkpoint, and its error.
func nextOf(cp sink.Checkpoint, err error) (int64, error) { return cp.NextOffset, err }

func (c *suite[Tx]) apply(t testing.TB, s sink.Sink[Tx], tok epochs.Token, offsets []int64, effect sink.Effect[Tx]) sink.Result {
	t.Helper()
	res, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offsets}, effect)
	if err != nil {
		t.Fatalf("Apply(%s, %v): %v", tok, offsets, err)
	}
	return res
}

// mustGet asserts the committed value of k.
func (c *suite[Tx]) mustGet(t testing.TB, s sink.Sink[Tx], k, want string) {
	t.Helper()
	got, ok, err := c.h.Get(t.Context(), s, k)
	switch {
	case err != nil:
		t.Fatalf("Get(%q): %v", k, err)
	case !ok:
		t.Fatalf("Get(%q): absent, want %q", k, want)
	case got != want:
		t.Fatalf("Get(%q) = %q, want %q", k, got, want)
	}
}

// mustAbsent asserts that k has no committed value.
func (c *suite[Tx]) mustAbsent(t testing.TB, s sink.Sink[Tx], k string) {
	t.Helper()
	got, ok, err := c.h.Get(t.Context(), s, k)
	if err != nil {
		t.Fatalf("Get(%q): %v", k, err)
	}
	if ok {
		t.Fatalf("Get(%q) = %q, want absent", k, got)
	}
}

// mustFenced asserts that err is a fence refusal of op with the given
// stored and offered tokens.
func mustFenced(t testing.TB, err error, op sink.Op, stored, offered epochs.Token) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s by %s succeeded, want fenced (holder %s)", op, offered, stored)
	}
	if !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("%s by %s: error %v does not match sink.ErrFenced", op, offered, err)
	}
	var fe *sink.FencedError
	if !errors.As(err, &fe) {
		t.Fatalf("%s by %s: error %v is not a *sink.FencedError", op, offered, err)
	}
	if fe.Op != op || fe.Stored != stored || fe.Offered != offered {
		t.Fatalf("FencedError = {Op:%s Stored:%s Offered:%s}, want {Op:%s Stored:%s Offered:%s}",
			fe.Op, fe.Stored, fe.Offered, op, stored, offered)
	}
}

// mustNext asserts the scope's NextOffset by re-claiming with its holder's
// own token (idempotent).
func (c *suite[Tx]) mustNext(t testing.TB, s sink.Sink[Tx], holder epochs.Token, want int64) {
	t.Helper()
	if got := c.claim(t, s, holder); got != want {
		t.Fatalf("NextOffset (re-claim by %s) = %d, want %d", holder, got, want)
	}
}

// failIfRun is an effect that must never be called.
func failIfRun[Tx any](t testing.TB) sink.Effect[Tx] {
	return func(context.Context, Tx, int) error {
		t.Errorf("effect ran for a call that must not run effects")
		return nil
	}
}

func offsetsRange(from, to int64) []int64 {
	var o []int64
	for i := from; i < to; i++ {
		o = append(o, i)
	}
	return o
}

func (c *suite[Tx]) testFirstClaimReturnsZero(t *testing.T) {
	s := c.h.Open(t)
	tok := tokenFor(scopeFor(t), 7, "m1")
	if next := c.claim(t, s, tok); next != 0 {
		t.Fatalf("first Claim of a fresh scope = %d, want 0", next)
	}
	// The claim made tok the holder: its writes are accepted.
	res := c.apply(t, s, tok, []int64{0}, c.putEffect(t, "k", []int64{0}, "v"))
	if res.Applied != 1 || res.Skipped != 0 || res.NextOffset != 1 {
		t.Fatalf("Apply result = %+v, want {Applied:1 Skipped:0 NextOffset:1}", res)
	}
	c.mustGet(t, s, key(t, "k", 0), "v")
}

func (c *suite[Tx]) testStaleClaimFenced(t *testing.T) {
	s := c.h.Open(t)
	scope := scopeFor(t)
	newer, older := tokenFor(scope, 5, "m-new"), tokenFor(scope, 4, "m-old")
	c.claim(t, s, newer)
	_, err := s.Claim(t.Context(), older, sink.Observed{})
	mustFenced(t, err, sink.OpClaim, newer, older)
	// The refused claim changed nothing: newer still holds, older does not.
	c.apply(t, s, newer, []int64{0}, c.putEffect(t, "new", []int64{0}, "v"))
	_, err = s.Apply(t.Context(), older, sink.Batch{Offsets: []int64{1}}, failIfRun[Tx](t))
	mustFenced(t, err, sink.OpApply, newer, older)
	c.mustNext(t, s, newer, 1)
}

func (c *suite[Tx]) testStaleApplyFenced(t *testing.T) {
	s := c.h.Open(t)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	c.claim(t, s, a)
	c.apply(t, s, a, []int64{0}, c.putEffect(t, "k", []int64{0}, "a"))
	if next := c.claim(t, s, b); next != 1 {
		t.Fatalf("Claim by new tenure = %d, want 1", next)
	}
	// The old tenure wakes up and writes: refused, nothing visible.
	offs := []int64{1, 2}
	_, err := s.Apply(t.Context(), a, sink.Batch{Offsets: offs}, c.putEffect(t, "k", offs, "stale"))
	mustFenced(t, err, sink.OpApply, b, a)
	c.mustAbsent(t, s, key(t, "k", 1))
	c.mustAbsent(t, s, key(t, "k", 2))
	c.mustGet(t, s, key(t, "k", 0), "a")
	c.mustNext(t, s, b, 1)
	// Overwriting an existing key under the stale token is refused too.
	_, err = s.Apply(t.Context(), a, sink.Batch{Offsets: []int64{5}}, func(ctx context.Context, tx Tx, _ int) error {
		return c.h.Put(ctx, tx, key(t, "k", 0), "stale")
	})
	mustFenced(t, err, sink.OpApply, b, a)
	c.mustGet(t, s, key(t, "k", 0), "a")
	c.mustNext(t, s, b, 1)
}

func (c *suite[Tx]) testEqualEpochOtherMemberFenced(t *testing.T) {
	s := c.h.Open(t)
	scope := scopeFor(t)
	first, second := tokenFor(scope, 3, "zombie"), tokenFor(scope, 3, "replacement")
	c.claim(t, s, first)
	_, err := s.Claim(t.Context(), second, sink.Observed{})
	mustFenced(t, err, sink.OpClaim, first, second)
	_, err = s.Apply(t.Context(), second, sink.Batch{Offsets: []int64{0}}, c.putEffect(t, "k", []int64{0}, "second"))
	mustFenced(t, err, sink.OpApply, first, second)
	c.mustAbsent(t, s, key(t, "k", 0))
	c.mustNext(t, s, first, 0)
}

func (c *suite[Tx]) testReclaimIdempotent(t *testing.T) {
	s := c.h.Open(t)
	tok := tokenFor(scopeFor(t), 2, "m")
	c.claim(t, s, tok)
	offs := offsetsRange(0, 3)
	c.apply(t, s, tok, offs, c.putEffect(t, "k", offs, "v"))
	for range 3 {
		if next := c.claim(t, s, tok); next != 3 {
			t.Fatalf("re-Claim by holder = %d, want 3", next)
		}
	}
	res := c.apply(t, s, tok, []int64{3}, c.putEffect(t, "k", []int64{3}, "v"))
	if res.NextOffset != 4 {
		t.Fatalf("Apply after re-claim: NextOffset = %d, want 4", res.NextOffset)
	}
	c.mustGet(t, s, key(t, "k", 3), "v")
}

func (c *suite[Tx]) testApplyWithoutClaimFenced(t *testing.T) {
	s := c.h.Open(t)
	scope := scopeFor(t)
	never := tokenFor(scope, 1, "never-claimed")
	// A fresh scope: no holder at all.
	_, err := s.Apply(t.Context(), never, sink.Batch{Offsets: []int64{0}}, c.putEffect(t, "k", []int64{0}, "x"))
	mustFenced(t, err, sink.OpApply, epochs.Token{}, never)
	c.mustAbsent(t, s, key(t, "k", 0))

	// A claimed scope: even a higher epoch must claim before it writes.
	holder, higher := tokenFor(scope, 1, "holder"), tokenFor(scope, 9, "upstart")
	if next := c.claim(t, s, holder); next != 0 {
		t.Fatalf("Claim after refused Apply = %d, want 0 (the refused Apply moved NextOffset)", next)
	}
	_, err = s.Apply(t.Context(), higher, sink.Batch{Offsets: []int64{0}}, c.putEffect(t, "k", []int64{0}, "x"))
	mustFenced(t, err, sink.OpApply, holder, higher)
	c.mustAbsent(t, s, key(t, "k", 0))
	c.mustNext(t, s, holder, 0)
}

func (c *suite[Tx]) testConcurrentClaimsHighestWins(t *testing.T) {
	const n = 16
	s := c.h.Open(t)
	scope := scopeFor(t)
	epochsOrder := rand.Perm(n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	claimErrs := make([]error, n)
	for _, e := range epochsOrder {
		wg.Go(func() {
			<-start
			_, claimErrs[e] = s.Claim(t.Context(), tokenFor(scope, int32(e+1), "m"+strconv.Itoa(e+1)), sink.Observed{})
		})
	}
	close(start)
	wg.Wait()
	if err := claimErrs[n-1]; err != nil {
		t.Fatalf("Claim by the highest epoch %d failed: %v", n, err)
	}
	for e, err := range claimErrs {
		if err != nil && !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("Claim by epoch %d: %v, want nil or sink.ErrFenced", e+1, err)
		}
	}
	winner := tokenFor(scope, n, "m"+strconv.Itoa(n))
	applyErrs := make([]error, n)
	start = make(chan struct{})
	for _, e := range rand.Perm(n) {
		wg.Go(func() {
			<-start
			tok := tokenFor(scope, int32(e+1), "m"+strconv.Itoa(e+1))
			_, applyErrs[e] = s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx Tx, _ int) error {
				return c.h.Put(ctx, tx, key(t, "by", e+1), "x")
			})
		})
	}
	close(start)
	wg.Wait()
	for e, err := range applyErrs {
		tok := tokenFor(scope, int32(e+1), "m"+strconv.Itoa(e+1))
		if e == n-1 {
			if err != nil {
				t.Fatalf("Apply by the final holder %s: %v", tok, err)
			}
			c.mustGet(t, s, key(t, "by", e+1), "x")
			continue
		}
		mustFenced(t, err, sink.OpApply, winner, tok)
		c.mustAbsent(t, s, key(t, "by", e+1))
	}
	c.mustNext(t, s, winner, 1)
}

func (c *suite[Tx]) testApplyRacingClaim(t *testing.T) {
	const rounds = 40
	const batch = 4
	s := c.h.Open(t)
	scope := scopeFor(t)
	var landed, fenced int
	for r := range rounds {
		old := tokenFor(scope, int32(2*r+1), "old")
		newer := tokenFor(scope, int32(2*r+2), "new")
		base := c.claim(t, s, old)
		offs := offsetsRange(base, base+batch)
		var (
			wg       sync.WaitGroup
			applyErr error
			claimErr error
			claimed  int64
		)
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			_, applyErr = s.Apply(t.Context(), old, sink.Batch{Offsets: offs}, func(ctx context.Context, tx Tx, i int) error {
				if r%2 == 0 {
					runtime.Gosched() // widen the window between records
				}
				return c.h.Put(ctx, tx, key(t, "r", r, "-", offs[i]), "old")
			})
		})
		wg.Go(func() {
			<-start
			// Vary who goes first from round to round, so that both
			// outcomes get exercised.
			for range r % 8 {
				runtime.Gosched()
			}
			claimed, claimErr = nextOf(s.Claim(t.Context(), newer, sink.Observed{}))
		})
		close(start)
		wg.Wait()
		if claimErr != nil {
			t.Fatalf("round %d: Claim by newer tenure %s: %v", r, newer, claimErr)
		}
		var present int
		for _, o := range offs {
			if _, ok, err := c.h.Get(t.Context(), s, key(t, "r", r, "-", o)); err != nil {
				t.Fatalf("round %d: Get: %v", r, err)
			} else if ok {
				present++
			}
		}
		switch {
		case applyErr == nil:
			// The apply landed; it must have landed entirely before the
			// claim, so the claim resumes after it.
			landed++
			if claimed != base+batch {
				t.Fatalf("round %d: Apply by %s succeeded but the racing Claim by %s returned NextOffset %d, want %d (write accepted after a newer claim)",
					r, old, newer, claimed, base+batch)
			}
			if present != batch {
				t.Fatalf("round %d: Apply succeeded but %d of %d effects are visible", r, present, batch)
			}
		default:
			fenced++
			mustFenced(t, applyErr, sink.OpApply, newer, old)
			if claimed != base {
				t.Fatalf("round %d: Apply fenced but Claim returned NextOffset %d, want %d", r, claimed, base)
			}
			if present != 0 {
				t.Fatalf("round %d: Apply fenced but %d of %d effects are visible", r, present, batch)
			}
		}
		// Whatever happened, the old tenure is fenced from now on.
		_, err := s.Apply(t.Context(), old, sink.Batch{Offsets: []int64{base + batch + 100}}, failIfRun[Tx](t))
		mustFenced(t, err, sink.OpApply, newer, old)
		c.mustNext(t, s, newer, claimed)
	}
	t.Logf("%d rounds: %d applies landed before the claim, %d were fenced", rounds, landed, fenced)
}

func (c *suite[Tx]) testReplayIsNoop(t *testing.T) {
	s := c.h.Open(t)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	offs := offsetsRange(0, 3)
	c.apply(t, s, tok, offs, c.putEffect(t, "k", offs, "v1"))
	var calls int
	res := c.apply(t, s, tok, offs, func(ctx context.Context, tx Tx, i int) error {
		calls++
		return c.h.Put(ctx, tx, key(t, "k", offs[i]), "v2")
	})
	if calls != 0 {
		t.Fatalf("replayed batch ran its effect %d times, want 0", calls)
	}
	if want := (sink.Result{Applied: 0, Skipped: 3, NextOffset: 3}); !res.Equal(want) {
		t.Fatalf("replay Apply result = %+v, want %+v", res, want)
	}
	for _, o := range offs {
		c.mustGet(t, s, key(t, "k", o), "v1")
	}
	c.mustNext(t, s, tok, 3)
}

func (c *suite[Tx]) testPartialOverlap(t *testing.T) {
	s := c.h.Open(t)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	first := offsetsRange(0, 3)
	c.apply(t, s, tok, first, c.putEffect(t, "k", first, "v1"))
	second := []int64{1, 2, 3, 4}
	var mu sync.Mutex
	ran := map[int]bool{}
	res := c.apply(t, s, tok, second, func(ctx context.Context, tx Tx, i int) error {
		mu.Lock()
		ran[i] = true
		mu.Unlock()
		return c.h.Put(ctx, tx, key(t, "k", second[i]), "v2")
	})
	if want := (sink.Result{Applied: 2, Skipped: 2, NextOffset: 5}); !res.Equal(want) {
		t.Fatalf("overlapping Apply result = %+v, want %+v", res, want)
	}
	if ran[0] || ran[1] || !ran[2] || !ran[3] {
		t.Fatalf("effect ran for indexes %v, want exactly 2 and 3", ran)
	}
	c.mustGet(t, s, key(t, "k", 0), "v1")
	c.mustGet(t, s, key(t, "k", 1), "v1")
	c.mustGet(t, s, key(t, "k", 2), "v1")
	c.mustGet(t, s, key(t, "k", 3), "v2")
	c.mustGet(t, s, key(t, "k", 4), "v2")
	c.mustNext(t, s, tok, 5)
}

// testEffectErrorTxHealthy: an effect that writes through the sink's
// transaction and then fails on its own (a call to another service that
// is down: a network error) fails in a sound transaction, and the sink
// says so (sink.EffectError.TxHealthy), so that the consumer counts the
// error against the record instead of taking it for a sink outage.
func (c *suite[Tx]) testEffectErrorTxHealthy(t *testing.T) {
	s := c.h.Open(t)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0, 1}}, func(ctx context.Context, tx Tx, i int) error {
		if err := c.h.Put(ctx, tx, key(t, "k", int64(i)), "v"); err != nil {
			return err
		}
		if i == 1 {
			return fmt.Errorf("post to the service: %w", refused)
		}
		return nil
	})
	var ee *sink.EffectError
	if !errors.As(err, &ee) || ee.Index != 1 || !errors.Is(err, refused) {
		t.Fatalf("Apply with an effect failing on its own: %v, want a *sink.EffectError at index 1 wrapping the effect's error", err)
	}
	if !ee.TxHealthy {
		t.Fatalf("EffectError %+v: TxHealthy is false, but the sink's transaction was sound: the handler's error would be taken for the sink's", ee)
	}
	c.mustAbsent(t, s, key(t, "k", 0))
	c.mustNext(t, s, tok, 0)
}

func (c *suite[Tx]) testEffectErrorRollsBack(t *testing.T) {
	s := c.h.Open(t)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	c.apply(t, s, tok, []int64{0}, c.putEffect(t, "k", []int64{0}, "v1"))
	offs := []int64{1, 2, 3}
	_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offs}, func(ctx context.Context, tx Tx, i int) error {
		// Overwrite an existing key and create new ones, then fail.
		if err := c.h.Put(ctx, tx, key(t, "k", 0), "overwritten"); err != nil {
			return err
		}
		if err := c.h.Put(ctx, tx, key(t, "k", offs[i]), "v2"); err != nil {
			return err
		}
		if i == 2 {
			return errBoom
		}
		return nil
	})
	if err == nil {
		t.Fatal("Apply with a failing effect succeeded")
	}
	var ee *sink.EffectError
	if !errors.As(err, &ee) {
		t.Fatalf("Apply error %v is not a *sink.EffectError", err)
	}
	if !errors.Is(err, errBoom) {
		t.Fatalf("Apply error %v does not wrap the effect's error", err)
	}
	if ee.Index != 2 || ee.Offset != 3 {
		t.Fatalf("EffectError{Index:%d Offset:%d}, want {Index:2 Offset:3}", ee.Index, ee.Offset)
	}
	if errors.Is(err, sink.ErrFenced) {
		t.Fatalf("effect failure %v matches sink.ErrFenced", err)
	}
	c.mustGet(t, s, key(t, "k", 0), "v1")
	for _, o := range offs {
		c.mustAbsent(t, s, key(t, "k", o))
	}
	c.mustNext(t, s, tok, 1)
	// The batch can be retried and then applies in full.
	res := c.apply(t, s, tok, offs, c.putEffect(t, "k", offs, "v3"))
	if want := (sink.Result{Applied: 3, Skipped: 0, NextOffset: 4}); !res.Equal(want) {
		t.Fatalf("retried Apply result = %+v, want %+v", res, want)
	}
	c.mustGet(t, s, key(t, "k", 3), "v3")
}

func (c *suite[Tx]) testBadBatch(t *testing.T) {
	s := c.h.Open(t)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)
	cases := []struct {
		name    string
		offsets []int64
		effect  sink.Effect[Tx]
	}{
		{"duplicate", []int64{1, 1}, failIfRun[Tx](t)},
		{"descending", []int64{2, 1}, failIfRun[Tx](t)},
		{"descending-later", []int64{0, 1, 5, 4}, failIfRun[Tx](t)},
		{"negative", []int64{-1}, failIfRun[Tx](t)},
		{"negative-first", []int64{-2, 0}, failIfRun[Tx](t)},
		{"nil-effect", []int64{0}, nil},
	}
	for _, bc := range cases {
		_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: bc.offsets}, bc.effect)
		if !errors.Is(err, sink.ErrBadBatch) {
			t.Errorf("%s: Apply(%v) error = %v, want sink.ErrBadBatch", bc.name, bc.offsets, err)
		}
	}
	c.mustNext(t, s, tok, 0)
}

func (c *suite[Tx]) testInvalidToken(t *testing.T) {
	s := c.h.Open(t)
	good := tokenFor(scopeFor(t), 1, "m")
	bad := map[string]epochs.Token{
		"empty-group":        func() epochs.Token { b := good; b.Group = ""; return b }(),
		"empty-topic":        func() epochs.Token { b := good; b.Topic = ""; return b }(),
		"negative-partition": func() epochs.Token { b := good; b.Partition = -1; return b }(),
		"negative-epoch":     func() epochs.Token { b := good; b.Epoch = -1; return b }(),
		"empty-member":       func() epochs.Token { b := good; b.Member = ""; return b }(),
		"zero":               {},
	}
	for name, tok := range bad {
		if _, err := s.Claim(t.Context(), tok, sink.Observed{}); !errors.Is(err, epochs.ErrInvalidToken) {
			t.Errorf("%s: Claim error = %v, want epochs.ErrInvalidToken", name, err)
		}
		if _, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0}}, failIfRun[Tx](t)); !errors.Is(err, epochs.ErrInvalidToken) {
			t.Errorf("%s: Apply error = %v, want epochs.ErrInvalidToken", name, err)
		}
	}
	// None of them became a holder: the valid token claims a fresh scope.
	if next := c.claim(t, s, good); next != 0 {
		t.Fatalf("Claim = %d, want 0", next)
	}
	if lister, ok := sink.As[fenceadmin.Lister](s); ok {
		fences, err := lister.Fences(t.Context())
		if err != nil {
			t.Fatalf("Fences: %v", err)
		}
		for _, f := range fences {
			if f.Scope != good.Scope() {
				t.Errorf("invalid token left a fence row: %+v", f)
			}
		}
	}
}

func (c *suite[Tx]) testScopesIndependent(t *testing.T) {
	s := c.h.Open(t)
	base := scopeFor(t)
	otherPart, otherTopic, otherGroup := base, base, base
	otherPart.Partition++
	otherTopic.Topic += "-other"
	otherGroup.Group += "-other"

	high := tokenFor(base, 50, "m")
	c.claim(t, s, high)
	offs := offsetsRange(0, 10)
	c.apply(t, s, high, offs, c.putEffect(t, "base", offs, "v"))

	for name, scope := range map[string]epochs.Scope{"partition": otherPart, "topic": otherTopic, "group": otherGroup} {
		low := tokenFor(scope, 1, "m-"+name)
		if next := c.claim(t, s, low); next != 0 {
			t.Fatalf("other %s: first Claim = %d, want 0", name, next)
		}
		res := c.apply(t, s, low, []int64{0, 1}, c.putEffect(t, name, []int64{0, 1}, "v"))
		if want := (sink.Result{Applied: 2, NextOffset: 2}); !res.Equal(want) {
			t.Fatalf("other %s: Apply result = %+v, want %+v", name, res, want)
		}
		// A token of this scope cannot write the base scope.
		cross := tokenFor(base, 99, "m-"+name)
		_, err := s.Apply(t.Context(), cross, sink.Batch{Offsets: []int64{10}}, failIfRun[Tx](t))
		mustFenced(t, err, sink.OpApply, high, cross)
	}
	c.mustNext(t, s, high, 10)
	// The base holder is still exactly the holder of its own scope only.
	for name, scope := range map[string]epochs.Scope{"partition": otherPart, "topic": otherTopic, "group": otherGroup} {
		_, err := s.Apply(t.Context(), tokenFor(scope, 50, "m"), sink.Batch{Offsets: []int64{2}}, failIfRun[Tx](t))
		mustFenced(t, err, sink.OpApply, tokenFor(scope, 1, "m-"+name), tokenFor(scope, 50, "m"))
	}
}

func (c *suite[Tx]) testNewTenureResumes(t *testing.T) {
	s := c.h.Open(t)
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	c.claim(t, s, a)
	offs := offsetsRange(0, 5)
	c.apply(t, s, a, offs, c.putEffect(t, "k", offs, "a"))
	if next := c.claim(t, s, b); next != 5 {
		t.Fatalf("new tenure Claim = %d, want 5", next)
	}
	// The new tenure re-reads from its committed Kafka offset, which lags.
	offs2 := offsetsRange(3, 8)
	res := c.apply(t, s, b, offs2, c.putEffect(t, "k", offs2, "b"))
	if want := (sink.Result{Applied: 3, Skipped: 2, NextOffset: 8}); !res.Equal(want) {
		t.Fatalf("Apply result = %+v, want %+v", res, want)
	}
	c.mustGet(t, s, key(t, "k", 4), "a")
	c.mustGet(t, s, key(t, "k", 5), "b")
	c.mustGet(t, s, key(t, "k", 7), "b")
}

func (c *suite[Tx]) testDurable(t *testing.T) {
	if c.h.Reopen == nil {
		t.Skip("sinktest: Harness.Reopen is nil: the backend is not durable, so durability across reopen is not tested")
	}
	s := c.h.Open(t)
	scope := scopeFor(t)
	holder, stale := tokenFor(scope, 4, "holder"), tokenFor(scope, 3, "stale")
	c.claim(t, s, holder)
	offs := offsetsRange(0, 3)
	c.apply(t, s, holder, offs, c.putEffect(t, "k", offs, "v"))

	s = c.h.Reopen(t, s)
	// The holder survived: a lower epoch is still fenced.
	_, err := s.Claim(t.Context(), stale, sink.Observed{})
	mustFenced(t, err, sink.OpClaim, holder, stale)
	_, err = s.Apply(t.Context(), stale, sink.Batch{Offsets: []int64{3}}, failIfRun[Tx](t))
	mustFenced(t, err, sink.OpApply, holder, stale)
	// The checkpoint survived.
	c.mustNext(t, s, holder, 3)
	for _, o := range offs {
		c.mustGet(t, s, key(t, "k", o), "v")
	}
	res := c.apply(t, s, holder, offsetsRange(2, 4), c.putEffect(t, "k", offsetsRange(2, 4), "w"))
	if want := (sink.Result{Applied: 1, Skipped: 1, NextOffset: 4}); !res.Equal(want) {
		t.Fatalf("Apply after reopen = %+v, want %+v", res, want)
	}
	c.mustGet(t, s, key(t, "k", 2), "v")
}

func (c *suite[Tx]) testCancelledContext(t *testing.T) {
	s := c.h.Open(t)
	tok := tokenFor(scopeFor(t), 1, "m")
	c.claim(t, s, tok)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Claim(ctx, tokenFor(scopeFor(t), 2, "m2"), sink.Observed{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with cancelled ctx: error %v, want context.Canceled", err)
	}
	offs := offsetsRange(0, 2)
	if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: offs}, c.putEffect(t, "k", offs, "v")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with cancelled ctx: error %v, want context.Canceled", err)
	}
	for _, o := range offs {
		c.mustAbsent(t, s, key(t, "k", o))
	}
	// The cancelled claim did not take the scope; the cancelled apply did
	// not move NextOffset.
	c.mustNext(t, s, tok, 0)

	// Cancelled in the middle of the batch: all or nothing.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	offs = offsetsRange(0, 4)
	_, err := s.Apply(ctx, tok, sink.Batch{Offsets: offs}, func(ctx context.Context, tx Tx, i int) error {
		if i == 1 {
			cancel()
		}
		if err := c.h.Put(ctx, tx, key(t, "mid", offs[i]), "v"); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	})
	var present int
	for _, o := range offs {
		if _, ok, gerr := c.h.Get(t.Context(), s, key(t, "mid", o)); gerr != nil {
			t.Fatalf("Get: %v", gerr)
		} else if ok {
			present++
		}
	}
	if err != nil {
		if present != 0 {
			t.Fatalf("Apply cancelled mid-batch returned %v but %d effects are visible", err, present)
		}
		c.mustNext(t, s, tok, 0)
	} else {
		if present != len(offs) {
			t.Fatalf("Apply cancelled mid-batch succeeded but only %d of %d effects are visible", present, len(offs))
		}
		c.mustNext(t, s, tok, 4)
	}
}

func (c *suite[Tx]) testLister(t *testing.T) {
	s := c.h.Open(t)
	lister, ok := sink.As[fenceadmin.Lister](s)
	if !ok {
		t.Skip("sinktest: the sink does not implement fenceadmin.Lister")
	}
	scope := scopeFor(t)
	other := scope
	other.Partition++
	a, b := tokenFor(scope, 3, "a"), tokenFor(other, 1, "b")
	c.claim(t, s, a)
	c.apply(t, s, a, []int64{4, 5}, c.putEffect(t, "k", []int64{4, 5}, "v"))
	c.claim(t, s, b)
	fences, err := lister.Fences(t.Context())
	if err != nil {
		t.Fatalf("Fences: %v", err)
	}
	want := map[epochs.Scope]sink.Fence{
		scope: {Scope: scope, Holder: a, NextOffset: 6},
		other: {Scope: other, Holder: b, NextOffset: 0},
	}
	got := map[epochs.Scope]sink.Fence{}
	for _, f := range fences {
		f.Version = 0 // the backend's own numbers: testFenceVersion checks them
		got[f.Scope] = f
	}
	for sc, w := range want {
		if g, ok := got[sc]; !ok {
			t.Errorf("Fences lacks scope %s", sc)
		} else if !g.Equal(w) {
			t.Errorf("Fences[%s] = %+v, want %+v", sc, g, w)
		}
	}
	if len(fences) != len(want) {
		t.Errorf("Fences returned %d rows, want %d: %+v", len(fences), len(want), fences)
	}
	// A newer claim shows up.
	a2 := tokenFor(scope, 4, "a2")
	c.claim(t, s, a2)
	fences, err = lister.Fences(t.Context())
	if err != nil {
		t.Fatalf("Fences: %v", err)
	}
	for _, f := range fences {
		if f.Scope == scope && (f.Holder != a2 || f.NextOffset != 6) {
			t.Errorf("after new claim Fences[%s] = %+v, want holder %s and NextOffset 6", scope, f, a2)
		}
	}
}

func (c *suite[Tx]) testResetter(t *testing.T) {
	s := c.h.Open(t)
	resetter, ok := sink.As[fenceadmin.Resetter](s)
	if !ok {
		t.Skip("sinktest: the sink does not implement fenceadmin.Resetter")
	}
	scope := scopeFor(t)
	old, recreated := tokenFor(scope, 5, "old"), tokenFor(scope, 1, "recreated")
	c.claim(t, s, old)
	offs := offsetsRange(0, 3)
	c.apply(t, s, old, offs, c.putEffect(t, "k", offs, "v"))
	// The group was recreated: its generation went backwards and every
	// claim fails until an operator resets the fence.
	_, err := s.Claim(t.Context(), recreated, sink.Observed{})
	mustFenced(t, err, sink.OpClaim, old, recreated)

	seen := sink.Fence{Scope: scope, Holder: old, NextOffset: 3}
	// A compare-and-set: a reset that expects another fence changes nothing.
	stale := seen
	stale.NextOffset = 2
	if _, err := resetter.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: scope, Expect: stale, Reason: "sinktest: stale view"}); !errors.Is(err, fenceadmin.ErrConflict) {
		t.Fatalf("ResetFence with a stale Expect: %v, want fenceadmin.ErrConflict", err)
	}
	if _, err := resetter.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: scope, Expect: seen, Reason: "  "}); !errors.Is(err, sink.ErrNoReason) {
		t.Fatalf("ResetFence without a reason: %v, want sink.ErrNoReason", err)
	}
	mustFenced(t, func() error { _, err := s.Claim(t.Context(), recreated, sink.Observed{}); return err }(), sink.OpClaim, old, recreated)

	before, err := resetter.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: scope, Expect: seen, Reason: "sinktest: group recreated", Detail: "sinktest detail"})
	if err != nil {
		t.Fatalf("ResetFence: %v", err)
	}
	if before.Version = 0; !before.Equal(seen) {
		t.Fatalf("ResetFence before = %+v, want %+v", before, seen)
	}
	if lister, ok := sink.As[fenceadmin.Lister](s); ok {
		if f := fenceOf(t, lister, scope); !f.Equal(sink.Fence{Scope: scope, NextOffset: 3, ProofRequired: true}) {
			t.Fatalf("Fences after reset = %+v, want no holder, NextOffset 3, a proof required for good", f)
		}
	}
	// With the holder cleared, nobody can write until someone claims.
	_, err = s.Apply(t.Context(), old, sink.Batch{Offsets: []int64{3}}, failIfRun[Tx](t))
	mustFenced(t, err, sink.OpApply, epochs.Token{}, old)
	// Right after a reset, a claim needs a proof of membership: the
	// group's previous incarnation cannot come back.
	if _, err := s.Claim(t.Context(), recreated, sink.Observed{}); !errors.Is(err, sink.ErrProofRequired) || errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Claim after reset without a proof: %v, want sink.ErrProofRequired (not ErrFenced)", err)
	}
	// A lower epoch with a proof can claim, and resumes at the kept
	// NextOffset.
	next, err := claimProven(t, s, recreated, sink.Observed{})
	if err != nil || next != 3 {
		t.Fatalf("proven Claim after reset = %d, %v; want 3 (reset must keep NextOffset)", next, err)
	}
	_, err = s.Apply(t.Context(), old, sink.Batch{Offsets: []int64{3}}, failIfRun[Tx](t))
	mustFenced(t, err, sink.OpApply, recreated, old)
	res := c.apply(t, s, recreated, offsetsRange(0, 4), c.putEffect(t, "k", offsetsRange(0, 4), "w"))
	if want := (sink.Result{Applied: 1, Skipped: 3, NextOffset: 4}); !res.Equal(want) {
		t.Fatalf("Apply after reset = %+v, want %+v", res, want)
	}
	c.mustGet(t, s, key(t, "k", 0), "v")
	// The holder's own re-claim needs no proof (testResetProofEveryClaim:
	// every other claim does, for good).
	if next := c.claim(t, s, recreated); next != 4 {
		t.Fatalf("re-claim = %d, want 4", next)
	}

	unknown := scope
	unknown.Topic += "-never-seen"
	if _, err := resetter.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: unknown, Reason: "sinktest: unknown scope"}); !errors.Is(err, sink.ErrNotFound) {
		t.Fatalf("ResetFence of unknown scope: error %v, want sink.ErrNotFound", err)
	}
}

// fenceOf returns scope's fence from l.
func fenceOf(t testing.TB, l fenceadmin.Lister, scope epochs.Scope) sink.Fence {
	t.Helper()
	fences, err := l.Fences(t.Context())
	if err != nil {
		t.Fatalf("Fences: %v", err)
	}
	for _, f := range fences {
		if f.Scope == scope {
			f.Version = 0 // the backend's own numbers: testFenceVersion checks them
			return f
		}
	}
	t.Fatalf("Fences lacks scope %s", scope)
	return sink.Fence{}
}

// testLogIdentity: the claim checks that the log under the checkpoint is
// the one the checkpoint was taken on (docs/design.md#log-identity).
func (c *suite[Tx]) testLogIdentity(t *testing.T) {
	s := c.h.Open(t)
	scope := scopeFor(t)
	ctx := t.Context()
	obs := func(id string, start, end int64) sink.Observed {
		return sink.Observed{TopicID: id, LogStart: start, LogEnd: end}
	}
	a := tokenFor(scope, 1, "a")
	// A new scope starts at the log start (retention removed the earlier
	// records before anyone consumed them).
	if next, err := nextOf(s.Claim(ctx, a, obs("topic-A", 5, 20))); err != nil || next != 5 {
		t.Fatalf("first claim on a log starting at 5 = %d, %v; want 5", next, err)
	}
	c.apply(t, s, a, offsetsRange(5, 10), c.putEffect(t, "k", offsetsRange(5, 10), "v"))
	refused := func(tok epochs.Token, o sink.Observed, want error, lost int64) {
		t.Helper()
		_, err := s.Claim(ctx, tok, o)
		var lc *sink.LogChangedError
		if !errors.Is(err, sink.ErrLogChanged) || !errors.Is(err, want) || errors.Is(err, sink.ErrFenced) || !errors.As(err, &lc) {
			t.Fatalf("claim observing %+v: %v; want a *sink.LogChangedError matching %v and not ErrFenced", o, err, want)
		}
		if lc.Lost() != lost || lc.NextOffset != 10 || lc.Scope != scope {
			t.Fatalf("LogChangedError %+v: lost %d, want %d", lc, lc.Lost(), lost)
		}
		// A refusal changes nothing: the old holder may still write.
		if lister, ok := sink.As[fenceadmin.Lister](s); ok {
			if f := fenceOf(t, lister, scope); f.Holder != a || f.NextOffset != 10 || f.TopicID != "topic-A" {
				t.Fatalf("refused claim changed the fence: %+v", f)
			}
		}
	}
	b := tokenFor(scope, 2, "b")
	refused(b, obs("topic-B", 0, 3), sink.ErrTopicRecreated, 0)
	refused(b, obs("topic-A", 0, 7), sink.ErrLogTruncated, 0)
	refused(b, obs("topic-A", 14, 30), sink.ErrRetentionLoss, 4)
	// The same log, continuous: accepted.
	if next, err := nextOf(s.Claim(ctx, b, obs("topic-A", 10, 10))); err != nil || next != 10 {
		t.Fatalf("claim on the same log = %d, %v; want 10", next, err)
	}
	// A scope that never recorded a topic ID adopts the first it sees.
	other := scope
	other.Partition++
	x := tokenFor(other, 1, "x")
	c.claim(t, s, x)
	c.apply(t, s, x, offsetsRange(0, 2), c.putEffect(t, "o", offsetsRange(0, 2), "v"))
	y := tokenFor(other, 2, "y")
	if next, err := nextOf(s.Claim(ctx, y, obs("topic-A", 0, 2))); err != nil || next != 2 {
		t.Fatalf("claim adopting a topic ID = %d, %v", next, err)
	}
	if lister, ok := sink.As[fenceadmin.Lister](s); ok {
		if f := fenceOf(t, lister, other); f.TopicID != "topic-A" {
			t.Fatalf("the topic ID was not adopted: %+v", f)
		}
	}
	if _, err := s.Claim(ctx, tokenFor(other, 3, "z"), obs("topic-C", 0, 2)); !errors.Is(err, sink.ErrTopicRecreated) {
		t.Fatalf("after adoption, another topic ID: %v, want ErrTopicRecreated", err)
	}
	if h, ok := sink.As[fenceadmin.Historian](s); ok {
		hs, err := h.History(ctx, scope)
		if err != nil || len(hs) != 2 || hs[0].TopicID != "topic-A" || hs[1].TopicID != "topic-A" {
			t.Fatalf("history %+v %v: want two claims on topic-A", hs, err)
		}
	}
}

// testResetOntoNewLog: a reset may move the scope onto a new log and
// restart its checkpoint there.
func (c *suite[Tx]) testResetOntoNewLog(t *testing.T) {
	s := c.h.Open(t)
	resetter, ok := sink.As[fenceadmin.Resetter](s)
	if !ok {
		t.Skip("sinktest: the sink does not implement fenceadmin.Resetter")
	}
	scope := scopeFor(t)
	ctx := t.Context()
	a := tokenFor(scope, 4, "a")
	if _, err := s.Claim(ctx, a, sink.Observed{TopicID: "old", LogStart: 0, LogEnd: 25}); err != nil {
		t.Fatal(err)
	}
	c.apply(t, s, a, offsetsRange(0, 25), c.putEffect(t, "k", offsetsRange(0, 25), "v"))
	b := tokenFor(scope, 5, "b")
	if _, err := s.Claim(ctx, b, sink.Observed{TopicID: "new", LogStart: 0, LogEnd: 5}); !errors.Is(err, sink.ErrTopicRecreated) {
		t.Fatalf("claim on a recreated topic: %v", err)
	}
	zero := int64(0)
	before, err := resetter.ResetFence(ctx, fenceadmin.ResetRequest{Scope: scope, Expect: sink.Fence{Scope: scope, Holder: a, NextOffset: 25, TopicID: "old"},
		NextOffset: &zero, TopicID: "new", Reason: "sinktest: topic recreated", Detail: "restart at earliest"})
	if err != nil || before.NextOffset != 25 || before.TopicID != "old" {
		t.Fatalf("ResetFence onto the new log: %+v %v", before, err)
	}
	next, err := claimProven(t, s, b, sink.Observed{TopicID: "new", LogStart: 0, LogEnd: 5})
	if err != nil || next != 0 {
		t.Fatalf("claim on the new log after the reset = %d, %v; want 0", next, err)
	}
	if h, ok := sink.As[fenceadmin.Historian](s); ok {
		hs, err := h.History(ctx, scope)
		if err != nil || len(hs) != 3 {
			t.Fatalf("history %+v %v", hs, err)
		}
		r := hs[1]
		if r.Kind != fenceadmin.KindReset || r.NextOffset != 0 || r.TopicID != "new" || r.Reason != "sinktest: topic recreated" || r.Detail != "restart at earliest" || r.Token != a {
			t.Fatalf("reset history row %+v", r)
		}
	}
}

// wrapMetrics wraps s with sinkmetrics on a registry of its own.
func wrapMetrics[Tx any](t testing.TB, s sink.Sink[Tx]) sink.Sink[Tx] {
	w, err := sinkmetrics.Wrap(s, prometheus.NewRegistry(), "sinktest")
	if err != nil {
		t.Fatalf("sinkmetrics.Wrap: %v", err)
	}
	return w
}

// has reports which optional capabilities s reaches through sink.As, and
// which features it declares.
func has[Tx any](s sink.Sink[Tx]) map[string]bool {
	_, l := sink.As[fenceadmin.Lister](s)
	_, r := sink.As[fenceadmin.Resetter](s)
	_, h := sink.As[fenceadmin.Historian](s)
	_, ds := sink.As[dlq.Store](s)
	f := s.Features()
	return map[string]bool{"Lister": l, "Resetter": r, "Historian": h, "DeadLetterStore": ds,
		"Features.DeadLetters": f.DeadLetters, "Features.DedupeWindow": f.DedupeWindow > 0, "Features.Gaps": f.Gaps}
}

func (c *suite[Tx]) testCapabilitiesSurviveWrapping(t *testing.T) {
	s := c.h.Open(t)
	raw := has(s)
	through := has(wrapMetrics(t, s))
	for name, ok := range raw {
		if ok && !through[name] {
			t.Errorf("%s is lost behind the metrics wrapper", name)
		}
		if !ok && through[name] {
			t.Errorf("the metrics wrapper claims %s, which the sink does not have", name)
		}
	}
}

func (c *suite[Tx]) testHistorian(t *testing.T) {
	s := c.h.Open(t)
	h, ok := sink.As[fenceadmin.Historian](s)
	if !ok {
		t.Skip("sinktest: the sink does not implement fenceadmin.Historian")
	}
	scope := scopeFor(t)
	if got, err := h.History(t.Context(), scope); err != nil || len(got) != 0 {
		t.Fatalf("History of a scope never claimed = %v, %v; want empty", got, err)
	}
	a, b, stale, c1 := tokenFor(scope, 2, "a"), tokenFor(scope, 5, "b"), tokenFor(scope, 3, "stale"), tokenFor(scope, 1, "c")
	c.claim(t, s, a)
	c.apply(t, s, a, offsetsRange(0, 2), c.putEffect(t, "k", offsetsRange(0, 2), "v"))
	c.claim(t, s, b)
	if _, err := s.Claim(t.Context(), stale, sink.Observed{}); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("stale claim: %v, want fenced", err)
	}
	c.apply(t, s, b, []int64{2}, c.putEffect(t, "k", []int64{2}, "v"))
	want := []fenceadmin.Entry{
		{Kind: fenceadmin.KindClaim, Token: a, NextOffset: 0},
		{Kind: fenceadmin.KindClaim, Token: b, NextOffset: 2},
	}
	if r, ok := sink.As[fenceadmin.Resetter](s); ok {
		if _, err := r.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: scope, Expect: sink.Fence{Scope: scope, Holder: b, NextOffset: 3},
			Reason: "sinktest: history"}); err != nil {
			t.Fatalf("ResetFence: %v", err)
		}
		if _, err := claimProven(t, s, c1, sink.Observed{}); err != nil {
			t.Fatalf("proven claim after reset: %v", err)
		}
		// The holder's own re-claim needs no proof: recorded unproven.
		c.claim(t, s, c1)
		want = append(want,
			fenceadmin.Entry{Kind: fenceadmin.KindReset, Token: b, NextOffset: 3, Reason: "sinktest: history"},
			fenceadmin.Entry{Kind: fenceadmin.KindClaim, Token: c1, NextOffset: 3, Proven: true},
			fenceadmin.Entry{Kind: fenceadmin.KindClaim, Token: c1, NextOffset: 3})
	}
	got, err := h.History(t.Context(), scope)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("History has %d entries, want %d (accepted claims and resets only): %+v", len(got), len(want), got)
	}
	for i := range want {
		g := got[i]
		if i > 0 && g.Seq <= got[i-1].Seq {
			t.Errorf("History entry %d has Seq %d after %d: not ascending", i, g.Seq, got[i-1].Seq)
		}
		if g.At.IsZero() {
			t.Errorf("History entry %d has no time", i)
		}
		g.Seq, g.At = 0, time.Time{}
		if !g.Equal(want[i]) {
			t.Errorf("History[%d] = %+v, want %+v", i, g, want[i])
		}
	}
}
