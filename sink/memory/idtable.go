package memory

// idSet is the applied command IDs of one scope: a queue of what was
// recorded, in the order it was recorded (ring), and a hash index over
// it (slots) that finds a key's latest entry. Its methods must be called
// with the sink's mu held (for writing, for every method that changes it).
// The zero value is empty and ready.
//
// # Layout
//
// The queue is a ring of 24-byte entries (offset and 128-bit key), by
// sequence number: entry seq is at ring[seq&(len(ring)-1)], the live ones
// are [head, tail). Appends and prunes walk it in order, so they stay in
// cache.
//
// The index is a flat open-addressed hash table (linear probing, deletion
// by backward shift, so no tombstones, load at most one half) of 8-byte
// slots that hold no key: a tag (the low 31 bits of the key's first word,
// shifted up, with the low bit set so that 0 marks an empty slot) and the
// low 32 bits of the entry's sequence number. A key's first word is
// already a uniform hash (idKey), so its low bits are its home slot,
// which the tag gives back for the backward shift and for a grow without
// reading the ring. A lookup compares tags and reads the ring only on a
// match, then compares the whole 128-bit key, so a lookup is exact. With
// 8-byte slots the index of a full 100,000-offset window is 2 MiB, a
// third of what slots holding the key take, so that the indexes of many
// scopes fit in a last-level cache. An apply also loads the home slots of all its keys
// (touch) before it probes them one by one, so that their misses
// overlap. The index and the ring grow by doubling up to an eighth of
// a full window's size, then to that size at once (reserve).
//
// Go's map, under the sink's steady churn of one insert and one delete
// per record, fills with deleted slots that lengthen every probe; this
// table's probes stay short.
//
// # Hints
//
// An apply looks its IDs up (find) in the critical section before its
// effects and records them in the one after. find returns the slot its
// probe ended at; record starts there instead of at the key's home,
// which saves the second probe (and the miss it costs) if the table did
// not move in between (moves is unchanged): inserts since then only
// filled empty slots, so every slot from the key's home up to the hint
// is still full, and the first empty slot of the probe, or the key, is
// at or after the hint. A grow and a deletion move slots, and bump moves.
type idSet struct {
	slots []idSlot // len 0 or a power of two
	n     int      // full slots
	moves uint64   // grows and deletions: they void the hints of find

	ring       []idEntry // len 0 or a power of two
	head, tail uint64    // the live entries' sequence numbers: [head, tail)

	// window is the sink's dedupe window: the index and the ring grow by
	// doubling to an eighth of the size that many keys need, then to
	// that size at once (see reserve).
	window int64

	ver uint64 // moves on every change, for the optimistic check
}

// idSlot is one slot of an idSet's index: tag 0 is an empty slot.
type idSlot struct {
	tag uint32 // tagOf the key
	pos uint32 // the low 32 bits of the entry's sequence number
}

// idEntry is one applied command ID of a scope, in the ring.
type idEntry struct {
	off int64
	key idKey
}

// noHint is the hint of a key that was not looked up.
const noHint = -1

// tagOf returns the tag of k: never 0, and its home slot in a table of
// mask+1 slots (up to 2^31) is homeOf(tag, mask).
func tagOf(k idKey) uint32 { return uint32(k[0])<<1 | 1 }

// homeOf returns the home slot of a key with tag t in a table of mask+1
// slots.
func homeOf(t uint32, mask uint64) uint64 { return uint64(t>>1) & mask }

// len returns the number of keys in set.
func (set *idSet) len() int { return set.n }

// entry returns the ring's entry of the slot's sequence number.
func (set *idSet) entry(s idSlot) *idEntry {
	return &set.ring[uint64(s.pos)&uint64(len(set.ring)-1)]
}

// get returns the offset k was last recorded at, and whether set holds k.
func (set *idSet) get(k idKey) (int64, bool) {
	off, _, ok := set.find(k)
	return off, ok
}

// find is get that also returns the hint for record: the slot that holds
// k, or the empty slot its probe ended at (noHint for an empty table).
func (set *idSet) find(k idKey) (int64, int, bool) {
	if len(set.slots) == 0 {
		return 0, noHint, false
	}
	tag := tagOf(k)
	mask := uint64(len(set.slots) - 1)
	for i := homeOf(tag, mask); ; i = (i + 1) & mask {
		s := set.slots[i]
		if s.tag == 0 {
			return 0, int(i), false
		}
		if s.tag == tag {
			if e := set.entry(s); e.key == k {
				return e.off, int(i), true
			}
		}
	}
}

// touch loads the home slot of each key and returns a sum of what it
// read (for the caller to keep, so that the loads are not dropped): the
// loads do not depend on each other, so the CPU overlaps their cache
// misses, which the probes of find, one key after another, each ending
// in a branch on what it loaded, do much less. The finds of the same
// keys that follow then hit the cache. It returns 0 for an empty index.
func (set *idSet) touch(keys []idKey) uint32 {
	if len(set.slots) == 0 {
		return 0
	}
	mask := uint64(len(set.slots) - 1)
	var sum uint32
	for _, k := range keys {
		sum += set.slots[homeOf(tagOf(k), mask)].tag
	}
	return sum
}

