// Package sink defines the fenced-sink contract of workrouter (docs/design.md#protocol)
// and its errors. Backends live in sub-packages (sink/memory, …) and all of
// them pass the one conformance suite in sink/sinktest.
//
// A sink stores, per [epochs.Scope], the current holder token and NextOffset,
// the first Kafka offset not yet applied. The consumer calls [Sink.Claim] once
// per ownership tenure, before processing any record, and then [Sink.Apply]
// once per batch. Apply checks the holder and writes the batch's effects and
// the new NextOffset in one atomic unit (one transaction, one script), so a
// tenure that has been superseded can never land a write: the check and the
// write cannot be separated by a pause.
//
// Sinks are generic over Tx, the backend's native transaction handle
// (*sql.Tx, pgx.Tx, a key-value transaction, …): handlers write ordinary
// statements against it inside the fenced unit.
//
// A consumer that applies the keys of a partition in concurrent lanes
// finishes offsets out of order; [GapApplier] gives it a checkpoint with
// gaps ([Checkpoint]: the watermark NextOffset and the done spans above
// it, docs/design.md#gaps) with the same fence on every call. The plain
// calls of a sink that has it respect the spans, so workers with and
// without lanes can take over from each other.
package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/workrouter/workrouter/epochs"
)

// Effect runs the effects of record i of a batch inside the sink's atomic
// unit, writing through tx. Returning an error aborts the whole batch: no
// effect and no offset of it is committed. An Effect may be run more than
// once for the same record (a backend may retry an aborted transaction), so
// it must not have side effects outside tx.
type Effect[Tx any] func(ctx context.Context, tx Tx, i int) error

// ApplyResult reports what one Apply did.
type ApplyResult struct {
	// Applied is how many records of the batch had their effects run and
	// committed.
	Applied int
	// Skipped is how many records were skipped because their offset was
	// below the stored NextOffset (replays of already applied records).
	Skipped int
	// NextOffset is the scope's NextOffset after the Apply.
	NextOffset int64
}

// Sink is the fenced-sink contract. Implementations must be safe for
// concurrent use by many goroutines and processes: the fence is what makes
// concurrent holders of one scope safe.
type Sink[Tx any] interface {
	// Claim makes tok the holder of its scope and returns the scope's
	// NextOffset. obs is what the claimer saw at the broker just before
	// (docs/design.md#claim). Atomically:
	//
	//   - if the stored holder has a greater epoch, or the same epoch and
	//     another member, Claim fails with an error matching ErrFenced (a
	//     *FencedError) and changes nothing (see epochs.Token.CanClaim);
	//   - if the stored fence asks a proof of tok (Fence.NeedsProof: no
	//     claim was accepted since a reset, or tok's epoch is at or below
	//     the highest epoch a reset of the scope ever cleared, and tok is
	//     not the stored holder itself) and obs.MemberProven is false, it
	//     fails with an error matching ErrProofRequired and changes nothing
	//     (docs/design.md#admin-reset);
	//   - if obs.TopicID is set, it checks the log's continuity
	//     (docs/design.md#log-identity): a stored topic ID other than
	//     obs.TopicID, a NextOffset above obs.LogEnd, or obs.LogStart above
	//     NextOffset fail with a *LogChangedError (matching ErrLogChanged,
	//     never ErrFenced) and change nothing; a scope with no topic ID
	//     adopts obs.TopicID;
	//   - otherwise it stores tok, clears Fence.ProofRequired (but never
	//     Fence.ProofBelow: claims at the previous incarnation's epochs
	//     need a proof for as long as the sink exists) and records the
	//     claim in its history.
	//
	// A scope never claimed starts at obs.LogStart (0 when unknown).
	// Re-claiming with the holder's own token is idempotent.
	Claim(ctx context.Context, tok epochs.Token, obs Observed) (nextOffset int64, err error)

	// Apply applies a batch of records of tok's scope in one atomic unit.
	// offsets are the batch's Kafka offsets, strictly ascending. Atomically:
	// if the stored holder is not exactly tok, Apply fails with an error
	// matching ErrFenced and nothing is applied; otherwise records whose
	// offset is below NextOffset are skipped (replays are no-ops), effect
	// runs for each remaining record index in order, and NextOffset becomes
	// the last offset + 1. If effect fails, Apply returns its error wrapped
	// in an *EffectError and commits nothing.
	Apply(ctx context.Context, tok epochs.Token, offsets []int64, effect Effect[Tx]) (ApplyResult, error)
}

