package cmdids

import "hash/maphash"

// slot is one entry of an idTable.
type slot struct {
	hash uint64 // 0: an empty slot (a hash of 0 is stored as 1)
	off  int64
	id   string
}

// idTable maps each ID to the highest offset it was applied at, as a
// map[string]int64 would, in an open-addressing table (linear probing,
// deletion by backward shift) whose 32-byte slots hold an ID's 64-bit
// hash next to its offset and the ID: a probe reads one cache line and
// compares hashes before IDs, growing moves the stored hashes without
// hashing an ID again, and a call hashes its ID once. (A map[string]int64
// rehashed every ID at each growth, and that and its insertions took a
// fifth of the Redis bench worker's CPU.) IDs with the same hash take
// separate slots: the table is exact. The zero value is empty and ready.
type idTable struct {
	seed  maphash.Seed
	slots []slot
	n     int
	ready bool
}

func (t *idTable) hashOf(id string) uint64 {
	if !t.ready {
		t.seed, t.ready = maphash.MakeSeed(), true
	}
	h := maphash.String(t.seed, id)
	if h == 0 {
		h = 1
	}
	return h
}

// find returns the slot of id (of hash h) and true, or the empty slot
// that ends its probe and false.
func (t *idTable) find(h uint64, id string) (int, bool) {
	mask := len(t.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch sl := &t.slots[i]; sl.hash {
		case 0:
			return i, false
		case h:
			if sl.id == id {
				return i, true
			}
		}
	}
}

// getHashed returns the offset id (of hash h, not 0) was applied at, if
// the table holds it.
func (t *idTable) getHashed(h uint64, id string) (int64, bool) {
	if t.n == 0 {
		return 0, false
	}
	i, ok := t.find(h, id)
	if !ok {
		return 0, false
	}
	return t.slots[i].off, true
}

// raiseHashed records that id (of hash h, not 0) was applied at off: the
// table keeps the highest offset of each ID.
func (t *idTable) raiseHashed(h uint64, id string, off int64) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	i, ok := t.find(h, id)
	if ok {
		if off > t.slots[i].off {
			t.slots[i].off = off
		}
		return
	}
	t.slots[i] = slot{hash: h, off: off, id: id}
	t.n++
}

// removeHashed removes id (of hash h, not 0) if the offset it holds is
// off (a row holding id at off is pruned; a later application of id
// keeps it).
func (t *idTable) removeHashed(h uint64, id string, off int64) {
	if t.n == 0 {
		return
	}
	i, ok := t.find(h, id)
	if !ok || t.slots[i].off != off {
		return
	}
	mask := len(t.slots) - 1
	// Backward shift: move each following slot of the run back into the
	// hole unless its home is cyclically in (hole, slot].
	for j := (i + 1) & mask; t.slots[j].hash != 0; j = (j + 1) & mask {
		home := int(t.slots[j].hash) & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}

func (t *idTable) grow() {
	old := t.slots
	t.slots = make([]slot, max(2*len(old), 1024))
	mask := len(t.slots) - 1
	for _, sl := range old {
		if sl.hash == 0 {
			continue
		}
		i := int(sl.hash) & mask
		for t.slots[i].hash != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = sl
	}
}

// reserve grows the table, if need be, so that n more IDs fit without a
// growth between them (a growth moves every slot: the home slots touch
// loaded would be stale).
func (t *idTable) reserve(n int) {
	for (t.n+n)*4 > len(t.slots)*3 {
		t.grow()
	}
}

// touch reads the home slot of each hash in hs: independent loads, whose
// cache misses the CPU overlaps, so that the probes that follow find
// their lines loaded instead of missing one after another (the tables of
// a busy scope hold tens of thousands of IDs, far beyond the CPU's
// caches). It returns a value made of what it read, for the caller to
// keep, so that the loads are not optimized away.
func (t *idTable) touch(hs []uint64) uint64 {
	if len(t.slots) == 0 {
		return 0
	}
	mask := len(t.slots) - 1
	var x uint64
	for _, h := range hs {
		x += t.slots[int(h)&mask].hash
	}
	return x
}

// len returns how many IDs the table holds.
func (t *idTable) len() int { return t.n }
