// Package sink defines the fenced-sink contract of workrouter (docs/design.md#protocol)
// and its errors. Backends live in sub-packages (sink/memory, …) and all of
// them pass the one conformance suite in sink/sinktest.
//
// A sink stores, per [epochs.Scope], the current holder token and its
// checkpoint: NextOffset, the first Kafka offset not yet applied, and the
// done spans above it. The consumer calls [Sink.Claim] once per ownership
// tenure, before processing any record, and then [Sink.Apply] once per
// batch (and [Sink.DeadLetter] once per poison record). Each write checks
// the holder and writes the batch's effects and the new checkpoint in one
// atomic unit (one transaction, one script), so a tenure that has been
// superseded can never land a write: the check and the write cannot be
// separated by a pause.
//
// A batch enters a sink through one door, Apply. Whether its records are
// serial (contiguous from the checkpoint) or a lane's (keys of a
// partition applied concurrently, leaving gaps: docs/design.md#gaps), and
// whether they carry command IDs to deduplicate
// (docs/design.md#command-ids), are properties of the [Batch], which the
// sink serves as its declared [Features] allow; a batch that needs a
// feature the sink lacks is refused with [ErrUnsupported].
//
// Sinks are generic over Tx, the backend's native transaction handle
// (*sql.Tx, pgx.Tx, a key-value transaction, …): handlers write ordinary
// statements against it inside the fenced unit.
package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/workrouter/workrouter/epochs"
)

// Effect runs the effects of record i of a batch inside the sink's atomic
// unit, writing through tx. Returning an error aborts the whole batch: no
// effect and no offset of it is committed. An Effect may be run more than
// once for the same record (a backend may retry an aborted transaction), so
// it must not have side effects outside tx.
type Effect[Tx any] func(ctx context.Context, tx Tx, i int) error

// Batch is what one Apply applies: records of one partition.
type Batch struct {
	// Offsets are the records' Kafka offsets, strictly ascending and not
	// negative.
	Offsets []int64
	// From, if not nil, makes the batch a lane's (the sink needs
	// Features.Gaps): From[i] is the first offset record i covers, the
	// offset right after the record the consumer fetched before it in the
	// partition (of any lane), so that the offsets between them, which
	// hold no record, are done with it; From[i] <= Offsets[i] and
	// From[i] > Offsets[i-1]. Applying record i marks [From[i],
	// Offsets[i]+1) done. Nil makes the batch serial: it moves the
	// checkpoint past its last offset.
	From []int64
	// IDs, if not nil, are the records' command IDs ("" for a record
	// without one), to apply each command once (the sink needs
	// Features.DedupeWindow above zero); at most MaxCommandIDLen bytes
	// each.
	IDs []string
}

// Result reports what one Apply did. Applied + Skipped +
// len(Duplicates) is the batch's length.
type Result struct {
	// Applied is how many records of the batch had their effects run and
	// committed.
	Applied int
	// Skipped is how many records were skipped because they were done
	// already (below NextOffset, or in a done span): replays.
	Skipped int
	// Duplicates are the indexes, ascending, of the records not run
	// because their command ID was already applied in the scope within
	// the dedupe window, or appears at an earlier index of the batch.
	Duplicates []int
	// NextOffset is the scope's NextOffset after the Apply: for a lane's
	// batch, the watermark the unit left or a lower one it saw (a
	// backend that raises the watermark lazily says so).
	NextOffset int64
}

// Equal reports whether r and o report the same: every field equal, the
// same duplicates (a nil and an empty Duplicates are the same). Result
// holds a slice, so == does not compile on it. It may be called from any
// goroutine.
func (r Result) Equal(o Result) bool {
	return r.Applied == o.Applied && r.Skipped == o.Skipped && r.NextOffset == o.NextOffset && slices.Equal(r.Duplicates, o.Duplicates)
}

