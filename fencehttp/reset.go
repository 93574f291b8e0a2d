package fencehttp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/workrouter/workrouter/epochs"
)

// NoFloor is the Floor of a scope that was never reset ([ScopeState]).
const NoFloor int32 = -1

// Errors of a scope's reset; match them with errors.Is.
var (
	// ErrBadReset is matched by the error for a malformed [ResetRequest]
	// ([ResetRequest.Validate]); nothing is changed.
	ErrBadReset = errors.New("fencehttp: bad scope reset")
	// ErrResetConflict is matched by the error of a reset whose
	// [ResetRequest.Expect] is no longer the scope's stored state: a
	// request stored a token (or another reset ran) since it was
	// inspected. Nothing is changed.
	ErrResetConflict = errors.New("fencehttp: the scope changed since it was inspected")
)

// ScopeState is what a [Store] keeps for one scope: the highest token it
// accepted and the floor of its last reset.
//
// The floor is the highest epoch of the group's previous incarnation
// (docs/fenced-resources.md, "Resetting a store's scope"). A reset stores
// the new incarnation's holder as the token, although its epoch is at or
// below the floor; while it is (the scope is [ScopeState.Pinned]), the
// store admits the stored token itself and epochs above the floor only,
// so that a member of the previous incarnation, whose epochs reach the
// floor, cannot come back through the reset. The pin lifts by itself
// once a token above the floor is stored.
type ScopeState struct {
	Scope epochs.Scope
	// Token is the stored token (zero if the store never saw the scope).
	Token epochs.Token
	// Floor is the floor of the scope's last reset, [NoFloor] if it was
	// never reset.
	Floor int32
}

// Pinned reports whether the scope is pinned by a reset: it has a floor
// and the stored token's epoch is at or below it. It may be called from
// any goroutine.
func (s ScopeState) Pinned() bool {
	return s.Floor != NoFloor && !s.Token.IsZero() && s.Token.Epoch <= s.Floor
}

// Admits reports whether a store whose state of tok's scope is s accepts
// a request made under tok. It is the rule every Store applies, inside
// its atomic unit (a store that decides in SQL or Lua states it there,
// and the conformance suite holds both to it): tok may claim the stored
// token (epochs.Token.CanClaim), and while s is [ScopeState.Pinned], tok
// is the stored token itself or its epoch is above the floor. It may be
// called from any goroutine.
func (s ScopeState) Admits(tok epochs.Token) bool {
	if !tok.CanClaim(s.Token) {
		return false
	}
	return !s.Pinned() || tok == s.Token || tok.Epoch > s.Floor
}

// Refusal returns the error a store answers a request made under tok that
// s does not admit: a *FencedError naming the stored token and, when s is
// pinned, its floor. It may be called from any goroutine.
func (s ScopeState) Refusal(tok epochs.Token) *FencedError {
	fe := &FencedError{Stored: s.Token, Presented: tok, Floor: NoFloor}
	if s.Pinned() {
		fe.Pinned, fe.Floor = true, s.Floor
	}
	return fe
}

// AfterReset returns the state that req leaves of s, the state the reset
// found: req.To as the token, and the higher of s's floor and req.Floor
// (a reset never lowers a floor: the epochs of every incarnation it was
// raised for stay refused). Every store's ResetScope stores it. It may be
// called from any goroutine.
func (s ScopeState) AfterReset(req ResetRequest) ScopeState {
	return ScopeState{Scope: s.Scope, Token: req.To, Floor: max(s.Floor, req.Floor)}
}

// String describes s for messages: its token and its floor.
func (s ScopeState) String() string {
	tok := "no token"
	if !s.Token.IsZero() {
		tok = fmt.Sprintf("token epoch %d member %s", s.Token.Epoch, s.Token.Member)
	}
	switch {
	case s.Pinned():
		return fmt.Sprintf("%s, pinned below floor %d", tok, s.Floor)
	case s.Floor != NoFloor:
		return fmt.Sprintf("%s, floor %d (lifted)", tok, s.Floor)
	}
	return tok
}

