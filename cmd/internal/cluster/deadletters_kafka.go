package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/kafka"
)

// errKafkaDeadLettersReadOnly is the error of the dlq.Store methods the
// Kafka sink's dead-letter topic cannot serve: its dead letters are
// records, with no state to move or audit to append.
var errKafkaDeadLettersReadOnly = errors.New("cluster: the Kafka sink's dead letters are records of its dead-letter topic: read only")

// kafkaDeadLetters reads the Kafka sink's dead-letter topic (one
// partition) with read_committed, for D: each record a dead letter, its
// origin, reason, error, attempts and token from the headers sink/kafka
// writes (kafka.Header*), the poison record's own headers kept. A dead
// letter's ID is its offset in the topic plus one, as
// kafka.Sink.DeadLetter returns it.
type kafkaDeadLetters struct {
	brokers []string
	topic   string
	opts    []kgo.Opt
}

var _ dlq.Store = kafkaDeadLetters{}

// DeadLetters returns the committed dead letters of f.Group and f.Topic
// (the other fields of f are not applied), in the topic's order.
func (k kafkaDeadLetters) DeadLetters(ctx context.Context, f dlq.Filter) ([]dlq.Letter, error) {
	var out []dlq.Letter
	var bad error
	err := readOnePartition(ctx, k.brokers, k.topic, k.opts, func(r *kgo.Record) {
		l, err := parseKafkaDeadLetter(r)
		if err != nil {
			bad = errors.Join(bad, err)
			return
		}
		if (f.Group == "" || l.Scope.Group == f.Group) && (f.Topic == "" || l.Scope.Topic == f.Topic) {
			out = append(out, l)
		}
	})
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, bad
	}
	return out, nil
}

// parseKafkaDeadLetter reads a record of the dead-letter topic.
func parseKafkaDeadLetter(r *kgo.Record) (dlq.Letter, error) {
	hs := map[string]string{}
	var own []sink.RecordHeader
	for _, h := range r.Headers {
		switch h.Key {
		case kafka.HeaderOriginalTopic, kafka.HeaderOriginalPartition, kafka.HeaderOriginalOffset, kafka.HeaderGroup,
			kafka.HeaderReason, kafka.HeaderExceptionMessage, kafka.HeaderToken, kafka.HeaderAttempts:
			hs[h.Key] = string(h.Value)
		default:
			own = append(own, sink.RecordHeader{Key: h.Key, Value: h.Value})
		}
	}
	part, perr := strconv.ParseInt(hs[kafka.HeaderOriginalPartition], 10, 32)
	off, oerr := strconv.ParseInt(hs[kafka.HeaderOriginalOffset], 10, 64)
	attempts, _ := strconv.Atoi(hs[kafka.HeaderAttempts])
	scope := epochs.Scope{Group: hs[kafka.HeaderGroup], Topic: hs[kafka.HeaderOriginalTopic], Partition: int32(part)}
	// The token as epochs.Token.String writes it, which the checkpoint
	// records carry too.
	cp, ok := parseCheckpoint(scope.String(), hs[kafka.HeaderToken]+" next=0")
	if perr != nil || oerr != nil || scope.Group == "" || scope.Topic == "" || !ok {
		return dlq.Letter{}, fmt.Errorf("cluster: the dead letter at offset %d of %s lacks its origin headers (%v)", r.Offset, r.Topic, hs)
	}
	return dlq.Letter{ID: r.Offset + 1, Scope: scope, Token: cp.tok, At: r.Timestamp, State: dlq.Open,
		Record: sink.DeadRecord{Offset: off, Key: r.Key, Value: r.Value, Headers: own, Timestamp: r.Timestamp,
			Reason: hs[kafka.HeaderReason], Error: hs[kafka.HeaderExceptionMessage], Attempts: attempts}}, nil
}

// ResolveDeadLetter is refused: see errKafkaDeadLettersReadOnly.
func (kafkaDeadLetters) ResolveDeadLetter(context.Context, int64, dlq.State, dlq.State, string, string) (dlq.Letter, error) {
	return dlq.Letter{}, errKafkaDeadLettersReadOnly
}

// DeadLetterAudit is refused: see errKafkaDeadLettersReadOnly.
func (kafkaDeadLetters) DeadLetterAudit(context.Context, int64) ([]dlq.Action, error) {
	return nil, errKafkaDeadLettersReadOnly
}

// MarkMirrored is refused: see errKafkaDeadLettersReadOnly.
func (kafkaDeadLetters) MarkMirrored(context.Context, []int64) error {
	return errKafkaDeadLettersReadOnly
}
