package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header is a Kafka record header of a produced record.
type Header struct {
	Key   string
	Value []byte
}

// Record is one record a handler produces: to any topic (but the sink's
// own checkpoint topic), with a key, a value and headers. The partition
// is the producer's choice (the key's hash, as kgo's default partitioner
// and Kafka's Java client pick it).
type Record struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
}

// Tx is what a handler's effect writes through: the records of one
// batch, produced in the sink's Kafka transaction when every effect of
// the batch returned nil, and never otherwise. It offers nothing but
// Produce: the transaction's only effects are records. A Tx belongs to
// the Apply that made it: it must not be kept or used after the effect
// returns, nor from another goroutine.
type Tx struct {
	s    *Sink
	recs []*kgo.Record
	// slab and hdrs are the memory of the records and their headers,
	// taken in chunks (take): a chunk is never grown, recs points into
	// it.
	slab []kgo.Record
	hdrs []kgo.RecordHeader
}

// newTx returns the Tx of an Apply that expects about n records (one
// per command).
func newTx(s *Sink, n int) *Tx {
	return &Tx{s: s, recs: make([]*kgo.Record, 0, n)}
}

// take returns n elements of *chunk, their capacity n (appending to them
// never reaches the next ones), and moves *chunk past them; a chunk too
// short is left to the elements already taken from it and a new one of
// max(n, hint, 16) made.
func take[T any](chunk *[]T, n, hint int) []T {
	if cap(*chunk)-len(*chunk) < n {
		*chunk = make([]T, 0, max(n, hint, 16))
	}
	at := len(*chunk)
	*chunk = (*chunk)[:at+n]
	return (*chunk)[at : at+n : at+n]
}

// ErrBadRecord is matched by the error Produce returns for a record it
// refuses: no topic, or the sink's own checkpoint or dead-letter topic.
var ErrBadRecord = errors.New("kafka sink: bad record")

// Produce adds r to the batch's transaction. The record is sent when the
// batch commits (Apply), so Produce never waits on the broker and cannot
// fail for a broker's reason; it fails for a cancelled ctx and for a
// record it refuses (ErrBadRecord). The byte slices of r belong to the
// sink once Produce returns.
func (tx *Tx) Produce(ctx context.Context, r Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch r.Topic {
	case "":
		return fmt.Errorf("%w: a record needs a topic", ErrBadRecord)
	case tx.s.cfg.CheckpointTopic:
		return fmt.Errorf("%w: topic %q is the sink's checkpoint topic", ErrBadRecord, r.Topic)
	case tx.s.cfg.DeadLetterTopic:
		return fmt.Errorf("%w: topic %q is the sink's dead-letter topic", ErrBadRecord, r.Topic)
	}
	left := cap(tx.recs) - len(tx.recs) // records still expected
	kr := &take(&tx.slab, 1, left)[0]
	*kr = kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value}
	if len(r.Headers) > 0 {
		kr.Headers = take(&tx.hdrs, len(r.Headers), len(r.Headers)*left)
		for i, h := range r.Headers {
			kr.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	tx.recs = append(tx.recs, kr)
	return nil
}

// Len returns how many records the transaction holds so far.
func (tx *Tx) Len() int { return len(tx.recs) }
