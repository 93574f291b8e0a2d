package sink

import (
	"fmt"
	"time"

	"github.com/workrouter/workrouter/epochs"
)

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
