// Package cmdids is what the SQL sinks share to deduplicate by command ID
// (sink.Features.DedupeWindow, docs/design.md#command-ids): the encoding of one
// stored row of a batch's applied IDs, and the per-process cache of a
// scope's retained IDs that the sink validates, inside its atomic unit,
// against the version the fence row carries.
//
// A sink stores the IDs an Apply with IDs applied as one row (the batch's
// first and last offsets and the encoded IDs) and bumps the fence row's
// IDs version in the same conditional UPDATE that advances NextOffset.
// Inside the next Apply with IDs it reads that version with the fence: if the
// cache holds the same version, the cache is exactly what the table
// holds (every change of the table bumps the version, and the bump is
// part of the fenced compare-and-set); otherwise it reloads the scope's
// rows. So a lookup costs a map probe, and an Apply with IDs writes one row
// and deletes the rows past the horizon, whatever its batch size.
package cmdids

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/workrouter/workrouter/epochs"
)

// ErrCorrupt is matched by the error Decode returns for data it did not
// encode.
var ErrCorrupt = errors.New("cmdids: corrupt command ID row")

// Encode returns the stored form of the IDs ids, applied at offs (in
// ascending order, each at or above first): for each ID, its offset's
// distance from first and the ID, either a canonical UUID (36 bytes of
// lowercase hex and dashes) packed into its 16 bytes, or, when it shares
// at least minShared leading bytes with the previous ID of the row, the
// length of that shared prefix and the rest (front coding: the IDs
// package router generates share a 27-byte prefix and differ in a
// counter, so a batch of them takes about 4 bytes an ID instead of 37),
// or the ID as it is. It may be called from any goroutine.
func Encode(first int64, offs []int64, ids []string) []byte {
	n := 0
	for _, id := range ids {
		n += len(id) + 2*binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	prev := ""
	for i, id := range ids {
		b = binary.AppendUvarint(b, uint64(offs[i]-first))
		if u, ok := packUUID(id); ok {
			b = binary.AppendUvarint(b, 1) // a packed UUID
			b = append(b, u[:]...)
		} else if p := sharedPrefix(prev, id); p >= minShared {
			b = binary.AppendUvarint(b, uint64(len(id)-p)<<2|3) // front-coded
			b = binary.AppendUvarint(b, uint64(p))
			b = append(b, id[p:]...)
		} else {
			b = binary.AppendUvarint(b, uint64(len(id))<<1)
			b = append(b, id...)
		}
		prev = id
	}
	return b
}

// minShared is the shortest shared prefix Encode front-codes: below it,
// the prefix's length would cost about what it saves.
const minShared = 4

// sharedPrefix returns the length of the longest common prefix of a and b.
func sharedPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// packUUID returns the 16 bytes of id if it is a canonical UUID (so that
// unpackUUID gives id back exactly).
func packUUID(id string) (u [16]byte, ok bool) {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return u, false
	}
	k := 0
	for i := 0; i < 36; i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i--
			continue
		}
		hi, ok1 := lowerHex(id[i])
		lo, ok2 := lowerHex(id[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[k] = hi<<4 | lo
		k++
	}
	return u, k == 16
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// unpackUUID returns the canonical text of u.
func unpackUUID(u []byte) string {
	const hexd = "0123456789abcdef"
	var b [36]byte
	k := 0
	for i := 0; i < 36; i++ {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			b[i] = '-'
			continue
		}
		nib := u[k/2] >> 4
		if k%2 == 1 {
			nib = u[k/2] & 0x0f
		}
		b[i] = hexd[nib]
		k++
	}
	return string(b[:])
}

// Decode returns the offsets and IDs data, encoded with first, holds. Its
// check is structural, not canonical: it fails with an error matching
// ErrCorrupt for data it cannot parse (a cut varint, an ID longer than
// what is left, a front-coded ID with no ID before it or a prefix longer
// than that ID), and accepts some data Encode would not write (varints
// longer than needed, a UUID stored as text, offsets out of order); what
// it returns then is what the data spells. The sinks decode only rows
// they wrote. It may be called from any goroutine.
func Decode(first int64, data []byte) (offs []int64, ids []string, err error) {
	for len(data) > 0 {
		d, n := binary.Uvarint(data)
		if n <= 0 {
			return nil, nil, fmt.Errorf("%w: bad offset", ErrCorrupt)
		}
		data = data[n:]
		h, n := binary.Uvarint(data)
		if n <= 0 {
			return nil, nil, fmt.Errorf("%w: bad ID header", ErrCorrupt)
		}
		data = data[n:]
		var id string
		switch {
		case h == 1:
			if len(data) < 16 {
				return nil, nil, fmt.Errorf("%w: short UUID", ErrCorrupt)
			}
			id, data = unpackUUID(data[:16]), data[16:]
		case h&1 == 0 && uint64(len(data)) >= h>>1:
			id, data = string(data[:h>>1]), data[h>>1:]
		case h&3 == 3:
			p, n := binary.Uvarint(data)
			if n <= 0 || len(ids) == 0 || p > uint64(len(ids[len(ids)-1])) || uint64(len(data[n:])) < h>>2 {
				return nil, nil, fmt.Errorf("%w: bad front-coded ID", ErrCorrupt)
			}
			data = data[n:]
			id, data = ids[len(ids)-1][:p]+string(data[:h>>2]), data[h>>2:]
		default:
			return nil, nil, fmt.Errorf("%w: bad ID length", ErrCorrupt)
		}
		offs = append(offs, first+int64(d))
		ids = append(ids, id)
	}
	return offs, ids, nil
}

