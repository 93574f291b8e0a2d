package cmdids

import (
	"testing"

	"github.com/workrouter/workrouter/epochs"
)

// TestLanes: LookupSince answers from a cache at the version asked or a
// later one, not an older one; Add keeps the version and adds to a held
// scope only.
func TestLanes(t *testing.T) {
	scope := epochs.Scope{Group: "g", Topic: "t", Partition: 1}
	var c Cache
	ids := []string{"a", "b"}
	lookup := func(version int64) (map[int]int64, bool) {
		got := map[int]int64{}
		ok := c.LookupSince(scope, version, ids, []int{0, 1}, func(i int, at int64) { got[i] = at })
		return got, ok
	}
	if _, ok := lookup(0); ok {
		t.Fatal("LookupSince on an empty cache answered")
	}
	c.Add(scope, Row{Last: 5, Offs: []int64{5}, IDs: []string{"a"}})
	if _, ok := c.Version(scope); ok {
		t.Fatal("Add made a scope the cache did not hold")
	}
	c.Load(scope, 3, []Row{{Last: 1, Offs: []int64{1}, IDs: []string{"a"}}})
	if got, ok := lookup(3); !ok || len(got) != 1 || got[0] != 1 {
		t.Fatalf("LookupSince(3) = %v, %v; want a at 1", got, ok)
	}
	if got, ok := lookup(2); !ok || got[0] != 1 {
		t.Fatalf("LookupSince(2) of a cache at 3 = %v, %v; want answered", got, ok)
	}
	if _, ok := lookup(4); ok {
		t.Fatal("LookupSince(4) answered from a cache at version 3")
	}
	c.Add(scope, Row{Last: 7, Offs: []int64{6, 7}, IDs: []string{"a", "b"}})
	if v, ok := c.Version(scope); !ok || v != 3 {
		t.Fatalf("Version after Add = %d, %v; want 3", v, ok)
	}
	if got, ok := lookup(3); !ok || got[0] != 6 || got[1] != 7 {
		t.Fatalf("LookupSince(3) after Add = %v, %v; want a at 6, b at 7", got, ok)
	}
}
