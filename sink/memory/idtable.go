package memory

// idTable maps the keys of applied command IDs to the offset each was
// applied at: a flat open-addressed hash table (linear probing, deletion
// by backward shift, so no tombstones), holding no pointer. Go's map,
// under the sink's steady churn of one insert and one delete per record,
// fills with deleted slots that lengthen every probe (the cost that held
// W1 of workrouter bench under 0.9 of raw kgo); this table's probes stay
// short at a load of at most one half. Its keys are already uniform
// hashes (idKey), so a key's first word is its slot. The zero value is
// empty and ready. Its methods must be called with the sink's mu held
// (for writing, for put and deleteAt).
type idTable struct {
	slots []idSlot
	n     int // live slots
}

// idSlot is one slot: off1 is the offset + 1, 0 for an empty slot.
type idSlot struct {
	key  idKey
	off1 int64
}

// len returns the number of keys in t.
func (t *idTable) len() int { return t.n }

// get returns the offset k was applied at, and whether t holds k.
func (t *idTable) get(k idKey) (int64, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := k[0] & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.off1 == 0 {
			return 0, false
		}
		if s.key == k {
			return s.off1 - 1, true
		}
	}
}

// put records that k was applied at off (off >= 0), replacing what t
// held for k.
func (t *idTable) put(k idKey, off int64) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := k[0] & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.off1 == 0 {
			*s = idSlot{key: k, off1: off + 1}
			t.n++
			return
		}
		if s.key == k {
			s.off1 = off + 1
			return
		}
	}
}

// deleteAt removes k if t holds it at offset off (a later record of the
// same ID, at another offset, keeps it).
func (t *idTable) deleteAt(k idKey, off int64) {
	if t.n == 0 {
		return
	}
	mask := uint64(len(t.slots) - 1)
	i := k[0] & mask
	for ; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.off1 == 0 {
			return
		}
		if s.key == k {
			if s.off1 != off+1 {
				return
			}
			break
		}
	}
	// Backward shift: move up every later slot of the run whose home is
	// not cyclically in (i, j], so that no probe meets a hole early.
	for j := i; ; {
		j = (j + 1) & mask
		if t.slots[j].off1 == 0 {
			break
		}
		h := t.slots[j].key[0] & mask
		if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = idSlot{}
	t.n--
}

// grow doubles t's slots (at least 64) and re-inserts every key.
func (t *idTable) grow() {
	old := t.slots
	t.slots, t.n = make([]idSlot, max(64, 2*len(old))), 0
	for _, s := range old {
		if s.off1 != 0 {
			t.put(s.key, s.off1-1)
		}
	}
}