// Row is one stored row: the IDs one Apply with IDs applied.
type Row struct {
	Last int64 // the highest offset of Offs: the row is pruned when it is below the horizon
	Offs []int64
	IDs  []string
}

// rowHeap orders rows by Last, lowest first.
type rowHeap []Row

func (h rowHeap) Len() int           { return len(h) }
func (h rowHeap) Less(i, j int) bool { return h[i].Last < h[j].Last }
func (h rowHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *rowHeap) Push(x any)        { *h = append(*h, x.(Row)) }
func (h *rowHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}

// scopeIDs is the cached state of one scope: its rows and, for each ID,
// the highest offset it was applied at among them.
type scopeIDs struct {
	version int64
	at      idTable
	rows    rowHeap

	hs      []uint64 // scratch: the hashes of the IDs a call works on
	touched uint64   // what idTable.touch read, kept so its loads stay
}

// hashes hashes ids (those at idx, or all of them if idx is nil) into
// s.hs and touches their home slots (idTable.touch).
func (s *scopeIDs) hashes(ids []string, idx []int) []uint64 {
	hs := s.hs[:0]
	if idx == nil {
		for _, id := range ids {
			hs = append(hs, s.at.hashOf(id))
		}
	} else {
		for _, i := range idx {
			hs = append(hs, s.at.hashOf(ids[i]))
		}
	}
	s.hs = hs
	s.touched += s.at.touch(hs)
	return hs
}

// lookup calls found for each of ids at idx that the table holds.
func (s *scopeIDs) lookup(ids []string, idx []int, found func(i int, applied int64)) {
	if s.at.len() == 0 {
		return
	}
	hs := s.hashes(ids, idx)
	for k, i := range idx {
		if p, ok := s.at.getHashed(hs[k], ids[i]); ok {
			found(i, p)
		}
	}
}

func (s *scopeIDs) add(r Row) {
	s.at.reserve(len(r.IDs))
	hs := s.hashes(r.IDs, nil)
	for i, id := range r.IDs {
		s.at.raiseHashed(hs[i], id, r.Offs[i])
	}
	heap.Push(&s.rows, r)
}

// prune drops the rows whose Last is below horizon, as the sink's DELETE
// does.
func (s *scopeIDs) prune(horizon int64) {
	for len(s.rows) > 0 && s.rows[0].Last < horizon {
		r := heap.Pop(&s.rows).(Row)
		if s.at.len() == 0 {
			continue
		}
		hs := s.hashes(r.IDs, nil)
		for i, id := range r.IDs {
			s.at.removeHashed(hs[i], id, r.Offs[i])
		}
	}
}

// Cache is the retained command IDs of the scopes a sink has applied
// with, each labelled with the fence's IDs version it mirrors. The zero
// value is empty and ready. Its methods may be called from any goroutine.
type Cache struct {
	mu     sync.Mutex
	scopes map[epochs.Scope]*scopeIDs
}

// Lookup reports, when the cache holds scope at version, the offset each
// of ids (at the indexes idx) was applied at, calling found for each ID
// it holds; ok is false (and found never called) when the cache does
// not hold scope at version: the caller loads it.
func (c *Cache) Lookup(scope epochs.Scope, version int64, ids []string, idx []int, found func(i int, applied int64)) (ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.scopes[scope]
	if s == nil || s.version != version {
		return false
	}
	s.lookup(ids, idx, found)
	return true
}

// Load replaces scope's cached state with rows, as of version.
func (c *Cache) Load(scope epochs.Scope, version int64, rows []Row) {
	s := &scopeIDs{version: version}
	for _, r := range rows {
		s.add(r)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scopes == nil {
		c.scopes = make(map[epochs.Scope]*scopeIDs)
	}
	c.scopes[scope] = s
}

// Committed records that an Apply with IDs that read scope at version
// committed: it added row (if it holds IDs), pruned below horizon if
// prune, and moved the version to version+1. A cache that does not hold scope at
// version is left alone (the next Apply with IDs loads it).
func (c *Cache) Committed(scope epochs.Scope, version int64, row Row, prune bool, horizon int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.scopes[scope]
	if s == nil || s.version != version {
		return
	}
	if len(row.IDs) > 0 {
		s.add(row)
	}
	if prune {
		s.prune(horizon)
	}
	s.version = version + 1
}

// Drop forgets scope (after an attempt that loaded it failed: what it
// loaded may be newer than the version it was labelled with).
func (c *Cache) Drop(scope epochs.Scope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.scopes, scope)
}

// Len returns how many IDs the cache holds for scope (0 if none).
func (c *Cache) Len(scope epochs.Scope) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.scopes[scope]; s != nil {
		return s.at.len()
	}
	return 0
}

// Version returns the IDs version the cache holds scope at, and false if
// it does not hold scope.
func (c *Cache) Version(scope epochs.Scope) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.scopes[scope]; s != nil {
		return s.version, true
	}
	return 0, false
}
