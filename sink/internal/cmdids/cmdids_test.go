package cmdids

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/epochs"
)

func TestEncodeDecode(t *testing.T) {
	offs := []int64{100, 101, 1000, 1001, 1002, 1003}
	ids := []string{"a", "", "0123456789abcdef-long-id", "6ba7b810-9dad-41d1-80b4-00c04fd430c8",
		"6BA7B810-9DAD-41D1-80B4-00C04FD430C8", "6ba7b810-9dad-41d1-80b4-00c04fd430cg"}
	got, gotIDs, err := Decode(100, Encode(100, offs, ids))
	if err != nil || !slices.Equal(got, offs) || !slices.Equal(gotIDs, ids) {
		t.Fatalf("Decode(Encode) = %v %q %v", got, gotIDs, err)
	}
	data := Encode(100, offs, ids)
	if n := len(Encode(0, []int64{0}, ids[3:4])); n != 1+1+16 {
		t.Errorf("a canonical UUID takes %d bytes, want 18 (packed)", n)
	}
	if _, _, err := Decode(100, data[:len(data)-1]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode of truncated data: %v, want ErrCorrupt", err)
	}
}

// TestFrontCoding checks that IDs sharing a prefix with the previous one,
// as the router's do, are stored as the prefix's length and the rest, and
// decode back, mixed with IDs that share none and with UUIDs.
func TestFrontCoding(t *testing.T) {
	const prefix = "MFRGGZDFMZTWQ2LKNNWG23TPOA-" // the shape of a router prefix
	var offs []int64
	var ids []string
	for i := range 256 {
		offs = append(offs, int64(i))
		ids = append(ids, prefix+strconv.FormatUint(uint64(0xfff0+i), 16))
	}
	data := Encode(0, offs, ids)
	if len(data) > 256*7 {
		t.Errorf("256 IDs sharing a %d-byte prefix take %d bytes, want at most 7 each", len(prefix), len(data))
	}
	got, gotIDs, err := Decode(0, data)
	if err != nil || !slices.Equal(got, offs) || !slices.Equal(gotIDs, ids) {
		t.Fatalf("Decode(Encode) of front-coded IDs = %v %q %v", got, gotIDs, err)
	}
	mixed := []string{"abcdefgh", "abcdefgh", "abcdeXYZ", "abc", "abcd", "6ba7b810-9dad-41d1-80b4-00c04fd430c8", "6ba7b810-9dad-41d1-80b4-00c04fd430c9", "6ba7b810-zzz", "ab"}
	moffs := make([]int64, len(mixed))
	for i := range moffs {
		moffs[i] = int64(10 + i)
	}
	got, gotIDs, err = Decode(10, Encode(10, moffs, mixed))
	if err != nil || !slices.Equal(got, moffs) || !slices.Equal(gotIDs, mixed) {
		t.Fatalf("Decode(Encode) of mixed IDs = %v %q %v", got, gotIDs, err)
	}
	// A shared prefix longer than the previous ID, or with no previous
	// ID, is corrupt.
	for _, bad := range [][]byte{
		{0, 2 << 1, 'a', 'b', 1, 1<<2 | 3, 3, 'c'},
		{0, 1<<2 | 3, 0, 'c'},
	} {
		if _, _, err := Decode(0, bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Decode(%v): %v, want ErrCorrupt", bad, err)
		}
	}
}

// TestCache: the cache answers only for the version it mirrors, follows
// a committed Apply with IDs to the next version, and prunes as the sink's
// DELETE does (whole rows whose last offset is below the horizon).
func TestCache(t *testing.T) {
	var c Cache
	scope := epochs.Scope{Group: "g", Topic: "t", Partition: 0}
	lookup := func(version int64, ids ...string) (map[string]int64, bool) {
		got := map[string]int64{}
		idx := make([]int, len(ids))
		for i := range idx {
			idx[i] = i
		}
		ok := c.Lookup(scope, version, ids, idx, func(i int, p int64) { got[ids[i]] = p })
		return got, ok
	}
	if _, ok := lookup(0, "a"); ok {
		t.Fatal("an empty cache answered")
	}
	c.Load(scope, 3, []Row{{Last: 11, Offs: []int64{10, 11}, IDs: []string{"a", "b"}}})
	if _, ok := lookup(2, "a"); ok {
		t.Fatal("the cache answered for another version")
	}
	if got, ok := lookup(3, "a", "c"); !ok || len(got) != 1 || got["a"] != 10 {
		t.Fatalf("lookup at version 3 = %v, %v", got, ok)
	}
	c.Committed(scope, 3, Row{Last: 20, Offs: []int64{20}, IDs: []string{"c"}}, true, 11)
	if got, ok := lookup(4, "a", "b", "c"); !ok || len(got) != 3 {
		t.Fatalf("after a commit below the horizon 11 = %v, %v; want a, b (row last 11 kept) and c", got, ok)
	}
	c.Committed(scope, 4, Row{}, false, 12)
	if c.Len(scope) != 3 {
		t.Fatalf("a commit that does not prune pruned: %d IDs", c.Len(scope))
	}
	c.Committed(scope, 5, Row{}, true, 12)
	if got, ok := lookup(6, "a", "b", "c"); !ok || len(got) != 1 || got["c"] != 20 {
		t.Fatalf("after the horizon passed the first row = %v, %v; want c only", got, ok)
	}
	c.Committed(scope, 4, Row{Last: 30, Offs: []int64{30}, IDs: []string{"d"}}, true, 0) // a stale commit is ignored
	if got, _ := lookup(6, "d"); len(got) != 0 || c.Len(scope) != 1 {
		t.Fatalf("a commit from a stale version changed the cache: %v", got)
	}
	c.Drop(scope)
	if _, ok := lookup(6, "c"); ok {
		t.Fatal("a dropped scope answered")
	}
}

