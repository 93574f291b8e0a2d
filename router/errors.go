package router

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap one (or more) of
// these with details; match them with errors.Is. A send of a command that
// [envelope.Command.Validate] refuses fails with its error, which matches
// [envelope.ErrEmptyKey], [envelope.ErrEmptyType] or
// [envelope.ErrReservedHeader].
var (
	// ErrConfig means New was given an unusable [Config].
	ErrConfig = errors.New("router: invalid config")
	// ErrTopicNotFound means the configured topic does not exist.
	ErrTopicNotFound = errors.New("router: topic not found")
	// ErrMetadata means the topic's metadata could not be read (brokers
	// unreachable, request failed, broker-side error).
	ErrMetadata = errors.New("router: cannot read topic metadata")
	// ErrPartitionCountChanged is matched by [*PartitionCountChangedError].
	ErrPartitionCountChanged = errors.New("router: topic partition count changed")
	// ErrClosed means the Router has been closed.
	ErrClosed = errors.New("router: closed")
	// ErrRecordTooLarge means a command's record would not fit in one
	// record batch of the client (kgo.ProducerBatchMaxBytes, by default
	// 1,000,012 bytes, less about 128 bytes of framing): it is refused
	// before being buffered, so nothing was sent. The error also matches
	// kerr.MessageTooLarge, which kgo would have returned.
	ErrRecordTooLarge = errors.New("router: command too large for one record batch")
)

// PartitionCountChangedError reports that the topic's partition count is no
// longer the one the router partitions keys by (docs/design.md#hazard-5). It
// matches [ErrPartitionCountChanged] with errors.Is. Values are immutable and
// safe to share between goroutines.
type PartitionCountChangedError struct {
	// Topic is the command topic.
	Topic string
	// Expected is the partition count the router was partitioning by.
	Expected int32
	// Current is the partition count read from the cluster's metadata.
	Current int32
}

// Error explains the hazard and what to do about it. Safe to call from any
// goroutine.
func (e *PartitionCountChangedError) Error() string {
	return fmt.Sprintf("router: topic %q partition count changed from %d to %d: "+
		"keys would move to other partitions and break per-key serialization "+
		"while the old partitions still hold unapplied work; "+
		"drain the topic (let consumers reach zero lag), then restart the router "+
		"and all producers so they partition by the new count",
		e.Topic, e.Expected, e.Current)
}

// Is reports whether target is [ErrPartitionCountChanged]. Safe to call
// from any goroutine.
func (e *PartitionCountChangedError) Is(target error) bool {
	return target == ErrPartitionCountChanged
}