// ResetRequest is an operator's reset of one scope of a store, for a
// scope whose stored token belongs to an earlier incarnation of the group
// and refuses the current holder (docs/fenced-resources.md).
type ResetRequest struct {
	Scope epochs.Scope
	// Expect is the state the operator inspected ([ScopeResetter.State]):
	// the reset is a compare-and-set on it (token and floor), and fails
	// with [ErrResetConflict] if the scope moved.
	Expect ScopeState
	// To is the token the reset stores: the scope's holder now, as the
	// worker's sink has it.
	To epochs.Token
	// Floor is the highest epoch of the earlier incarnations, at or above
	// To's epoch: while the stored token's epoch is at or below it, only
	// the stored token and epochs above it are admitted.
	Floor int32
	// Reason says why; required, recorded.
	Reason string
	// Detail records what the operator observed, audited with the reset.
	Detail string
}

// Validate reports whether req is well formed: a valid scope, an Expect
// of the same scope with a floor of NoFloor or more, a valid To of the
// scope, a Floor at or above To's epoch, and a reason. The error matches
// [ErrBadReset]. It may be called from any goroutine.
func (req ResetRequest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadReset, req.Scope, fmt.Sprintf(format, args...))
	}
	if err := req.Scope.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadReset, err)
	}
	switch {
	case req.Expect.Scope != req.Scope:
		return bad("Expect is the state of %s", req.Expect.Scope)
	case !req.Expect.Token.IsZero() && req.Expect.Token.Scope() != req.Scope:
		return bad("Expect's token %s is of another scope", req.Expect.Token)
	case req.Expect.Floor < NoFloor:
		return bad("Expect's floor %d is below NoFloor", req.Expect.Floor)
	case req.To.Validate() != nil:
		return bad("To: %v", req.To.Validate())
	case req.To.Scope() != req.Scope:
		return bad("To %s is a token of another scope", req.To)
	case req.Floor < req.To.Epoch:
		return bad("Floor %d is below To's epoch %d: a reset pins To below its floor", req.Floor, req.To.Epoch)
	case strings.TrimSpace(req.Reason) == "":
		return bad("empty Reason: a reset needs a reason (it is recorded)")
	}
	return nil
}

// ResetEntry is one audited reset of a scope ([ScopeResetter.Resets]).
type ResetEntry struct {
	// Seq orders the resets of the scope; it only grows.
	Seq int64
	// Before is the state the reset found, After the one it stored.
	Before, After  ScopeState
	Reason, Detail string
	// At is when the store recorded the reset (informational; the
	// store's clock).
	At time.Time
}

// ScopeResetter is an optional capability of a [Store], beside the
// request path: reading a scope's state and resetting it, audited, for an
// operator (package admin's ResetResource, `workrouter fences
// reset-resource`). memstore, sqlstore and redisstore implement it.
// Discover it by type assertion. Never call ResetScope automatically: it
// lets a lower epoch in.
type ScopeResetter interface {
	// State returns the scope's stored state (a zero token and NoFloor
	// for a scope the store never saw).
	State(ctx context.Context, scope epochs.Scope) (ScopeState, error)
	// ResetScope validates req (ErrBadReset), then, in one atomic unit,
	// compares the scope's state with req.Expect (ErrResetConflict if it
	// moved), stores the state Expect.AfterReset(req) returns, and
	// appends an audited ResetEntry. A request open on the scope when it
	// runs either ends first (the reset then sees its token) or is
	// refused at its commit. It returns the state as it was.
	ResetScope(ctx context.Context, req ResetRequest) (before ScopeState, err error)
	// Resets returns the scope's resets, oldest first.
	Resets(ctx context.Context, scope epochs.Scope) ([]ResetEntry, error)
}
