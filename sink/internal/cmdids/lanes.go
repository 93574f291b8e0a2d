package cmdids

import "github.com/workrouter/workrouter/epochs"

// The lanes of a checkpoint with gaps (sink.Features.Gaps) record their IDs
// without bumping the fence row's IDs version (a lane must not update the
// fence row), so the cache follows them differently: a lane adds the row
// it committed to the cache whatever version the cache holds (Add), and
// looks IDs up in a cache at the version it read or a later one
// (LookupSince). Both are exact enough for lanes because the lanes of a
// tenure run in one process: the table changes under the cache only
// through this process's lanes (which Add), or through a writer that
// bumps the version (a serial Apply with IDs, a claim, a compaction that
// prunes), after which a cache at an older version is reloaded.

// LookupSince is Lookup for a lane: it answers from a cache of scope at
// version or any later one (a later cache holds what the table held at
// version and IDs applied since, which are duplicates too). ok is false,
// and found never called, when the cache does not hold scope or holds an
// older version.
func (c *Cache) LookupSince(scope epochs.Scope, version int64, ids []string, idx []int, found func(i int, applied int64)) (ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.scopes[scope]
	if s == nil || s.version < version {
		return false
	}
	s.lookup(ids, idx, found)
	return true
}

// Add records that a lane committed row for scope, keeping the cache's
// version: a cache that does not hold scope is left alone (the next lookup
// loads the table, row included).
func (c *Cache) Add(scope epochs.Scope, row Row) {
	if len(row.IDs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.scopes[scope]; s != nil {
		s.add(row)
	}
}
