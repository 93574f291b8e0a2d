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
	kr := &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	tx.recs = append(tx.recs, kr)
	return nil
}

// Len returns how many records the transaction holds so far.
func (tx *Tx) Len() int { return len(tx.recs) }
