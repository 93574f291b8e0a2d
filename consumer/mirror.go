package consumer

import (
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/workrouter/workrouter/sink/dlq"
)

// Headers of a dead letter mirrored to the DLQ topic, in the manner of
// Kafka Connect's errors.deadletterqueue.* and Spring's kafka_dlt-*.
const (
	DLQHeaderOriginalTopic     = "workrouter-dlt-original-topic"
	DLQHeaderOriginalPartition = "workrouter-dlt-original-partition"
	DLQHeaderOriginalOffset    = "workrouter-dlt-original-offset"
	DLQHeaderGroup             = "workrouter-dlt-group"
	DLQHeaderReason            = "workrouter-dlt-reason"
	DLQHeaderExceptionClass    = "workrouter-dlt-exception-class"
	DLQHeaderExceptionMessage  = "workrouter-dlt-exception-message"
	DLQHeaderToken             = "workrouter-dlt-token"
	DLQHeaderID                = "workrouter-dlt-id"
)

// mirrorRecord returns the record that mirrors dead letter d to the DLQ
// topic: the original key, value and headers, plus the DLQHeader* headers.
// It may be called from any goroutine.
func mirrorRecord(topic string, d dlq.Letter) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: d.Record.Key, Value: d.Record.Value, Timestamp: d.Record.Timestamp}
	for _, h := range d.Record.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	class := d.Record.Reason
	if i := strings.IndexByte(d.Record.Error, ':'); i > 0 {
		class = d.Record.Error[:i]
	}
	for _, h := range [][2]string{
		{DLQHeaderOriginalTopic, d.Scope.Topic},
		{DLQHeaderOriginalPartition, strconv.Itoa(int(d.Scope.Partition))},
		{DLQHeaderOriginalOffset, strconv.FormatInt(d.Record.Offset, 10)},
		{DLQHeaderGroup, d.Scope.Group},
		{DLQHeaderReason, d.Record.Reason},
		{DLQHeaderExceptionClass, class},
		{DLQHeaderExceptionMessage, d.Record.Error},
		{DLQHeaderToken, d.Token.String()},
		{DLQHeaderID, strconv.FormatInt(d.ID, 10)},
	} {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
	}
	return r
}