// Observed is what a claimer saw at the broker right before its Claim.
// The zero value observed nothing: the sink then checks no continuity
// and records no log identity (tests and sinks used without Kafka).
type Observed struct {
	// TopicID is the log's identity: Kafka's topic ID (the topic UUID
	// from metadata), as text. Empty means unknown.
	TopicID string
	// LogStart and LogEnd are the partition's log start offset and high
	// watermark; they are used only when TopicID is set.
	LogStart, LogEnd int64
	// MemberProven reports that the claimer proved, right before, that it
	// is a current member of the group at its token's epoch (a
	// generation-checked offset commit the broker accepted for the token's
	// member and epoch). After a reset, a sink accepts a claim that
	// Fence.NeedsProof names only with MemberProven: the first claim
	// after the reset, and every claim, then and later, whose epoch is at
	// or below the highest epoch a reset of the scope cleared.
	MemberProven bool
}

// Fence is the stored state of one scope.
type Fence struct {
	Scope      epochs.Scope
	Holder     epochs.Token // zero if the scope has been reset and not claimed since
	NextOffset int64
	// TopicID is the identity of the log NextOffset refers to; empty
	// before the first claim that observed one.
	TopicID string
	// ProofRequired reports that the fence was reset and no claim has been
	// accepted since: the next claim, at any epoch, must come with a proof
	// of membership (Observed.MemberProven). The first accepted claim
	// clears it.
	ProofRequired bool
	// ProofBelow is the scope's proof floor: a claim whose token epoch is
	// below ProofBelow must come with a proof of membership, also after
	// ProofRequired was cleared. It is the highest epoch any reset of the
	// scope cleared, plus one (so the cleared holder's own epoch, an epoch
	// of the group's previous incarnation, needs a proof too), or 0 if no
	// reset ever cleared a holder. A reset only raises it (see
	// [Fence.AfterReset]); a claim never changes it, so it lasts as long
	// as the sink's storage.
	ProofBelow int64
	// Done are the done spans above NextOffset of a gapped checkpoint
	// ([GapApplier], docs/design.md#gaps): records applied by lanes that
	// ran ahead. Empty for a scope without gaps.
	Done []Span
	// Duplicates counts the records ApplyOnce did not run in the scope
	// because their command ID was applied already
	// (ApplyOnceResult.Duplicates), since the scope's fence row was made:
	// incremented in ApplyOnce's atomic unit, kept by a reset. Zero for a
	// sink without [Deduplicator].
	Duplicates int64
}

// Equal reports whether f and g are the same fence: every field equal,
// and the same done spans (a nil and an empty Done are the same). Fence
// holds a slice, so == does not compile on it. It may be called from any
// goroutine.
func (f Fence) Equal(g Fence) bool {
	return f.Scope == g.Scope && f.Holder == g.Holder && f.NextOffset == g.NextOffset && f.TopicID == g.TopicID &&
		f.ProofRequired == g.ProofRequired && f.ProofBelow == g.ProofBelow && f.Duplicates == g.Duplicates &&
		slices.Equal(f.Done, g.Done)
}

// NeedsProof reports whether a claim by tok of the scope whose stored fence
// is f must come with Observed.MemberProven (docs/design.md#admin-reset):
// when a reset left f.ProofRequired, and whenever tok's epoch is below
// f.ProofBelow, an epoch that a member of the group's previous incarnation
// may hold. The stored holder's own re-claim never needs one: a caller
// with the holder's exact token can already write. Every backend's Claim
// decides with it, inside its atomic unit. It may be called from any
// goroutine.
func (f Fence) NeedsProof(tok epochs.Token) bool {
	if !f.Holder.IsZero() && tok.Holds(f.Holder) {
		return false
	}
	return f.ProofRequired || int64(tok.Epoch) < f.ProofBelow
}