// Features are what a sink can do beyond the contract every sink keeps.
// A sink declares them (Sink.Features) and refuses a batch or a dead
// letter that needs one it lacks with an error matching ErrUnsupported.
type Features struct {
	// DedupeWindow, if above zero, says that the sink applies a Batch
	// with IDs: a record at or above NextOffset whose ID was applied in
	// the scope at an offset p >= offset - DedupeWindow, or appears at an
	// earlier index of the batch, is a duplicate (its effect does not
	// run, its index is in Result.Duplicates), in the same atomic unit as
	// the fence check; the IDs of the records whose effects ran are
	// recorded with their offsets in that unit, and IDs older than the
	// window are pruned.
	DedupeWindow int64
	// Gaps says that the sink keeps a checkpoint with gaps
	// (docs/design.md#gaps): it applies lanes' batches (Batch.From) and
	// lanes' dead letters (DeadRecord.Lane), any number of a holder's at
	// once for one scope, and Claim returns the done spans.
	Gaps bool
	// DeadLetters says that the sink stores dead letters (DeadLetter).
	DeadLetters bool
	// PreferredBatch, if above zero, is the most records the sink would
	// like in one Apply: a consumer whose MaxBatch is left zero uses it
	// (a sink whose atomic unit has a high fixed cost, a Kafka
	// transaction, wants fewer, larger batches). It is a preference, not
	// a limit: a sink applies any batch it is given.
	PreferredBatch int
}

// ErrUnsupported is matched by the error of a call that needs a feature
// the sink does not declare (Features): IDs without a dedupe window, a
// lane's batch without gaps, a dead letter without dead letters.
var ErrUnsupported = errors.New("sink: the sink does not support what the call needs")

// Sink is the fenced-sink contract. Implementations must be safe for
// concurrent use by many goroutines and processes: the fence is what makes
// concurrent holders of one scope safe.
type Sink[Tx any] interface {
	// Features returns what the sink can do beyond the contract; it does
	// not change over the sink's life.
	Features() Features

	// Claim makes tok the holder of its scope and returns the scope's
	// checkpoint: NextOffset, and the done spans above it (empty for a
	// scope without gaps). obs is what the claimer saw at the broker
	// just before (docs/design.md#claim). Atomically, deciding with
	// [Fence.CheckClaim] on the stored fence:
	//
	//   - if the stored holder has a greater epoch, or the same epoch and
	//     another member, Claim fails with an error matching ErrFenced (a
	//     *FencedError) and changes nothing (see epochs.Token.CanClaim),
	//     unless obs carries a proof that takes the scope over from a
	//     holder of an earlier incarnation of the group, which the sink
	//     records as a reset of that holder (docs/design.md#expired-groups);
	//   - if the scope's fence was ever reset (Fence.ProofRequired) and tok
	//     is not the stored holder itself, the claim must come with a proof
	//     of membership made since the fence was last changed
	//     (obs.Proof, whose Version is the fence's current Version); else
	//     it fails with a *ProofRequiredError (matching ErrProofRequired,
	//     never ErrFenced) that carries the Version to prove against, and
	//     changes nothing (docs/design.md#admin-reset);
	//   - if obs.TopicID is set, it checks the log's continuity
	//     (docs/design.md#log-identity, [CheckLog]): a stored topic ID
	//     other than obs.TopicID, a checkpoint that ends above
	//     obs.LogEnd, or obs.LogStart above NextOffset fail with a
	//     *LogChangedError (matching ErrLogChanged, never ErrFenced) and
	//     change nothing; a scope with no topic ID adopts obs.TopicID;
	//   - otherwise it stores tok and records the claim in its history
	//     (fenceadmin.Entry.Proven says whether a current proof came with it),
	//     which moves the fence's Version.
	//
	// A scope never claimed starts at obs.LogStart (0 when unknown).
	// Re-claiming with the holder's own token is idempotent.
	Claim(ctx context.Context, tok epochs.Token, obs Observed) (Checkpoint, error)

	// Apply applies batch b of tok's scope in one atomic unit ([CheckBatch]
	// first). Atomically: if the stored holder is not exactly tok, Apply
	// fails with an error matching ErrFenced and nothing is applied;
	// otherwise records that are done (below NextOffset, or in a done
	// span) are skipped (replays are no-ops); with b.IDs, duplicates are
	// found (Features.DedupeWindow); effect runs for each remaining record
	// index in order; and the checkpoint moves: past the last offset for
	// a serial batch, by the spans [From[i], Offsets[i]+1) of every
	// record not skipped as done for a lane's ([Checkpoint.Add]). If
	// effect fails, Apply returns its error wrapped in an *EffectError
	// and commits nothing (no effect, no offset, no ID). A serial batch
	// on a scope with done spans skips the records in them and drops the
	// spans below the NextOffset it leaves ([Checkpoint.Raise]), so that
	// a worker without lanes can take over from one with lanes.
	Apply(ctx context.Context, tok epochs.Token, b Batch, effect Effect[Tx]) (Result, error)

	// DeadLetter stores rec as a dead letter of tok's scope and moves its
	// checkpoint past rec.Offset, in one atomic unit
	// (docs/design.md#dead-letters; the sink needs Features.DeadLetters,
	// [CheckDeadLetter] first): if the stored holder is not exactly tok
	// it fails with an error matching ErrFenced and stores nothing (a
	// zombie cannot dead-letter); if rec.Offset is done (a replay) it
	// stores nothing and returns Stored false; otherwise it stores rec
	// and the checkpoint moves as Apply moves it for a batch of rec alone
	// (serial: NextOffset becomes rec.Offset+1, a gap before it being
	// normal; a lane's record, rec.Lane: [rec.From, rec.Offset+1) is
	// done). The caller applies the records before rec first.
	DeadLetter(ctx context.Context, tok epochs.Token, rec DeadRecord) (DeadLetterResult, error)
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
	// Proof, if not nil, says that the claimer proved, right before, that
	// it is a current member of the group at its token (a
	// generation-checked offset commit the broker accepted for the
	// token's member and epoch: docs/design.md#admin-reset). A scope whose
	// fence was ever reset accepts a claim only with a current Proof
	// ([Fence.CheckClaim]).
	Proof *Proof
}

