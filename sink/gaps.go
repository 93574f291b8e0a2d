package sink

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/workrouter/workrouter/epochs"
)

// Span is a run of a scope's offsets, From included and To excluded, that
// is done: every record in it was applied (or dead-lettered), and every
// offset in it without a record (a transaction marker, an aborted or
// compacted record) was passed over by the record after it.
type Span struct {
	From, To int64
}

// String returns the span as "from-to" (To excluded), the form the CLI and
// the backends' stored text show it in.
func (s Span) String() string {
	return strconv.FormatInt(s.From, 10) + "-" + strconv.FormatInt(s.To, 10)
}

// Checkpoint is a scope's checkpoint with gaps (docs/design.md#gaps): the
// low watermark, below which every offset is done, and the spans above it
// that are done too, applied by lanes that ran ahead of the others.
// Kafka's committed offset is the watermark; the spans live in the sink
// only. The zero value is a scope at offset 0 with nothing done above it.
type Checkpoint struct {
	// NextOffset is the low watermark: the first offset not done.
	NextOffset int64
	// Done are the done spans above NextOffset: ascending, disjoint and
	// not touching each other or NextOffset (every From is above
	// NextOffset, and above the previous span's To). Empty for a
	// checkpoint without gaps.
	Done []Span
}

// Contains reports whether offset off is done: below the watermark or in
// a done span. It may be called from any goroutine that owns c.
func (c *Checkpoint) Contains(off int64) bool {
	if off < c.NextOffset {
		return true
	}
	_, found := slices.BinarySearchFunc(c.Done, off, func(s Span, off int64) int {
		switch {
		case s.To <= off:
			return -1
		case s.From > off:
			return 1
		}
		return 0
	})
	return found
}

// Add marks the offsets [from, to) done, merging them with the spans they
// touch, and raises the watermark over the contiguous run that starts at
// it: when from <= NextOffset < to, NextOffset moves to to, and on over
// every span that then touches it. Offsets below the watermark are done
// already; an empty or negative range changes nothing. It may be called
// from the goroutine that owns c.
func (c *Checkpoint) Add(from, to int64) {
	from = max(from, c.NextOffset)
	if from >= to {
		return
	}
	// The spans that touch [from, to) (adjacent spans merge too) are
	// Done[lo:hi].
	lo, _ := slices.BinarySearchFunc(c.Done, from, func(s Span, from int64) int {
		if s.To < from {
			return -1
		}
		return 1
	})
	hi := lo
	for hi < len(c.Done) && c.Done[hi].From <= to {
		from, to = min(from, c.Done[hi].From), max(to, c.Done[hi].To)
		hi++
	}
	if from <= c.NextOffset {
		// The run starts at the watermark: it rises over it. The spans
		// before lo are below from, hence below the watermark: there are
		// none.
		c.NextOffset = to
		c.Done = slices.Delete(c.Done, 0, hi)
		return
	}
	c.Done = slices.Replace(c.Done, lo, hi, Span{From: from, To: to})
}

// Raise moves the watermark to next, if it is higher, dropping the spans
// below it and raising it further over a span that then touches it. It is
// what a plain (ungapped) Apply or DeadLetter does to a gapped scope's
// checkpoint: every offset below its new NextOffset is done. It may be
// called from the goroutine that owns c.
func (c *Checkpoint) Raise(next int64) {
	if next <= c.NextOffset {
		return
	}
	c.Add(c.NextOffset, next)
}

// End returns the first offset above every done offset: the last span's
// To, or NextOffset when there is no span. A claim's log check compares
// it with the log end (a done span above the log's end means the log was
// truncated under the checkpoint). It may be called from any goroutine
// that owns c.
func (c *Checkpoint) End() int64 {
	if len(c.Done) == 0 {
		return c.NextOffset
	}
	return c.Done[len(c.Done)-1].To
}

// Clone returns a copy of c that shares no memory with it. It may be
// called from any goroutine that owns c.
func (c Checkpoint) Clone() Checkpoint {
	c.Done = slices.Clone(c.Done)
	return c
}

// Valid reports whether c keeps the invariants of Checkpoint.Done
// (ascending, disjoint, not touching, above the watermark): a backend
// checks what it reads from storage with it, and fails a checkpoint that
// breaks them with an error matching [ErrBadCheckpoint]. It may be called
// from any goroutine.
func (c Checkpoint) Valid() error {
	prev := c.NextOffset
	for i, s := range c.Done {
		if s.From <= prev || s.To <= s.From {
			return fmt.Errorf("%w: done span %d [%d, %d) does not follow offset %d", ErrBadCheckpoint, i, s.From, s.To, prev)
		}
		prev = s.To
	}
	return nil
}

// ErrBadCheckpoint is matched by the error a backend returns when the
// checkpoint it reads from storage breaks the invariants of
// [Checkpoint.Done] (see [Checkpoint.Valid]).
var ErrBadCheckpoint = errors.New("sink: stored checkpoint is not valid")

// CheckLog applies the continuity rules of Claim (docs/design.md#log-identity)
// to a scope's stored topic ID and checkpoint cp and what the claimer
// observed; found is false for a scope the sink has no row for. The topic
// was recreated when the stored and observed topic IDs differ; the log is
// truncated when
// [Checkpoint.End], the first offset above every done one, is above
// obs.LogEnd, and records were lost to retention when obs.LogStart is
// above the watermark (an offset not done was deleted). It returns the
// checkpoint the claim starts from (the log start and no span for a new
// scope, cp otherwise) and the topic ID to store, or a *LogChangedError
// whose NextOffset is the offset the failed rule compared (End for a
// truncation, the watermark otherwise). Backends call it inside their
// claim's atomic unit. It may be called from any goroutine.
func CheckLog(scope epochs.Scope, found bool, storedTopicID string, cp Checkpoint, obs Observed) (Checkpoint, string, error) {
	if !found {
		next, topic, err := checkLog(scope, false, storedTopicID, cp.NextOffset, obs)
		return Checkpoint{NextOffset: next}, topic, err
	}
	if _, _, err := checkLog(scope, true, storedTopicID, cp.End(), obs); err != nil {
		var lc *LogChangedError
		if errors.As(err, &lc) && lc.Case != ErrLogTruncated {
			lc.NextOffset = cp.NextOffset
		}
		return Checkpoint{}, "", err
	}
	_, topic, err := checkLog(scope, true, storedTopicID, cp.NextOffset, obs)
	if err != nil {
		return Checkpoint{}, "", err
	}
	return cp, topic, nil
}