// AfterReset returns the fence that a reset by req leaves of f, the fence
// as the reset found it (docs/design.md#admin-reset): no holder, the
// NextOffset and topic ID req asks for (the stored ones when req leaves
// them unset), ProofRequired set, and ProofBelow raised past the cleared
// holder's epoch (kept when f has no holder, never lowered). The done
// spans of a gapped checkpoint (Fence.Done) stay when req keeps the
// checkpoint (the same log) and are cleared when it sets a new
// NextOffset (their offsets were the old log's). Every
// backend's ResetFence stores it. It may be called from any goroutine.
func (f Fence) AfterReset(req ResetRequest) Fence {
	after := Fence{Scope: f.Scope, NextOffset: f.NextOffset, TopicID: f.TopicID, ProofRequired: true, ProofBelow: f.ProofBelow, Duplicates: f.Duplicates}
	if !f.Holder.IsZero() {
		after.ProofBelow = max(f.ProofBelow, int64(f.Holder.Epoch)+1)
	}
	if req.NextOffset != nil {
		// A new checkpoint on a new log: the done spans were offsets
		// of the old one.
		after.NextOffset = *req.NextOffset
	} else {
		// The same log: what lanes applied above the watermark stays
		// done.
		after.Done = slices.Clone(f.Done)
	}
	if req.TopicID != "" {
		after.TopicID = req.TopicID
	}
	return after
}

// Lister is an optional capability of a sink: reading its fence rows, for
// status and admin tools. Discover it by type assertion.
type Lister interface {
	// Fences returns the stored state of every scope the sink knows.
	Fences(ctx context.Context) ([]Fence, error)
}

// Resetter is an optional capability of a sink: the explicit, audited admin
// reset of a scope's fence (docs/design.md#admin-reset), for epochs that
// went backwards (hazard 3) or a log that changed under the checkpoint
// (hazard 8). Never call it automatically: it lifts the fence. Package
// fences wraps it with the checks an operator needs.
type Resetter interface {
	// ResetFence, in one atomic unit, compares the stored fence with
	// req.Expect (holder, NextOffset and topic ID) and fails with an error
	// matching ErrResetConflict if it moved; otherwise it clears the
	// holder, sets NextOffset and the topic ID as req says, requires a
	// proof of membership from the next claim (Fence.ProofRequired) and,
	// for good, from every claim at or below the cleared holder's epoch
	// (Fence.ProofBelow), storing the fence [Fence.AfterReset] returns,
	// and appends a reset row with req.Reason and req.Detail to the
	// history.
	// It returns the fence as it was. An empty Reason fails with
	// ErrNoReason, an unknown scope with ErrNotFound.
	ResetFence(ctx context.Context, req ResetRequest) (before Fence, err error)
}

// ResetRequest is an admin reset of one scope's fence.
type ResetRequest struct {
	Scope epochs.Scope
	// Expect is the fence the operator saw; the reset is a compare-and-set
	// on its Holder, NextOffset and TopicID.
	Expect Fence
	// NextOffset, if not nil, is the new checkpoint (the scope restarts
	// there, on a new log); nil keeps the checkpoint (the same log).
	NextOffset *int64
	// TopicID, if not empty, is the log identity the scope is reset onto;
	// empty keeps the stored one.
	TopicID string
	// Reason says why; required, recorded.
	Reason string
	// Detail records what the operator observed (the diagnosis), audited
	// with the reset.
	Detail string
}

// Historian is an optional capability of a sink: the ordered record of a
// scope's accepted claims and admin resets, which the invariant checkers
// (F needs every claim's epoch and NextOffset) and `workrouter fences
// history` read.
type Historian interface {
	// History returns the claims and resets of scope in order (empty for
	// a scope never claimed).
	History(ctx context.Context, scope epochs.Scope) ([]HistoryEntry, error)
}

// History entry kinds.
const (
	// HistoryClaim marks a [HistoryEntry] of an accepted claim.
	HistoryClaim = "claim"
	// HistoryReset marks a [HistoryEntry] of an admin reset.
	HistoryReset = "reset"
)

// HistoryEntry is one row of a scope's history: an accepted claim or an
// admin reset.
type HistoryEntry struct {
	// Seq orders the entries of the whole sink; it only grows (gaps are
	// possible).
	Seq int64
	// Kind is [HistoryClaim] or [HistoryReset].
	Kind string
	// Token is the claimed token for a claim, and for a reset the holder
	// the reset cleared (zero if the scope had no holder).
	Token epochs.Token
	// NextOffset is the scope's NextOffset at the claim (what Claim
	// returned) or the reset (which keeps it).
	NextOffset int64
	// Done are the done spans above NextOffset of a gapped checkpoint
	// ([Checkpoint.Done]): for a claim, the spans ClaimGapped returned
	// (offsets that lanes of an earlier tenure applied, which the new
	// owner skips); for a reset, the spans it left ([Fence.AfterReset]:
	// kept on the same log, none on a new one). Empty for a scope
	// without gaps. The invariant checker needs them for F: a write at
	// an offset in a claim's done spans was made before that claim.
	Done []Span
	// Reason is the operator's reason for a reset; empty for a claim.
	Reason string
	// TopicID is the log identity at the claim, or the one the reset left
	// the scope on.
	TopicID string
	// Detail is a reset's audited detail (what the operator observed and
	// what the reset changed); empty for a claim.
	Detail string
	// At is when the sink recorded the entry (informational only, never
	// used for fencing; the backend says whose clock).
	At time.Time
}

