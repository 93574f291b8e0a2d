package memory

import (
	"slices"
	"strings"
)

// read is what a Tx saw of one committed key, kept so that repeated reads
// agree and so that the commit can check the key has not moved since.
type read struct {
	ver  uint64
	val  []byte
	live bool
}

// write is one buffered write of a Tx.
type write struct {
	val     []byte
	deleted bool
}

// Tx is the transaction handle a [Sink] passes to effects: a private write
// set over the sink's committed key-value data. Reads see the Tx's own
// writes, then committed data; the keys and prefixes a Tx reads are
// remembered, and the Apply that owns it commits it only if none of them
// has changed in the meantime (otherwise the effects are run again on a
// fresh Tx).
//
// A Tx is valid only during the effect calls of the Apply attempt that
// created it, and only on the goroutine that called the effect: it is not
// safe for concurrent use, and using it after the effect returned panics.
type Tx struct {
	s      *Sink
	reads  map[string]read
	scans  map[string][]string // prefix -> committed live keys seen
	writes map[string]write
	done   bool
}

func (tx *Tx) check() {
	if tx.done {
		panic("memory: Tx used after its Apply attempt ended")
	}
}

// Get returns a copy of the value of key as this transaction sees it (its
// own writes first, then committed data) and whether the key exists. Call it
// only from the effect's goroutine during the effect.
func (tx *Tx) Get(key string) ([]byte, bool) {
	tx.check()
	if w, ok := tx.writes[key]; ok {
		if w.deleted {
			return nil, false
		}
		return slices.Clone(w.val), true
	}
	r := tx.readCommitted(key)
	if !r.live {
		return nil, false
	}
	return slices.Clone(r.val), true
}

// readCommitted returns what tx has seen of key in committed data, reading
// it (and remembering it) the first time.
func (tx *Tx) readCommitted(key string) read {
	if r, ok := tx.reads[key]; ok {
		return r
	}
	tx.s.mu.RLock()
	var r read
	if e := tx.s.data[key]; e != nil {
		r = read{ver: e.ver, val: e.val, live: e.live}
	}
	tx.s.mu.RUnlock()
	if tx.reads == nil {
		tx.reads = make(map[string]read)
	}
	tx.reads[key] = r
	return r
}

// Put buffers key=value in the transaction; it is committed with the batch.
// value is copied. Call it only from the effect's goroutine during the
// effect.
func (tx *Tx) Put(key string, value []byte) {
	tx.check()
	if tx.writes == nil {
		tx.writes = make(map[string]write)
	}
	tx.writes[key] = write{val: slices.Clone(value)}
}

// Delete buffers the removal of key in the transaction. Deleting a key that
// does not exist is not an error. Call it only from the effect's goroutine
// during the effect.
func (tx *Tx) Delete(key string) {
	tx.check()
	if tx.writes == nil {
		tx.writes = make(map[string]write)
	}
	tx.writes[key] = write{deleted: true}
}

// Keys returns the keys that start with prefix as this transaction sees
// them (committed keys plus its own puts, minus its own deletes), sorted.
// Call it only from the effect's goroutine during the effect.
func (tx *Tx) Keys(prefix string) []string {
	tx.check()
	committed, ok := tx.scans[prefix]
	if !ok {
		tx.s.mu.RLock()
		committed = tx.s.keysLocked(prefix)
		tx.s.mu.RUnlock()
		if tx.scans == nil {
			tx.scans = make(map[string][]string)
		}
		tx.scans[prefix] = committed
	}
	set := make(map[string]bool, len(committed))
	for _, k := range committed {
		set[k] = true
	}
	for k, w := range tx.writes {
		if strings.HasPrefix(k, prefix) {
			set[k] = !w.deleted
		}
	}
	keys := make([]string, 0, len(set))
	for k, live := range set {
		if live {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
