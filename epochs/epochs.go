// Package epochs defines the fencing token of workrouter: who holds a
// partition, and since which group epoch.
//
// A [Token] is captured once per ownership tenure, in the consumer group's
// assignment callback, from the group generation (classic protocol) or the
// member epoch (KIP-848) at the moment the member was handed the partition.
// It stays fixed for the whole tenure, even when later rebalances bump the
// generation while the member keeps the partition. It is never built from a
// clock.
//
// Ordering rules (docs/design.md#token), per [Scope]:
//
//   - a token may claim a scope if its Epoch is greater than the stored
//     holder's, or if the Epoch is equal and the Member is the same
//     (a re-claim by the same tenure is idempotent) — see [Token.CanClaim];
//   - a write is accepted only if the stored holder equals the offered token
//     exactly — see [Token.Holds].
//
// The package also carries a compact binary codec so that a token can travel
// downstream ([Token.Header], [FromHeader]): in a Kafka record header, with
// a follow-up command (envelope.Command.Upstream), and in an HTTP header, to
// a service that checks it itself (package fencehttp).
//
// Every function and method in this package is safe to call from any
// goroutine; tokens are plain values.
package epochs

import (
	"fmt"
	"strconv"
)

// Scope is what a token fences: one partition of one topic as consumed by
// one consumer group. Sinks store one holder per scope.
type Scope struct {
	Group     string
	Topic     string
	Partition int32
}

// String returns "group/topic/partition".
func (s Scope) String() string {
	return s.Group + "/" + s.Topic + "/" + strconv.FormatInt(int64(s.Partition), 10)
}

// Validate reports whether the scope names a group, a topic and a
// non-negative partition. The returned error matches [ErrInvalidToken].
func (s Scope) Validate() error {
	switch {
	case s.Group == "":
		return fmt.Errorf("%w: empty group", ErrInvalidToken)
	case s.Topic == "":
		return fmt.Errorf("%w: empty topic", ErrInvalidToken)
	case s.Partition < 0:
		return fmt.Errorf("%w: negative partition %d", ErrInvalidToken, s.Partition)
	}
	return nil
}

// Token is the fencing token of one ownership tenure.
//
// Epoch is the group generation (classic protocol) or the member epoch
// (KIP-848) at which Member was assigned the partition. Member is the group
// member ID the coordinator gave the holder.
type Token struct {
	Group     string
	Topic     string
	Partition int32
	Epoch     int32
	Member    string
}

// Scope returns the scope the token fences.
func (t Token) Scope() Scope {
	return Scope{Group: t.Group, Topic: t.Topic, Partition: t.Partition}
}

// IsZero reports whether t is the zero token (no holder).
func (t Token) IsZero() bool { return t == Token{} }

// Validate reports whether t can be offered to a sink: a valid scope, a
// non-negative epoch and a non-empty member. The returned error matches
// [ErrInvalidToken].
func (t Token) Validate() error {
	if err := t.Scope().Validate(); err != nil {
		return err
	}
	if t.Epoch < 0 {
		return fmt.Errorf("%w: negative epoch %d", ErrInvalidToken, t.Epoch)
	}
	if t.Member == "" {
		return fmt.Errorf("%w: empty member", ErrInvalidToken)
	}
	return nil
}

// String returns a compact human-readable form,
// "group/topic/partition@epoch(member)".
func (t Token) String() string {
	return t.Scope().String() + "@" + strconv.FormatInt(int64(t.Epoch), 10) + "(" + t.Member + ")"
}

// CanClaim reports whether t may take the scope over from holder, the token
// a sink has stored for the same scope. A zero holder (the scope was never
// claimed) can always be taken over. Otherwise t must carry a greater epoch,
// or the same epoch and the same member (re-claim by the same tenure).
//
// An equal epoch with a different member is refused: within one epoch the
// coordinator gives a partition to one member only, so a second member at
// the same epoch is either a static-membership replacement racing its
// zombie (docs/design.md#hazard-1) or a bug; the first claimer keeps the scope.
func (t Token) CanClaim(holder Token) bool {
	if holder.IsZero() {
		return true
	}
	if t.Epoch != holder.Epoch {
		return t.Epoch > holder.Epoch
	}
	return t.Member == holder.Member
}

// Holds reports whether holder, the token a sink has stored, is exactly t:
// the condition for accepting a write made under t.
func (t Token) Holds(holder Token) bool { return t == holder }
