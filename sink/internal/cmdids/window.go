package cmdids

// DefaultWindow is the retention horizon of applied command IDs of a
// backend configured with a zero Config.DedupeWindow: the IDs of a
// scope's last 100,000 offsets (docs/design.md#command-ids has the cost
// behind that choice).
const DefaultWindow int64 = 100_000

// WindowOf returns the window a backend configured with w uses:
// DefaultWindow for 0, w otherwise. A negative w is invalid: the
// backend's config check refuses it. It may be called from any goroutine.
func WindowOf(w int64) int64 {
	if w == 0 {
		return DefaultWindow
	}
	return w
}

// Plan is the part of Apply with command IDs that every backend shares: which records
// of a batch must be looked up in the stored IDs, and which are
// duplicates of an earlier record of the same batch.
type Plan struct {
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

// PlanBatch returns the plan of a batch whose records from index first
// on are at or above NextOffset. It may be called from any goroutine.
func PlanBatch(ids []string, first int) Plan {
	var p Plan
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

// PruneDue reports whether an Apply with command IDs that moves a scope's NextOffset
// from oldNext to newNext prunes the IDs below the new horizon: when the
// horizon crosses a multiple of window/16 (at least 1), so that a sink
// deletes its old IDs in a few larger steps instead of a little with
// every batch. The IDs it keeps meanwhile are past the horizon and never
// duplicates ([IsDuplicate] decides by offset); storage holds at most
// window + window/16 offsets' IDs (more if NextOffset moved by Apply or
// DeadLetter, which never prune, until the next Apply with IDs that does). It
// may be called from any goroutine.
func PruneDue(oldNext, newNext, window int64) bool {
	step := max(window/16, 1)
	h := Horizon(newNext, window)
	if h <= 0 {
		return false // no offset below it
	}
	return h/step > max(Horizon(oldNext, window), 0)/step
}
