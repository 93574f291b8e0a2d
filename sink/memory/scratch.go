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

// seenSet finds the repeated keys of one batch: the keys added since
// the last reset are chained by bucket (a key's second word, whose low
// bits are uniform), head holding the latest index of each bucket and
// next the one before it (both + 1, 0 ending a chain), and compared in
// full along the chain. A reset clears only the heads (4 bytes a
// bucket, two buckets a key), so that the set of a 1,024-record batch
// is 12 KiB that stay in the first-level cache.
type seenSet struct {
	head []int32 // by bucket: 1 + the latest index added, or 0
	next []int32 // by index: 1 + the index added before it in its bucket, or 0
}

// reset empties s, for up to n keys at indexes below size.
func (s *seenSet) reset(n, size int) {
	buckets := 64
	for buckets < 2*n {
		buckets *= 2
	}
	if len(s.head) < buckets {
		s.head = make([]int32, buckets)
	} else {
		s.head = s.head[:buckets]
		clear(s.head)
	}
	resize(&s.next, size)
}

// add adds the key keys[i] (i below the size of the last reset) and
// reports whether one of the keys added since that reset is equal.
func (s *seenSet) add(keys []idKey, i int) bool {
	k := keys[i]
	b := k[1] & uint64(len(s.head)-1)
	for j := s.head[b]; j != 0; j = s.next[j-1] {
		if keys[j-1] == k {
			return true
		}
	}
	s.next[i] = s.head[b]
	s.head[b] = int32(i) + 1
	return false
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
