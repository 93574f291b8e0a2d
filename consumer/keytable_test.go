package consumer

import (
	"strconv"
	"testing"
)

// TestKeyTableBindsWhilePendingThenLeastLoaded: a key stays on its lane
// while it has records pending there, even when that lane is the busiest;
// a free key goes to the lane with the fewest pending records (the first
// of them on a tie); the entries go once every record is released;
// records without a key share one entry.
func TestKeyTableBindsWhilePendingThenLeastLoaded(t *testing.T) {
	t.Parallel()
	k := newKeyTable(3)
	bind := func(key string) int {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.bind(k.hash([]byte(key)))
	}
	a, b, c := k.hash([]byte("a")), k.hash([]byte("b")), k.hash([]byte("c"))
	if got := []int{bind("a"), bind("a"), bind("b"), bind("c"), bind("a")}; got[0] != 0 || got[1] != 0 || got[2] != 1 || got[3] != 2 || got[4] != 0 {
		t.Fatalf("lanes %v, want a on 0 (three times: bound while pending), b on 1, c on 2", got)
	}
	// Loads 3, 1, 1: a free key goes to lane 1 (the first of the least).
	if l := bind("d"); l != 1 {
		t.Fatalf("d on lane %d, want 1", l)
	}
	k.release(1, []uint64{b})
	// b is free: lane 1 has d's record, lane 2 c's: b goes to the first of them.
	if l := bind("b"); l != 1 {
		t.Fatalf("b after its release on lane %d, want 1", l)
	}
	k.release(0, []uint64{a, a})
	if l := bind("a"); l != 0 {
		t.Fatalf("a with one record pending on lane %d, want its lane 0 (lane 0 has load 1, not the least)", l)
	}
	k.release(0, []uint64{a, a})
	if l := bind("a"); l != 0 {
		t.Fatalf("free a on lane %d, want the empty lane 0", l)
	}
	if keys, recs := k.pending(); keys != 4 || recs != 4 {
		t.Fatalf("pending %d keys, %d records; want 4 keys (a b c d), one record each", keys, recs)
	}
	k.release(0, []uint64{a})
	k.release(1, []uint64{b, k.hash([]byte("d"))})
	k.release(2, []uint64{c})
	if keys, recs := k.pending(); keys != 0 || recs != 0 || len(k.keys) != 0 {
		t.Fatalf("pending %d keys, %d records after every release; want none", keys, recs)
	}
	// Keyless records (nil and empty keys) are one key.
	if k.hash(nil) != k.hash([]byte{}) {
		t.Fatal("nil and empty keys hash apart")
	}
	l1 := bind("")
	bind("x")
	bind("y")
	if l := bind(""); l != l1 {
		t.Fatalf("keyless records on lanes %d and %d, want one", l1, l)
	}
}

// BenchmarkKeyTable is the dispatcher's and the lanes' cost per record:
// one bind (under the lock, per batch of 64) and one release (per batch of
// 16, a lane's), over 100 keys and 16 lanes.
func BenchmarkKeyTable(b *testing.B) {
	k := newKeyTable(16)
	keys := make([][]byte, 100)
	for i := range keys {
		keys[i] = []byte("key-" + strconv.Itoa(i))
	}
	byLane := make([][]uint64, 16)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k.mu.Lock()
		for j := range 64 {
			h := k.hash(keys[(i*64+j)%len(keys)])
			l := k.bind(h)
			byLane[l] = append(byLane[l], h)
		}
		k.mu.Unlock()
		for l, hs := range byLane {
			for len(hs) >= 16 {
				k.release(l, hs[:16])
				hs = hs[16:]
			}
			byLane[l] = append(byLane[l][:0], hs...)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/record")
}
