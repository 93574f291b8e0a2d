// Package dlq is the dead-letter store of a sink: the optional capability
// beside the fenced write (sink.Sink.DeadLetter stores a record) that
// reads and resolves the dead letters, for `workrouter dlq`, the Kafka DLQ
// mirror and the invariant checker (docs/design.md#dead-letters).
package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// Store is an optional capability of a sink: reading and
// resolving its dead letters, for `workrouter dlq`, the Kafka DLQ mirror
// and the invariant checker. Resolving never deletes a row: it moves its
// State and appends an audit row.
type Store interface {
	// DeadLetters returns the dead letters that match f, by ID.
	DeadLetters(ctx context.Context, f Filter) ([]Letter, error)
	// ResolveDeadLetter moves dead letter id from state from to state to
	// (a compare-and-set: ErrState if it is not in from) and
	// appends an audit row with reason and detail; it returns the dead
	// letter as it is after. An empty reason fails with sink.ErrNoReason, an
	// unknown id with sink.ErrNotFound.
	ResolveDeadLetter(ctx context.Context, id int64, from, to State, reason, detail string) (Letter, error)
	// DeadLetterAudit returns the audit rows of dead letter id, in order.
	DeadLetterAudit(ctx context.Context, id int64) ([]Action, error)
	// MarkMirrored records that the dead letters ids were published to
	// the Kafka DLQ topic.
	MarkMirrored(ctx context.Context, ids []int64) error
}

// ErrState is matched by the error ResolveDeadLetter returns when
// the dead letter is not in the expected state (already redriven or
// dropped, or being redriven).
var ErrState = errors.New("dlq: the dead letter is not in the expected state")

// State is where a dead letter is in its life.
type State string

// The states of a dead letter.
const (
	// Open: stored, not handled yet.
	Open State = "open"
	// Redriving: an operator's redrive is producing it again.
	Redriving State = "redriving"
	// Redriven: produced again as a new command.
	Redriven State = "redriven"
	// Dropped: an operator decided it needs nothing more.
	Dropped State = "dropped"
)

// Valid reports whether st is one of the states.
func (st State) Valid() bool {
	switch st {
	case Open, Redriving, Redriven, Dropped:
		return true
	}
	return false
}

// Letter is one stored dead letter.
type Letter struct {
	ID     int64
	Scope  epochs.Scope
	Record sink.DeadRecord
	// Token is the tenure that dead-lettered it.
	Token epochs.Token
	// At is when the sink stored it (informational).
	At       time.Time
	State    State
	Mirrored bool
}

// Action is one audit row of a dead letter: an operator moved it
// from one state to another.
type Action struct {
	Seq    int64
	ID     int64
	From   State
	To     State
	Reason string
	Detail string
	At     time.Time
}

// Filter selects dead letters; zero fields select all.
type Filter struct {
	Group     string
	Topic     string
	Partition *int32
	States    []State
	Reason    string
	// Since, if not zero, selects dead letters stored at or after it.
	Since time.Time
	// NotMirrored selects the dead letters not yet published to the DLQ
	// topic.
	NotMirrored bool
	// IDs, if not empty, selects these IDs only.
	IDs []int64
	// Limit caps the result (0: no cap).
	Limit int
}

// Match reports whether d passes f (backends that filter in Go use it).
func (f Filter) Match(d Letter) bool {
	if f.Group != "" && d.Scope.Group != f.Group || f.Topic != "" && d.Scope.Topic != f.Topic ||
		f.Partition != nil && d.Scope.Partition != *f.Partition || f.Reason != "" && d.Record.Reason != f.Reason ||
		!f.Since.IsZero() && d.At.Before(f.Since) || f.NotMirrored && d.Mirrored {
		return false
	}
	if len(f.States) > 0 && !contains(f.States, d.State) {
		return false
	}
	if len(f.IDs) > 0 && !contains(f.IDs, d.ID) {
		return false
	}
	return true
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// CheckResolve validates a ResolveDeadLetter call that moves a dead letter
// from state from to state to, with reason.
func (from State) CheckResolve(to State, reason string) error {
	if !from.Valid() || !to.Valid() {
		return fmt.Errorf("%w: unknown dead letter state %q → %q", sink.ErrBadBatch, from, to)
	}
	if reason == "" {
		return sink.ErrNoReason
	}
	return nil
}
