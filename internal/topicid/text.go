package topicid

import (
	"encoding/base64"
	"errors"
	"fmt"
)

// Format returns a Kafka topic ID as Kafka's own tools print it
// (kafka-topics --describe): URL-safe base64 without padding, the form of
// sink.Observed.TopicID and sink.Fence.TopicID. It may be called from any
// goroutine.
func Format(id [16]byte) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// Parse reads a topic ID in the form Format writes.
func Parse(s string) ([16]byte, error) {
	var id [16]byte
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		return id, fmt.Errorf("%w: %q is not a topic ID (22 characters of URL-safe base64)", ErrBad, s)
	}
	copy(id[:], b)
	return id, nil
}

// ErrBad is matched by the error Parse returns for text that
// is not a topic ID.
var ErrBad = errors.New("topicid: bad topic ID")
