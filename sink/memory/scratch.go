package memory

import "strings"

// applyScratch is the working memory of one apply call, taken from the
// sink's pool and put back when the call returns, so that a stream of
// batches allocates only what the history keeps (an Apply event's
// offsets and a copy of its IDs) and what the caller gets (the
// duplicates). Nothing in it outlives the call: it is cleared of the
// caller's ID strings before it goes back to the pool.
type applyScratch struct {
	keys      []idKey // by index: the key of each ID
	done      []bool  // by index: done already (in a span)
	dup       []bool  // by index: a duplicate
	hints     []int   // by index: where find's probe ended
	lookup    []int   // on a lane: the indexes looked up
	dupAt     []bool  // by index of lookup: the decision seen
	appliedAt []int   // by index of the applied records: the record's index
	// appliedIDs are the IDs of the applied records, for the history
	// (which copies them).
	appliedIDs []string
	seen       seenSet // the batch's IDs so far (in-batch duplicates)
	touched    uint32  // what idSet.touch read (kept so that it reads)
}

// putScratch clears sc of the caller's strings and puts it back in the
// pool.
func (s *Sink) putScratch(sc *applyScratch) {
	clear(sc.appliedIDs)
	s.scratch.Put(sc)
}

// resize returns (*buf)[:n], reallocating *buf if it is too short; the
// elements it returns hold whatever an earlier call left in them.
func resize[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

// seenSet is a set of idKeys for one batch at a time: reset empties it
// by moving to a new generation instead of clearing its slots, so that a
// batch pays for the keys it adds only. Linear probing, load at most one
// half.
type seenSet struct {
	slots []seenSlot // len a power of two
	gen   uint32     // the current generation, never 0 once reset
}

// seenSlot is a slot of a seenSet: full in generation gen.
type seenSlot struct {
	key idKey
	gen uint32
}

// reset empties s, with room for n keys.
func (s *seenSet) reset(n int) {
	if 2*n > len(s.slots) {
		size := 64
		for size < 2*n {
			size *= 2
		}
		s.slots, s.gen = make([]seenSlot, size), 0
	}
	s.gen++
	if s.gen == 0 { // wrapped: old generations would look current
		clear(s.slots)
		s.gen = 1
	}
}

// add adds k to s and reports whether s held it already. At most the n
// keys of the last reset may be added.
func (s *seenSet) add(k idKey) bool {
	mask := uint64(len(s.slots) - 1)
	for i := k[1] & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		if sl.gen != s.gen {
			*sl = seenSlot{key: k, gen: s.gen}
			return false
		}
		if sl.key == k {
			return true
		}
	}
}

// packedIDs is a list of IDs (an [Event]'s IDs) in one string: ID i is
// all[ends[i-1]:ends[i]] (from 0 for the first). ok tells an empty list
// from none (nil).
type packedIDs struct {
	all  string
	ends []uint32
	ok   bool
}

// packIDs returns ids packed; nil gives the zero packedIDs.
func packIDs(ids []string) packedIDs {
	if ids == nil {
		return packedIDs{}
	}
	n := 0
	for _, id := range ids {
		n += len(id)
	}
	var b strings.Builder
	b.Grow(n)
	ends := make([]uint32, len(ids))
	for i, id := range ids {
		b.WriteString(id)
		ends[i] = uint32(b.Len())
	}
	return packedIDs{all: b.String(), ends: ends, ok: true}
}

// unpack returns the IDs p holds (substrings of one string), nil for
// none.
func (p packedIDs) unpack() []string {
	if !p.ok {
		return nil
	}
	ids := make([]string, len(p.ends))
	start := uint32(0)
	for i, end := range p.ends {
		ids[i] = p.all[start:end]
		start = end
	}
	return ids
}
