// Package topicid reads a topic's ID from the brokers themselves.
//
// kadm's ListTopics answers from the client's metadata cache, which may be
// up to MetadataMinAge (5 s by default) old: right after a topic was
// deleted and created again it can still hold the old topic ID. The log's
// identity (docs/design.md#log-identity) must never be judged from that,
// so claims, the topic watch and the operator's diagnosis read it here,
// with a metadata request of their own.
package topicid

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Error is Read's and ReadPartitions's error: the metadata request for
// Topic failed, or the brokers answered it with an error for the topic
// (Err, a kerr error then).
type Error struct {
	Topic string
	Err   error
}

// Error names the topic and the cause.
func (e *Error) Error() string {
	return fmt.Sprintf("reading the metadata of topic %s: %v", e.Topic, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Read returns topic's ID as the brokers report it now (the zero ID for a
// broker without topic IDs). A topic that does not exist fails with an
// error matching kerr.UnknownTopicOrPartition. Its errors are *Error. It may be called from any
// goroutine.
func Read(ctx context.Context, cl *kgo.Client, topic string) ([16]byte, error) {
	id, _, err := ReadPartitions(ctx, cl, topic)
	return id, err
}

// ReadPartitions is Read that also returns the topic's partitions, in
// ascending order, from the same metadata response. It may be called from
// any goroutine.
func ReadPartitions(ctx context.Context, cl *kgo.Client, topic string) ([16]byte, []int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return [16]byte{}, nil, &Error{Topic: topic, Err: err}
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return [16]byte{}, nil, &Error{Topic: topic, Err: err}
		}
		parts := make([]int32, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			parts = append(parts, p.Partition)
		}
		slices.Sort(parts)
		return t.TopicID, parts, nil
	}
	return [16]byte{}, nil, &Error{Topic: topic, Err: kerr.UnknownTopicOrPartition}
}