// Equal reports whether e and g are the same entry: every field equal,
// and the same done spans (a nil and an empty Done are the same).
// HistoryEntry holds a slice, so == does not compile on it. It may be
// called from any goroutine.
func (e HistoryEntry) Equal(g HistoryEntry) bool {
	return e.Seq == g.Seq && e.Kind == g.Kind && e.Token == g.Token && e.NextOffset == g.NextOffset && e.Reason == g.Reason &&
		e.TopicID == g.TopicID && e.Detail == g.Detail && e.At.Equal(g.At) && slices.Equal(e.Done, g.Done)
}

// ErrFenced is matched by every error reporting that a write or claim was
// refused because the offered token is not (or no longer) the holder.
// A fenced result is final for that tenure: never retry it as transient.
var ErrFenced = errors.New("sink: fenced")

// ErrBadBatch is matched by errors reporting a malformed Apply call
// (offsets not strictly ascending, negative offsets, nil effect).
var ErrBadBatch = errors.New("sink: bad batch")

// ErrNotFound is matched by errors reporting an unknown scope (or dead
// letter).
var ErrNotFound = errors.New("sink: not found")

// ErrNoReason is matched by the error of an admin operation (a reset, a
// dead letter's redrive or drop) called without a reason: it changes the
// fence or the record of what was skipped, and must say why.
var ErrNoReason = errors.New("sink: an admin operation needs a non-empty reason")

// ErrResetConflict is matched by the error ResetFence returns when the
// stored fence is no longer the one the operator saw (req.Expect).
var ErrResetConflict = errors.New("sink: the fence changed since it was inspected")

// ErrProofRequired is matched by the error Claim returns for a scope whose
// fence was reset, when the claim comes without a proof of membership
// (Observed.MemberProven) and the fence asks for one ([Fence.NeedsProof]).
// It never matches ErrFenced: the claimer should prove its membership to
// the broker and claim again.
var ErrProofRequired = errors.New("sink: the fence was reset; the claim needs a proof of current group membership")

// Op names the sink operation in a FencedError.
type Op string

// The fenced operations.
const (
	OpClaim      Op = "claim"
	OpApply      Op = "apply"
	OpDeadLetter Op = "dead-letter"
)

// FencedError reports a refused Claim or Apply with the stored and the
// offered token. It matches ErrFenced with errors.Is.
type FencedError struct {
	Op      Op
	Stored  epochs.Token // the holder the sink has; zero if none
	Offered epochs.Token
}

// Error describes the refusal.
func (e *FencedError) Error() string {
	return fmt.Sprintf("sink: %s fenced for %s: offered epoch %d (member %q), stored holder epoch %d (member %q)",
		e.Op, e.Offered.Scope(), e.Offered.Epoch, e.Offered.Member, e.Stored.Epoch, e.Stored.Member)
}

// Is reports whether target is ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// EffectError reports that a record's effect failed inside Apply; the batch
// was rolled back.
type EffectError struct {
	Index  int   // index of the record in the batch
	Offset int64 // its Kafka offset
	Err    error
}

// Error describes the failure.
func (e *EffectError) Error() string {
	return fmt.Sprintf("sink: effect of record at offset %d failed: %v", e.Offset, e.Err)
}

// Unwrap returns the effect's error.
func (e *EffectError) Unwrap() error { return e.Err }

// CheckBatch validates the arguments of an Apply call. Backends call it first.
func CheckBatch[Tx any](tok epochs.Token, offsets []int64, effect Effect[Tx]) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	if effect == nil {
		return fmt.Errorf("%w: nil effect", ErrBadBatch)
	}
	for i, o := range offsets {
		if o < 0 {
			return fmt.Errorf("%w: negative offset %d at index %d", ErrBadBatch, o, i)
		}
		if i > 0 && o <= offsets[i-1] {
			return fmt.Errorf("%w: offsets not strictly ascending at index %d (%d after %d)", ErrBadBatch, i, o, offsets[i-1])
		}
	}
	return nil
}