// Proof is a claimer's proof of current group membership, offered with a
// claim ([Observed.Proof]).
type Proof struct {
	// Version is the fence version the claimer read before it proved
	// (Fence.Version, as a *ProofRequiredError reports it). A proof is
	// evidence about the moment it was made: the sink accepts it only if
	// no claim and no reset of the scope was accepted since that version,
	// so a member that proved, paused, and wakes after the group was
	// recreated and the fence reset cannot pass on its old proof.
	Version int64
	// GroupEpoch, if above zero, is the group's epoch (classic: its
	// generation; KIP-848: its group epoch) as the claimer observed it at
	// the broker after it read Version: the generation its proof was
	// accepted at, or a describe of the group. It lets a proven claim take
	// the scope over from a holder whose epoch is above it
	// ([Fence.CheckClaim]): no tenure of the group as it is now can hold
	// an epoch the group has not reached, so that holder belongs to an
	// earlier incarnation of the group (deleted and recreated, expired,
	// or lost by the broker), docs/design.md#expired-groups.
	GroupEpoch int32
}

// Fence is the stored state of one scope.
type Fence struct {
	Scope      epochs.Scope
	Holder     epochs.Token // zero if the scope has been reset and not claimed since
	NextOffset int64
	// TopicID is the identity of the log NextOffset refers to; empty
	// before the first claim that observed one.
	TopicID string
	// ProofRequired reports that the fence was reset at least once: from
	// then on, for as long as the sink's storage lasts, every claim but
	// the stored holder's own re-claim must come with a current proof of
	// membership (Observed.Proof). A member of the group's previous
	// incarnation may hold any epoch, above the new incarnation's as well
	// as below, and only the broker can tell it apart. A reset sets it;
	// nothing clears it.
	ProofRequired bool
	// Version moves whenever the sink accepts a claim or a reset of the
	// scope, and only then (0 before the first); a backend chooses the
	// numbers (the sequence number of the scope's last history entry, a
	// counter), so compare versions for equality only. A proof is checked
	// against it ([Proof.Version]).
	Version int64
	// Done are the done spans above NextOffset of a gapped checkpoint
	// (Features.Gaps, docs/design.md#gaps): records applied by lanes that
	// ran ahead. Empty for a scope without gaps.
	Done []Span
	// Duplicates counts the records Apply did not run in the scope
	// because their command ID was applied already (Result.Duplicates),
	// since the scope's fence row was made: incremented in Apply's atomic
	// unit, kept by a reset. Zero for a sink without a dedupe window.
	Duplicates int64
}