// TestIDTable checks the table against a map[string]int64 doing what
// scopeIDs did with one (the highest offset per ID, removal only at that
// offset), over random operations, once with the real hash and once with
// a hash of 5 values, so that runs wrap around the end of the table and
// distinct IDs share a hash.
func TestIDTable(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hash       func(*idTable, string) uint64
		steps, ids int
	}{
		{"maphash", (*idTable).hashOf, 200_000, 3000},
		{"5 hashes", func(_ *idTable, id string) uint64 { return uint64(len(id)%5)*0x9e3779b97f4a7c15 | 1 }, 20_000, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tab idTable
			ref := map[string]int64{}
			rng := rand.New(rand.NewPCG(1, 2))
			for step := range tc.steps {
				id := "MFRGGZDFMZTWQ2LKNNWG23TPOA-" + strconv.Itoa(rng.IntN(tc.ids)) + strings.Repeat("x", rng.IntN(7))
				off := int64(rng.IntN(100_000))
				h := tc.hash(&tab, id)
				switch rng.IntN(3) {
				case 0:
					tab.raiseHashed(h, id, off)
					if p, ok := ref[id]; !ok || off > p {
						ref[id] = off
					}
				case 1:
					if p, ok := ref[id]; ok && rng.IntN(2) == 0 {
						off = p // remove at the offset held, often
					}
					tab.removeHashed(h, id, off)
					if ref[id] == off {
						delete(ref, id)
					}
				}
				p, ok := tab.getHashed(h, id)
				if wp, wok := ref[id]; ok != wok || p != wp {
					t.Fatalf("step %d: get(%q) = %d, %v; want %d, %v", step, id, p, ok, wp, wok)
				}
				if tab.len() != len(ref) {
					t.Fatalf("step %d: len %d, want %d", step, tab.len(), len(ref))
				}
			}
			for id, wp := range ref {
				if p, ok := tab.getHashed(tc.hash(&tab, id), id); !ok || p != wp {
					t.Fatalf("get(%q) = %d, %v at the end; want %d", id, p, ok, wp)
				}
			}
		})
	}
}

// BenchmarkCacheBatches is what an Apply with IDs of a busy scope asks of the
// cache: a lookup of a batch of 256 new IDs, then the batch committed
// with a prune that keeps the window at about 100,000 IDs, over 12 scopes
// in turn (a worker's partitions), so that the tables are far larger
// than the CPU's caches. ns/op is per batch.
func BenchmarkCacheBatches(b *testing.B) {
	const (
		scopes = 12
		batch  = 256
		window = 100_000
		prefix = "MFRGGZDFMZTWQ2LKNNWG23TPOA-"
	)
	var c Cache
	next := make([]int64, scopes)
	for p := range scopes {
		c.Load(epochs.Scope{Group: "g", Topic: "t", Partition: int32(p)}, 0, nil)
	}
	idx := make([]int, batch)
	for i := range idx {
		idx[i] = i
	}
	version := make([]int64, scopes)
	run := func() {
		for p := range scopes {
			scope := epochs.Scope{Group: "g", Topic: "t", Partition: int32(p)}
			offs := make([]int64, batch)
			ids := make([]string, batch)
			for i := range batch {
				offs[i] = next[p] + int64(i)
				ids[i] = prefix + strconv.Itoa(p) + "-" + strconv.FormatInt(offs[i], 16)
			}
			next[p] += batch
			if !c.Lookup(scope, version[p], ids, idx, func(int, int64) { b.Fatal("a new ID found") }) {
				b.Fatal("the cache lost the scope")
			}
			c.Committed(scope, version[p], Row{Last: offs[batch-1], Offs: offs, IDs: ids}, true, next[p]-window)
			version[p]++
		}
	}
	for range window / batch { // fill every scope's window first
		run()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += scopes {
		run()
	}
}