// reserve makes room in the index for extra more keys without a grow, so
// that the hints of find stay valid until they are used (unless a
// deletion or another call's grow moves slots meanwhile).
//
// The index needs two slots a key, and a scope keeps about a window's
// keys (more only when lanes or a reset leave older ones behind the
// front of the queue), so the index grows by doubling until it has an
// eighth of the slots of a full window, then to those at once: a
// streaming scope pays for one grow past that point instead of three,
// and a scope with few IDs (tests) does not pay for a window's memory
// (2 MiB at the default window).
func (set *idSet) reserve(extra int) {
	if need := 2 * (set.n + extra); need > len(set.slots) {
		set.grow(grownSize(len(set.slots), need, 2*set.window))
	}
}

// grownSize returns the size of a table of size slots (a power of two,
// or 0) grown to hold need: the next power of two at least twice size
// (and 64), or the power of two that holds full once that is at most
// eight times as much.
func grownSize(size, need int, full int64) int {
	size = max(64, 2*size)
	for size < need {
		size *= 2
	}
	if f := int64(size); f < full && 8*f >= full {
		for f < full {
			f *= 2
		}
		size = int(f)
	}
	return size
}

// record records that the ID of key k was applied at off, replacing what
// set held for k; hint is what find returned for k when the table's moves
// was hintMoves (noHint: none).
func (set *idSet) record(k idKey, off int64, hint int, hintMoves uint64) {
	if set.tail-set.head == uint64(len(set.ring)) {
		set.growRing()
	}
	seq := set.tail
	set.ring[seq&uint64(len(set.ring)-1)] = idEntry{off: off, key: k}
	set.tail++

	if 2*(set.n+1) > len(set.slots) {
		set.grow(grownSize(len(set.slots), 2*(set.n+1), 2*set.window))
	}
	tag := tagOf(k)
	mask := uint64(len(set.slots) - 1)
	i := homeOf(tag, mask)
	if hint != noHint && hintMoves == set.moves && uint64(hint) <= mask {
		i = uint64(hint)
	}
	for ; ; i = (i + 1) & mask {
		s := &set.slots[i]
		if s.tag == 0 {
			*s = idSlot{tag: tag, pos: uint32(seq)}
			set.n++
			return
		}
		if s.tag == tag && set.entry(*s).key == k {
			s.pos = uint32(seq) // the older entry is stale: prune skips it
			return
		}
	}
}

// prune forgets the IDs applied below horizon, from the front of the
// queue.
//
// Plain applies record their offsets in ascending order, so the queue is
// by offset too, except after a reset onto a new log whose offsets start
// lower, and with lanes (a lane's batch), whose batches install in any
// order: then lower entries wait behind higher ones, and are forgotten
// later than the window says, never earlier (prune pops an entry only
// once its offset is below the horizon, and IsDuplicate decides by
// offset, so keeping an entry longer changes no decision). The lag is
// bounded: the horizon follows the watermark, which passes every lane's
// offsets. An entry a later record of the same key superseded is popped
// without touching the index.
func (set *idSet) prune(horizon int64) {
	rmask := uint64(len(set.ring) - 1)
	for set.head < set.tail {
		e := &set.ring[set.head&rmask]
		if e.off >= horizon {
			return
		}
		set.deleteSeq(e.key, set.head)
		set.head++
	}
}

// deleteSeq removes k from the index if its slot still points at entry
// seq.
func (set *idSet) deleteSeq(k idKey, seq uint64) {
	if set.n == 0 {
		return
	}
	tag, pos := tagOf(k), uint32(seq)
	mask := uint64(len(set.slots) - 1)
	i := homeOf(tag, mask)
	for ; ; i = (i + 1) & mask {
		s := set.slots[i]
		if s.tag == 0 {
			return // superseded (or never indexed)
		}
		if s.tag == tag && s.pos == pos {
			break
		}
	}
	// Backward shift: move up every later slot of the run whose home is
	// not cyclically in (i, j], so that no probe meets a hole early.
	for j := i; ; {
		j = (j + 1) & mask
		s := set.slots[j]
		if s.tag == 0 {
			break
		}
		h := homeOf(s.tag, mask)
		if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
			continue
		}
		set.slots[i] = s
		i = j
	}
	set.slots[i] = idSlot{}
	set.n--
	set.moves++
}

// grow makes the index size slots (a power of two, at least twice the
// keys) and re-inserts every key, from its tag.
func (set *idSet) grow(size int) {
	old := set.slots
	set.slots = make([]idSlot, size)
	mask := uint64(size - 1)
	for _, s := range old {
		if s.tag == 0 {
			continue
		}
		i := homeOf(s.tag, mask)
		for set.slots[i].tag != 0 {
			i = (i + 1) & mask
		}
		set.slots[i] = s
	}
	set.moves++
}

// growRing grows the ring as reserve grows the index (to the window's
// entries), keeping every live entry at its sequence number's place.
func (set *idSet) growRing() {
	old := set.ring
	set.ring = make([]idEntry, grownSize(len(old), len(old)+1, set.window))
	if len(old) == 0 {
		return
	}
	omask, nmask := uint64(len(old)-1), uint64(len(set.ring)-1)
	for seq := set.head; seq < set.tail; seq++ {
		set.ring[seq&nmask] = old[seq&omask]
	}
}