// Equal reports whether f and g are the same fence: every field equal,
// and the same done spans (a nil and an empty Done are the same). Fence
// holds a slice, so == does not compile on it. It may be called from any
// goroutine.
func (f Fence) Equal(g Fence) bool {
	return f.Scope == g.Scope && f.Holder == g.Holder && f.NextOffset == g.NextOffset && f.TopicID == g.TopicID &&
		f.ProofRequired == g.ProofRequired && f.Version == g.Version && f.Duplicates == g.Duplicates &&
		slices.Equal(f.Done, g.Done)
}

// CheckClaim decides whether tok may claim the scope whose stored fence
// is f, offering obs (docs/design.md#claim, docs/design.md#admin-reset):
//
//   - a claim the ordering rule allows (epochs.Token.CanClaim) needs
//     nothing more unless f.ProofRequired, when a claim other than the
//     stored holder's re-claim needs obs.Proof made at f's Version, else
//     a *ProofRequiredError;
//   - a claim the ordering rule refuses is a *FencedError (carrying f's
//     Version), unless it is a proven takeover: obs.Proof made at f's
//     Version, with a GroupEpoch at or above tok's epoch and below the
//     stored holder's (docs/design.md#expired-groups). takeover then
//     reports that the claim supersedes the holder as a reset would:
//     the backend records a reset of that holder before the claim, and
//     sets ProofRequired.
//
// Log continuity is decided apart ([CheckLog], [CheckLog]). Every
// backend's Claim decides with it, inside its atomic unit, on the fence
// it read there. It may be called from any goroutine.
func (f Fence) CheckClaim(tok epochs.Token, obs Observed) (takeover bool, err error) {
	if !tok.CanClaim(f.Holder) {
		if p := obs.Proof; p != nil && f.ProvenBy(obs) && p.GroupEpoch > 0 && tok.Epoch <= p.GroupEpoch && p.GroupEpoch < f.Holder.Epoch {
			return true, nil
		}
		return false, &FencedError{Op: OpClaim, Stored: f.Holder, Offered: tok, Version: f.Version}
	}
	if !f.NeedsProof(tok) || f.ProvenBy(obs) {
		return false, nil
	}
	e := &ProofRequiredError{Offered: tok, Version: f.Version}
	if obs.Proof != nil {
		e.Stale = true
		e.ProvenAt = obs.Proof.Version
	}
	return false, e
}

// TakeoverDetail is the audited detail of the reset row that a takeover
// by tok, offering obs (with its Proof), records.
func (obs Observed) TakeoverDetail(tok epochs.Token) string {
	return fmt.Sprintf("the group epoch %d that %s observed after it read fence version %d and proved its membership is below the cleared holder's epoch: "+
		"the group was deleted and recreated, expired, or lost by the broker", obs.Proof.GroupEpoch, tok, obs.Proof.Version)
}

// NeedsProof reports whether a claim by tok of the scope whose stored
// fence is f must come with a current proof of membership: whenever f
// was ever reset (f.ProofRequired), except the stored holder's own
// re-claim (a caller with the holder's exact token can already write).
// It may be called from any goroutine.
func (f Fence) NeedsProof(tok epochs.Token) bool {
	if !f.Holder.IsZero() && tok.Holds(f.Holder) {
		return false
	}
	return f.ProofRequired
}

// ProvenBy reports whether obs carries a proof made at f's current
// Version. It may be called from any goroutine.
func (f Fence) ProvenBy(obs Observed) bool {
	return obs.Proof != nil && obs.Proof.Version == f.Version
}

// ErrProofRequired is matched by the error Claim returns for a scope whose
// fence was reset, when the claim comes without a current proof of
// membership ([Fence.CheckClaim]): a *ProofRequiredError. It never matches
// ErrFenced: the claimer should prove its membership to the broker and
// claim again.
var ErrProofRequired = errors.New("sink: the fence was reset; the claim needs a proof of current group membership")

