// Package memstore is an in-process fencehttp.Store, for tests: the
// tokens and the results live in the Store value and are lost with it.
// A unit holds the whole store until it ends (requests run one at a
// time), so a handler's in-memory write made inside the unit is as atomic
// with the check as the unit is. It is not the resource's database: see
// docs/fenced-resources.md for what such a store can promise.
package memstore

import (
	"context"
	"sync"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
)

// Store is an in-memory fencehttp.Store. The zero value is not usable;
// call New. Its methods may be called from any goroutine.
type Store struct {
	sem chan struct{} // held by the open unit

	mu      sync.Mutex // guards the maps, for Token and Recorded
	holders map[epochs.Scope]epochs.Token
	results map[resultKey]fencehttp.Result
}

type resultKey struct{ group, key string }

// New returns an empty Store.
func New() *Store {
	return &Store{sem: make(chan struct{}, 1), holders: map[epochs.Scope]epochs.Token{}, results: map[resultKey]fencehttp.Result{}}
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
	if held := s.holders[tok.Scope()]; !tok.CanClaim(held) {
		<-s.sem
		return nil, nil, &fencehttp.FencedError{Stored: held, Presented: tok}
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

var _ fencehttp.Store = (*Store)(nil)
