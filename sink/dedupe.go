package sink

import (
	"context"
	"fmt"

	"github.com/workrouter/workrouter/epochs"
)

// Deduplicator is an optional capability of a sink: applying a batch whose
// records carry command IDs so that a command that entered the log twice
// is applied once (docs/design.md#command-ids). Every backend of this
// module has it, and the metrics wrapper keeps it. Unlike the other
// capabilities, a wrapper keeps it only by implementing it itself: its
// ApplyOnce replaces Apply, so the consumer (and sinkmetrics) use a
// sink's own ApplyOnce, never one As finds under a wrapper, which would
// bypass the wrapper's Apply.
type Deduplicator[Tx any] interface {
	// ApplyOnce is Apply (the same fence check, replay skip, effects,
	// NextOffset past the whole batch, all in one atomic unit) with
	// command IDs: ids[i] is the command ID of the record at offsets[i],
	// "" for a record without one. In the same atomic unit as the fence
	// check, a record at or above NextOffset whose ID was applied in the
	// scope within the window (at an offset p with p >= offset -
	// DedupeWindow()), or appears at an earlier index of the batch, is a
	// duplicate: its effect is not run and its index is reported in
	// ApplyOnceResult.Duplicates. The IDs of the records whose effects ran
	// are recorded with their offsets in the same unit; a fenced batch,
	// a failed effect or a cancelled ctx records none. A record without
	// an ID is applied as Apply applies it. A replay (offset below
	// NextOffset) is Skipped, never a duplicate, and its ID is neither
	// checked nor recorded. IDs applied at offsets below the new
	// NextOffset minus the window are no longer duplicates, and are
	// pruned in the same unit, without a full scan, when PruneDue says
	// so. ids must have the length of offsets and
	// hold no ID longer than MaxCommandIDLen bytes, or ApplyOnce fails
	// with ErrBadBatch before anything runs.
	ApplyOnce(ctx context.Context, tok epochs.Token, offsets []int64, ids []string, effect Effect[Tx]) (ApplyOnceResult, error)
	// DedupeWindow returns the sink's retention horizon, in offsets of a
	// scope (always at least 1).
	DedupeWindow() int64
}

// ApplyOnceResult reports what one ApplyOnce did: what Apply reports
// (Applied counts the effects run, Skipped the replays), and the
// duplicates. Applied + Skipped + len(Duplicates) is the batch's length.
type ApplyOnceResult struct {
	ApplyResult
	// Duplicates are the indexes, ascending, of the records not run
	// because their command ID was already applied in the scope within
	// the window, or appears at an earlier index of the batch.
	Duplicates []int
}

// DefaultDedupeWindow is the retention horizon of applied command IDs of
// a backend configured with a zero window: the IDs of a scope's last
// 100,000 offsets (docs/design.md#command-ids for the measurement behind
// it: about 15 MB per partition in SQLite and PostgreSQL).
const DefaultDedupeWindow int64 = 100_000

// MaxCommandIDLen is the longest command ID, in bytes, a Deduplicator
// accepts (PostgreSQL's B-tree entries and SQLite's pages stay small).
const MaxCommandIDLen = 255

// CheckIDs validates the ids argument of an ApplyOnce call after
// CheckBatch. Backends call it first. It may be called from any goroutine.
func CheckIDs(offsets []int64, ids []string) error {
	if len(ids) != len(offsets) {
		return fmt.Errorf("%w: %d command IDs for %d offsets", ErrBadBatch, len(ids), len(offsets))
	}
	for i, id := range ids {
		if len(id) > MaxCommandIDLen {
			return fmt.Errorf("%w: command ID at index %d is %d bytes, longer than %d", ErrBadBatch, i, len(id), MaxCommandIDLen)
		}
	}
	return nil
}

// DedupeWindowOf returns the window a backend configured with w uses:
// DefaultDedupeWindow for 0, w otherwise. A negative w is invalid: the
// backend's config check refuses it. It may be called from any goroutine.
func DedupeWindowOf(w int64) int64 {
	if w == 0 {
		return DefaultDedupeWindow
	}
	return w
}

// DedupePlan is the part of ApplyOnce every backend shares: which records
// of a batch must be looked up in the stored IDs, and which are
// duplicates of an earlier record of the same batch.
type DedupePlan struct {
	// Lookup are the indexes, ascending, of the records at or above
	// NextOffset whose ID is the first occurrence of that ID in the
	// batch: the backend checks them against the stored IDs, and records
	// those it applies.
	Lookup []int
	// InBatch are the indexes, ascending, of the records at or above
	// NextOffset whose ID appears at an earlier index of the batch: they
	// are duplicates whatever the store holds.
	InBatch []int
}

// PlanDedupe returns the plan of a batch whose records from index first
// on are at or above NextOffset. It may be called from any goroutine.
func PlanDedupe(ids []string, first int) DedupePlan {
	var p DedupePlan
	seen := make(map[string]struct{}, len(ids)-first)
	for i := first; i < len(ids); i++ {
		id := ids[i]
		if id == "" {
			continue
		}
		if _, dup := seen[id]; dup {
			p.InBatch = append(p.InBatch, i)
			continue
		}
		seen[id] = struct{}{}
		p.Lookup = append(p.Lookup, i)
	}
	return p
}

// IsDuplicate reports whether a record at offset off whose ID was applied
// at offset applied is within window of it: a duplicate. An ID applied at
// an offset above off (a scope reset onto a new log whose offsets start
// lower) is a duplicate too. It may be called from any goroutine.
func IsDuplicate(off, applied, window int64) bool {
	return applied >= off-window
}

// Horizon returns the lowest offset whose ID a scope at nextOffset still
// remembers with window: IDs applied below it are no longer duplicates,
// and may be pruned. It may be called from any goroutine.
func Horizon(nextOffset, window int64) int64 {
	return nextOffset - window
}

// PruneDue reports whether an ApplyOnce that moves a scope's NextOffset
// from oldNext to newNext prunes the IDs below the new horizon: when the
// horizon crosses a multiple of window/16 (at least 1), so that a sink
// deletes its old IDs in a few larger steps instead of a little with
// every batch. The IDs it keeps meanwhile are past the horizon and never
// duplicates ([IsDuplicate] decides by offset); storage holds at most
// window + window/16 offsets' IDs (more if NextOffset moved by Apply or
// DeadLetter, which never prune, until the next ApplyOnce that does). It
// may be called from any goroutine.
func PruneDue(oldNext, newNext, window int64) bool {
	step := max(window/16, 1)
	h := Horizon(newNext, window)
	if h <= 0 {
		return false // no offset below it
	}
	return h/step > max(Horizon(oldNext, window), 0)/step
}
