package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/workrouter/workrouter/epochs"
)

// DeadLetterStore is an optional capability of a sink: reading and
// resolving its dead letters, for `workrouter dlq`, the Kafka DLQ mirror
// and the invariant checker. Resolving never deletes a row: it moves its
// State and appends an audit row.
type DeadLetterStore interface {
	// DeadLetters returns the dead letters that match f, by ID.
	DeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error)
	// ResolveDeadLetter moves dead letter id from state from to state to
	// (a compare-and-set: ErrDeadLetterState if it is not in from) and
	// appends an audit row with reason and detail; it returns the dead
	// letter as it is after. An empty reason fails with ErrNoReason, an
	// unknown id with ErrNotFound.
	ResolveDeadLetter(ctx context.Context, id int64, from, to DeadLetterState, reason, detail string) (DeadLetter, error)
	// DeadLetterAudit returns the audit rows of dead letter id, in order.
	DeadLetterAudit(ctx context.Context, id int64) ([]DeadLetterAction, error)
	// MarkMirrored records that the dead letters ids were published to
	// the Kafka DLQ topic.
	MarkMirrored(ctx context.Context, ids []int64) error
}

// ErrDeadLetterState is matched by the error ResolveDeadLetter returns when
// the dead letter is not in the expected state (already redriven or
// dropped, or being redriven).
var ErrDeadLetterState = errors.New("sink: the dead letter is not in the expected state")

// RecordHeader is a Kafka record header of a dead-lettered record.
type RecordHeader struct {
	Key   string
	Value []byte
}

// DeadRecord is a record to dead-letter: where it was, what it held, and
// why it is skipped.
type DeadRecord struct {
	// TopicID is the identity of the log the record was read from
	// (empty if unknown).
	TopicID   string
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []RecordHeader
	Timestamp time.Time
	// Reason classifies why (the consumer's Reason* constants); Error is
	// the error text; Attempts is how many times it was tried.
	Reason   string
	Error    string
	Attempts int
	// Lane marks a record of a lane (the sink needs Features.Gaps): its
	// dead letter marks [From, Offset+1) done, as Apply marks a lane's
	// record (Batch.From). Without Lane, From is ignored.
	Lane bool
	From int64
}

// InLane returns r as a lane's record covering [from, r.Offset+1)
// (DeadRecord.Lane). It may be called from any goroutine.
func (r DeadRecord) InLane(from int64) DeadRecord {
	r.Lane, r.From = true, from
	return r
}

// DeadLetterResult reports what DeadLetter did.
type DeadLetterResult struct {
	// ID is the new dead letter's ID (0 if not Stored).
	ID int64
	// Stored is false for a replay: the record was at or below the
	// checkpoint already and nothing was written.
	Stored bool
	// NextOffset is the scope's NextOffset after the call.
	NextOffset int64
}

// DeadLetterState is where a dead letter is in its life.
type DeadLetterState string

// The states of a dead letter.
const (
	// DeadLetterOpen: stored, not handled yet.
	DeadLetterOpen DeadLetterState = "open"
	// DeadLetterRedriving: an operator's redrive is producing it again.
	DeadLetterRedriving DeadLetterState = "redriving"
	// DeadLetterRedriven: produced again as a new command.
	DeadLetterRedriven DeadLetterState = "redriven"
	// DeadLetterDropped: an operator decided it needs nothing more.
	DeadLetterDropped DeadLetterState = "dropped"
)

// Valid reports whether st is one of the states.
func (st DeadLetterState) Valid() bool {
	switch st {
	case DeadLetterOpen, DeadLetterRedriving, DeadLetterRedriven, DeadLetterDropped:
		return true
	}
	return false
}

// DeadLetter is one stored dead letter.
type DeadLetter struct {
	ID     int64
	Scope  epochs.Scope
	Record DeadRecord
	// Token is the tenure that dead-lettered it.
	Token epochs.Token
	// At is when the sink stored it (informational).
	At       time.Time
	State    DeadLetterState
	Mirrored bool
}

// DeadLetterAction is one audit row of a dead letter: an operator moved it
// from one state to another.
type DeadLetterAction struct {
	Seq    int64
	ID     int64
	From   DeadLetterState
	To     DeadLetterState
	Reason string
	Detail string
	At     time.Time
}

// DeadLetterFilter selects dead letters; zero fields select all.
type DeadLetterFilter struct {
	Group     string
	Topic     string
	Partition *int32
	States    []DeadLetterState
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
func (f DeadLetterFilter) Match(d DeadLetter) bool {
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

// CheckDeadLetter validates the arguments of a DeadLetter call. Backends
// call it first.
func CheckDeadLetter(tok epochs.Token, rec DeadRecord, f Features) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	if !f.DeadLetters {
		return fmt.Errorf("%w: a dead letter on a sink without dead letters", ErrUnsupported)
	}
	if rec.Offset < 0 {
		return fmt.Errorf("%w: negative dead letter offset %d", ErrBadBatch, rec.Offset)
	}
	if rec.Reason == "" {
		return fmt.Errorf("%w: a dead letter needs a reason", ErrBadBatch)
	}
	if rec.Lane {
		if !f.Gaps {
			return fmt.Errorf("%w: a lane's dead letter on a sink without gaps", ErrUnsupported)
		}
		if rec.From < 0 || rec.From > rec.Offset {
			return fmt.Errorf("%w: a lane's dead letter from %d past its offset %d", ErrBadBatch, rec.From, rec.Offset)
		}
	}
	return nil
}

// CheckResolve validates the arguments of a ResolveDeadLetter call.
func CheckResolve(from, to DeadLetterState, reason string) error {
	if !from.Valid() || !to.Valid() {
		return fmt.Errorf("%w: unknown dead letter state %q → %q", ErrBadBatch, from, to)
	}
	if reason == "" {
		return ErrNoReason
	}
	return nil
}