// ProofRequiredError reports a claim refused for want of a current proof
// of membership. It matches ErrProofRequired with errors.Is.
type ProofRequiredError struct {
	Offered epochs.Token
	// Version is the fence's version: a proof made after this error and
	// offered as Proof{Version: Version} is current, unless another claim
	// or reset is accepted first.
	Version int64
	// Stale reports that the claim came with a proof, made at ProvenAt,
	// a version the fence has moved past since.
	Stale    bool
	ProvenAt int64
}

// Error describes the refusal.
func (e *ProofRequiredError) Error() string {
	if e.Stale {
		return fmt.Sprintf("%v: claim by %s: its proof was made at fence version %d, the fence is at version %d since", ErrProofRequired, e.Offered, e.ProvenAt, e.Version)
	}
	return fmt.Sprintf("%v: claim by %s (fence version %d)", ErrProofRequired, e.Offered, e.Version)
}

// Is reports whether target is ErrProofRequired.
func (e *ProofRequiredError) Is(target error) bool { return target == ErrProofRequired }

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
	// Version is the fence's version (Fence.Version) at a refused claim:
	// a proven takeover is checked against it. Zero for other ops.
	Version int64
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
	// TxHealthy reports that the sink's own transaction and connection
	// were still sound when the effect failed: the error did not come
	// from the sink (a call the handler made to another service, its own
	// validation), whatever its type, so it is the handler's and counts
	// against the record's retry budget. False says nothing: the error
	// may be the sink's (a lost connection, a serialization failure), and
	// the consumer asks the sink's sink.Health.
	TxHealthy bool
}

// Error describes the failure.
func (e *EffectError) Error() string {
	return fmt.Sprintf("sink: effect of record at offset %d failed: %v", e.Offset, e.Err)
}

// Unwrap returns the effect's error.
func (e *EffectError) Unwrap() error { return e.Err }

// CheckBatch validates the arguments of an Apply call against the sink's
// features: a valid token, a non-nil effect, offsets strictly ascending and
// not negative, From and IDs of the offsets' length (From within each
// record's gap, IDs no longer than MaxCommandIDLen), else ErrBadBatch; From
// without f.Gaps or IDs without f.DedupeWindow, else ErrUnsupported.
// Backends call it first. It may be called from any goroutine.
func CheckBatch[Tx any](tok epochs.Token, b Batch, effect Effect[Tx], f Features) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	if effect == nil {
		return fmt.Errorf("%w: nil effect", ErrBadBatch)
	}
	for i, o := range b.Offsets {
		if o < 0 {
			return fmt.Errorf("%w: negative offset %d at index %d", ErrBadBatch, o, i)
		}
		if i > 0 && o <= b.Offsets[i-1] {
			return fmt.Errorf("%w: offsets not strictly ascending at index %d (%d after %d)", ErrBadBatch, i, o, b.Offsets[i-1])
		}
	}
	if b.From != nil {
		if !f.Gaps {
			return fmt.Errorf("%w: a lane's batch (From) on a sink without gaps", ErrUnsupported)
		}
		if len(b.From) != len(b.Offsets) {
			return fmt.Errorf("%w: %d From offsets for %d offsets", ErrBadBatch, len(b.From), len(b.Offsets))
		}
		for i, from := range b.From {
			if from < 0 || from > b.Offsets[i] || i > 0 && from <= b.Offsets[i-1] {
				return fmt.Errorf("%w: From %d at index %d is not in (previous offset, offset %d]", ErrBadBatch, from, i, b.Offsets[i])
			}
		}
	}
	if b.IDs != nil {
		if f.DedupeWindow <= 0 {
			return fmt.Errorf("%w: command IDs on a sink that does not deduplicate", ErrUnsupported)
		}
		if len(b.IDs) != len(b.Offsets) {
			return fmt.Errorf("%w: %d command IDs for %d offsets", ErrBadBatch, len(b.IDs), len(b.Offsets))
		}
		for i, id := range b.IDs {
			if len(id) > MaxCommandIDLen {
				return fmt.Errorf("%w: command ID at index %d is %d bytes, longer than %d", ErrBadBatch, i, len(id), MaxCommandIDLen)
			}
		}
	}
	return nil
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
