// Package memstore is an in-process fencehttp.Store, for tests: the
// tokens and the results live in the Store value and are lost with it.
// A unit holds the whole store until it ends (requests run one at a
// time), so a handler's in-memory write made inside the unit is as atomic
// with the check as the unit is. It is not the resource's database: see
// docs/fenced-resources.md for what such a store can promise.
package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
)

// Store is an in-memory fencehttp.Store. The zero value is not usable;
// call New. Its methods may be called from any goroutine.
type Store struct {
	sem chan struct{} // held by the open unit

	mu      sync.Mutex // guards the maps, for Token and Recorded
	holders map[epochs.Scope]epochs.Token
	floors  map[epochs.Scope]int32 // scopes ever reset
	resets  map[epochs.Scope][]fencehttp.ResetEntry
	seq     int64
	results map[resultKey]fencehttp.Result
}

type resultKey struct{ group, key string }

// New returns an empty Store.
func New() *Store {
	return &Store{sem: make(chan struct{}, 1), holders: map[epochs.Scope]epochs.Token{}, floors: map[epochs.Scope]int32{},
		resets: map[epochs.Scope][]fencehttp.ResetEntry{}, results: map[resultKey]fencehttp.Result{}}
}

// state returns scope's state; s.mu is held.
func (s *Store) state(scope epochs.Scope) fencehttp.ScopeState {
	st := fencehttp.ScopeState{Scope: scope, Token: s.holders[scope], Floor: fencehttp.NoFloor}
	if f, ok := s.floors[scope]; ok {
		st.Floor = f
	}
	return st
}

// Begin implements fencehttp.Store. It waits for the open unit, if any,
// until ctx ends.
func (s *Store) Begin(ctx context.Context, tok epochs.Token, key string) (fencehttp.Unit, *fencehttp.Result, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.state(tok.Scope()); !st.Admits(tok) {
		<-s.sem
		return nil, nil, st.Refusal(tok)
	}
	s.holders[tok.Scope()] = tok
	k := resultKey{tok.Group, key}
	if r, ok := s.results[k]; ok {
		<-s.sem
		r.Header = r.Header.Clone()
		return nil, &r, nil
	}
	return &unit{s: s, k: k}, nil, nil
}

// Token returns the token stored for scope (zero if none).
func (s *Store) Token(scope epochs.Scope) epochs.Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holders[scope]
}

// State implements fencehttp.ScopeResetter.
func (s *Store) State(_ context.Context, scope epochs.Scope) (fencehttp.ScopeState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state(scope), nil
}

// ResetScope implements fencehttp.ScopeResetter. It waits for the open
// unit, if any, until ctx ends, so that a request open on the scope ends
// before the reset compares the state.
func (s *Store) ResetScope(ctx context.Context, req fencehttp.ResetRequest) (fencehttp.ScopeState, error) {
	if err := req.Validate(); err != nil {
		return fencehttp.ScopeState{}, err
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return fencehttp.ScopeState{}, ctx.Err()
	}
	defer func() { <-s.sem }()
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.state(req.Scope)
	if before != req.Expect {
		return before, fmt.Errorf("%w: %s is now %s, not %s", fencehttp.ErrResetConflict, req.Scope, before, req.Expect)
	}
	after := before.AfterReset(req)
	s.holders[req.Scope], s.floors[req.Scope] = after.Token, after.Floor
	s.seq++
	s.resets[req.Scope] = append(s.resets[req.Scope], fencehttp.ResetEntry{Seq: s.seq, Before: before, After: after,
		Reason: req.Reason, Detail: req.Detail, At: time.Now()})
	return before, nil
}

// Resets implements fencehttp.ScopeResetter.
func (s *Store) Resets(_ context.Context, scope epochs.Scope) ([]fencehttp.ResetEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]fencehttp.ResetEntry(nil), s.resets[scope]...), nil
}

// Recorded returns how many results the store has recorded.
func (s *Store) Recorded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.results)
}

type unit struct {
	s    *Store
	k    resultKey
	done bool
}

func (u *unit) Context(ctx context.Context) context.Context { return ctx }

func (u *unit) Commit(_ context.Context, res fencehttp.Result) error {
	if u.done {
		return nil
	}
	u.done = true
	u.s.mu.Lock()
	u.s.results[u.k] = fencehttp.Result{Status: res.Status, Header: res.Header.Clone(), Body: append([]byte(nil), res.Body...)}
	u.s.mu.Unlock()
	<-u.s.sem
	return nil
}

func (u *unit) Abort(context.Context) error {
	if !u.done {
		u.done = true
		<-u.s.sem
	}
	return nil
}

var (
	_ fencehttp.Store         = (*Store)(nil)
	_ fencehttp.ScopeResetter = (*Store)(nil)
)
