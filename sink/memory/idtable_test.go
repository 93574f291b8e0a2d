package memory

import (
	"math/rand/v2"
	"testing"
)

// TestIDSetMatchesModel records, prunes and looks up random keys in an
// idSet and in a model (a Go map of each key's latest entry and a queue
// of every entry), and checks after every step that both say the same:
// the backward-shift deletion must never hide a key behind a hole, nor
// keep one it deleted; a superseded entry must not delete its key's
// newer one; a hint must land the key where a full probe would find it,
// also when other keys were recorded, slots deleted or the index grown
// since find gave it. Keys come from a small range of few distinct home
// bits, so that runs of colliding slots and tags form and wrap around the
// table's end, and some keys share their first word (the tag) but not
// the second.
func TestIDSetMatchesModel(t *testing.T) {
	type entry struct {
		key idKey
		off int64
		seq int
	}
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		set := idSet{window: int64(seed%3) * 400} // 0: doubling only; else jumps to a window's size
		latest := map[idKey]entry{}
		var queue []entry
		seq := 0
		key := func() idKey {
			return idKey{uint64(r.IntN(200)) * 0x9E3779B97F4A7C15 >> uint(r.IntN(3)), uint64(r.IntN(4))}
		}
		type pending struct {
			key   idKey
			hint  int
			moves uint64
		}
		var hinted []pending // found, not recorded yet
		var off int64
		for step := range 6000 {
			switch op := r.IntN(10); {
			case op < 4: // find now, record later
				k := key()
				if r.IntN(4) == 0 {
					set.reserve(r.IntN(40))
				}
				_, hint, _ := set.find(k)
				hinted = append(hinted, pending{k, hint, set.moves})
			case op < 8: // record: a pending hint, or none
				var p pending
				if len(hinted) > 0 && r.IntN(3) > 0 {
					j := r.IntN(len(hinted))
					p = hinted[j]
					hinted = append(hinted[:j], hinted[j+1:]...)
				} else {
					p = pending{key(), noHint, 0}
				}
				off += int64(r.IntN(3))
				if r.IntN(20) == 0 {
					off -= int64(r.IntN(30)) // a reset onto a lower log, lanes out of order
				}
				set.record(p.key, off, p.hint, p.moves)
				e := entry{p.key, off, seq}
				seq++
				latest[p.key] = e
				queue = append(queue, e)
			default:
				horizon := off - int64(r.IntN(60))
				set.prune(horizon)
				for len(queue) > 0 && queue[0].off < horizon {
					e := queue[0]
					queue = queue[1:]
					if latest[e.key] == e {
						delete(latest, e.key)
					}
				}
			}
			if set.len() != len(latest) {
				t.Fatalf("seed %d step %d: len %d, model %d", seed, step, set.len(), len(latest))
			}
			if got := int(set.tail - set.head); got != len(queue) {
				t.Fatalf("seed %d step %d: queue %d, model %d", seed, step, got, len(queue))
			}
			for k, e := range latest {
				if v, ok := set.get(k); !ok || v != e.off {
					t.Fatalf("seed %d step %d: get(%v) = %d, %v; model %d", seed, step, k, v, ok, e.off)
				}
			}
			if _, ok := set.get(idKey{1, 99}); ok {
				t.Fatalf("seed %d step %d: a key never recorded is found", seed, step)
			}
		}
	}
}

// TestSeenSet checks that a seenSet reports the keys added since its
// last reset, and only those, across resets of varying size; keys share
// their second word (the bucket) but not their first, so that chains
// form.
func TestSeenSet(t *testing.T) {
	var s seenSet
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		n := r.IntN(round + 2)
		keys := make([]idKey, n+3)
		for i := range keys {
			keys[i] = idKey{uint64(r.IntN(50)), uint64(r.IntN(50))}
		}
		first := r.IntN(4)
		s.reset(len(keys)-first, len(keys))
		model := map[idKey]bool{}
		for i := first; i < len(keys); i++ {
			k := keys[i]
			if got := s.add(keys, i); got != model[k] {
				t.Fatalf("round %d: add(%v) = %v, want %v", round, k, got, model[k])
			}
			model[k] = true
		}
	}
}

// TestGrownSize: tables double (from 64), and jump to the size that holds
// full once that is at most eight times as much, never to less than need.
func TestGrownSize(t *testing.T) {
	for _, c := range []struct {
		size, need int
		full       int64
		want       int
	}{
		{0, 2, 0, 64},
		{64, 66, 0, 128},
		{64, 600, 0, 1024},
		{1 << 13, 1<<13 + 2, 200000, 1 << 14}, // 8×2^14 is less than 200000
		{1 << 14, 1<<14 + 2, 200000, 1 << 18}, // 8×2^15 is not: to 2^18 at once
		{1 << 18, 1<<18 + 2, 200000, 1 << 19}, // past full: doubling
		{1 << 15, 1 << 20, 200000, 1 << 20},   // need first
		{64, 66, 100, 128},                    // full within the first doubling
	} {
		if got := grownSize(c.size, c.need, c.full); got != c.want {
			t.Errorf("grownSize(%d, %d, %d) = %d, want %d", c.size, c.need, c.full, got, c.want)
		}
	}
}
