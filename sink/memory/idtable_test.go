package memory

import (
	"math/rand/v2"
	"testing"
)

// TestIDTableMatchesMap puts, deletes and gets random keys in an idTable
// and in a Go map, and checks after every step that both say the same:
// the backward-shift deletion must never hide a key behind a hole, nor
// keep one it deleted. Keys come from a small range, so that runs of
// colliding slots form and wrap around the table's end.
func TestIDTableMatchesMap(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		var tab idTable
		model := map[idKey]int64{}
		key := func() idKey {
			// Few distinct first words: long probe runs.
			return idKey{uint64(r.IntN(200)) * 0x9E3779B97F4A7C15 >> uint(r.IntN(3)), uint64(r.IntN(4))}
		}
		for step := range 5000 {
			k := key()
			switch r.IntN(3) {
			case 0, 1:
				off := int64(r.IntN(50))
				tab.put(k, off)
				model[k] = off
			case 2:
				off := int64(r.IntN(50))
				if v, ok := model[k]; ok && (v == off || r.IntN(2) == 0) {
					off = v
				}
				tab.deleteAt(k, off)
				if v, ok := model[k]; ok && v == off {
					delete(model, k)
				}
			}
			if tab.len() != len(model) {
				t.Fatalf("seed %d step %d: len %d, model %d", seed, step, tab.len(), len(model))
			}
			for mk, mv := range model {
				if v, ok := tab.get(mk); !ok || v != mv {
					t.Fatalf("seed %d step %d: get(%v) = %d, %v; model %d", seed, step, mk, v, ok, mv)
				}
			}
			if _, ok := tab.get(idKey{1, 99}); ok {
				t.Fatalf("seed %d step %d: a key never put is found", seed, step)
			}
		}
	}
}
