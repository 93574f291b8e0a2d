package router

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TypeHeader is the record header key that carries a command's Type.
const TypeHeader = "workrouter-type"

// ReservedHeaderPrefix is the prefix of record header keys that workrouter
// reserves for itself ([TypeHeader], the fencing token header, …). User
// headers whose key starts with it are refused with [ErrReservedHeader].
const ReservedHeaderPrefix = "workrouter-"

// Command is one keyed unit of work: the envelope shared by producers
// ([Router]) and consumers. Commands are plain values; functions that take
// one do not modify it, but they do not copy its byte slices either, so a
// caller must not modify Key, Payload or header values until a send that
// uses them has completed.
type Command struct {
	// Key selects the partition, and so the single worker that applies
	// the command. Commands with equal keys are applied in produce order.
	// Required.
	Key []byte
	// Type names the kind of command, for the consumer to dispatch on.
	// Required. It travels in the [TypeHeader] record header.
	Type string
	// Payload is the command's body, opaque to workrouter. Optional.
	Payload []byte
	// Headers are optional user headers. Their keys must not start with
	// [ReservedHeaderPrefix].
	Headers []Header
}

// Header is a user record header of a [Command].
type Header struct {
	// Key is the header key; it must not start with [ReservedHeaderPrefix].
	Key string
	// Value is the header value, opaque to workrouter.
	Value []byte
}

// Validate reports whether c can be sent: it needs a key and a type, and no
// header key may start with [ReservedHeaderPrefix]. The error matches
// [ErrEmptyKey], [ErrEmptyType] or [ErrReservedHeader]. Safe to call from
// any goroutine.
func (c Command) Validate() error {
	if len(c.Key) == 0 {
		return fmt.Errorf("%w: a command needs a key to select its partition", ErrEmptyKey)
	}
	if c.Type == "" {
		return fmt.Errorf("%w: command with key %q", ErrEmptyType, c.Key)
	}
	for i, h := range c.Headers {
		if strings.HasPrefix(h.Key, ReservedHeaderPrefix) {
			return fmt.Errorf("%w: header %d key %q starts with %q", ErrReservedHeader, i, h.Key, ReservedHeaderPrefix)
		}
	}
	return nil
}

// Encode validates cmd (see [Command.Validate]) and returns the record that
// carries it to partition of topic. The record references cmd's byte
// slices; it does not copy them. Safe to call from any goroutine.
func Encode(topic string, partition int32, cmd Command) (*kgo.Record, error) {
	if topic == "" {
		return nil, fmt.Errorf("%w: encoding command", ErrEmptyTopic)
	}
	if partition < 0 {
		return nil, fmt.Errorf("%w: %d", ErrInvalidPartition, partition)
	}
	if err := cmd.Validate(); err != nil {
		return nil, err
	}
	return &kgo.Record{
		Topic:     topic,
		Partition: partition,
		Key:       cmd.Key,
		Value:     cmd.Payload,
		Headers:   appendHeaders(make([]kgo.RecordHeader, 0, len(cmd.Headers)+1), []byte(cmd.Type), cmd.Headers),
	}, nil
}

// appendHeaders appends the type header, with value typ, and the user
// headers to dst.
func appendHeaders(dst []kgo.RecordHeader, typ []byte, user []Header) []kgo.RecordHeader {
	dst = append(dst, kgo.RecordHeader{Key: TypeHeader, Value: typ})
	for _, h := range user {
		dst = append(dst, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return dst
}

// Decode returns the command carried by r. Every error it returns matches
// [ErrMalformedRecord]; it also matches [ErrMissingType] if the record has
// no non-empty [TypeHeader], or [ErrEmptyKey] if it has no key. A record
// with more than one TypeHeader is malformed too. Reserved headers other than [TypeHeader] (such as the
// fencing token) are not user headers and are left out of
// Command.Headers. The command references r's byte slices; it does not copy
// them. Safe to call from any goroutine.
func Decode(r *kgo.Record) (Command, error) {
	if len(r.Key) == 0 {
		return Command{}, fmt.Errorf("%w: %w: record %s/%d@%d", ErrMalformedRecord, ErrEmptyKey, r.Topic, r.Partition, r.Offset)
	}
	cmd := Command{Key: r.Key, Payload: r.Value}
	seenType := false
	for _, h := range r.Headers {
		switch {
		case h.Key == TypeHeader:
			if seenType {
				return Command{}, fmt.Errorf("%w: record %s/%d@%d has more than one %q header", ErrMalformedRecord, r.Topic, r.Partition, r.Offset, TypeHeader)
			}
			seenType = true
			cmd.Type = string(h.Value)
		case strings.HasPrefix(h.Key, ReservedHeaderPrefix):
			// Another workrouter header: not part of the command.
		default:
			cmd.Headers = append(cmd.Headers, Header{Key: h.Key, Value: h.Value})
		}
	}
	if cmd.Type == "" {
		return Command{}, fmt.Errorf("%w: %w: record %s/%d@%d has no non-empty %q header", ErrMalformedRecord, ErrMissingType, r.Topic, r.Partition, r.Offset, TypeHeader)
	}
	return cmd, nil
}
