package envelope

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReservedHeaderPrefix is the prefix of the record header keys that
// workrouter reserves for itself: user headers whose key starts with it are
// refused with [ErrReservedHeader], and [Decode] leaves such headers out of
// Command.Headers. These are all the reserved headers a command record may
// carry:
//
//   - [TypeHeader], "workrouter-type": the command's Type, on every command;
//   - [RedriveOfHeader], "workrouter-redrive-of": on a command re-produced
//     from a dead letter, that dead letter's ID;
//   - [github.com/workrouter/workrouter/epochs.HeaderKey],
//     "workrouter-token": a fencing token that a handler forwards
//     downstream ([github.com/workrouter/workrouter/epochs.Token.Header]).
//     It is defined in package epochs, with the token's codec, because a
//     token also travels where there is no Kafka record; it is listed here
//     because a record that carries one may be a command.
//
// The dead-letter records that package consumer writes are not commands;
// their headers (consumer.DLQHeaderID and the others, "workrouter-dlt-…")
// use the same prefix.
const ReservedHeaderPrefix = "workrouter-"

// TypeHeader is the record header key that carries a command's Type.
const TypeHeader = ReservedHeaderPrefix + "type"

// RedriveOfHeader is the reserved record header that marks a command
// re-produced from a dead letter (docs/design.md#dead-letters): its value
// names the dead letter it came from. Only package router's Router.Redrive
// writes it; user headers cannot (they must not start with
// [ReservedHeaderPrefix]), and [Decode] leaves it out of Command.Headers
// like every reserved header.
const RedriveOfHeader = ReservedHeaderPrefix + "redrive-of"

// Command is one keyed unit of work: the envelope shared by producers
// (package router) and consumers (package consumer). Commands are plain
// values; functions that take one do not modify it, but they do not copy
// its byte slices either, so a caller must not modify Key, Payload or
// header values until a send that uses them has completed.
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
		Headers:   AppendHeaders(make([]kgo.RecordHeader, 0, len(cmd.Headers)+1), []byte(cmd.Type), cmd.Headers),
	}, nil
}

// AppendHeaders appends to dst the record headers that carry a command of
// type typ with the user headers user, in the order [Encode] writes them:
// the [TypeHeader] first, then the user headers in order. It validates
// nothing (see [Command.Validate]) and copies neither typ nor the header
// values. It is for producers that build their records themselves to save
// allocations, as package router does. Safe to call from any goroutine.
func AppendHeaders(dst []kgo.RecordHeader, typ []byte, user []Header) []kgo.RecordHeader {
	dst = append(dst, kgo.RecordHeader{Key: TypeHeader, Value: typ})
	for _, h := range user {
		dst = append(dst, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return dst
}

// Decode returns the command carried by r. Every error it returns matches
// [ErrMalformedRecord]; it also matches [ErrMissingType] if the record has
// no non-empty [TypeHeader], or [ErrEmptyKey] if it has no key. A record
// with more than one TypeHeader is malformed too. Reserved headers other
// than [TypeHeader] (see [ReservedHeaderPrefix]) are not user headers and
// are left out of Command.Headers. The command references r's byte slices;
// it does not copy them. Safe to call from any goroutine.
func Decode(r *kgo.Record) (Command, error) {
	return decode(r, nil)
}

// Decoder decodes records as [Decode] does, and reuses the Type string of
// the command types it has seen: [Decode] allocates a string for every
// record's Type, while a consumer sees the same few types again and again.
// It remembers up to [DecoderTypes] types; a record of any other type is
// decoded as Decode decodes it. The zero Decoder is ready to use. A
// Decoder is used by one goroutine at a time.
type Decoder struct {
	types []string
}

// DecoderTypes is how many distinct command types a [Decoder] remembers.
const DecoderTypes = 16

// Decode returns the command carried by r, with the same errors as the
// package's [Decode].
func (d *Decoder) Decode(r *kgo.Record) (Command, error) {
	return decode(r, d)
}

// DecodeInto decodes r into *cmd, as Decode does, without copying the
// command out: it overwrites every field of *cmd (leaving it zero on an
// error) and never reuses what *cmd held (a Headers slice given to a
// handler stays the handler's).
func (d *Decoder) DecodeInto(r *kgo.Record, cmd *Command) error {
	return decodeInto(r, d, cmd)
}

// typeOf returns b as a string: a remembered one if d has seen it before.
func (d *Decoder) typeOf(b []byte) string {
	if d == nil {
		return string(b)
	}
	for _, t := range d.types {
		if t == string(b) { // no allocation: the compiler compares in place
			return t
		}
	}
	t := string(b)
	if len(d.types) < DecoderTypes && t != "" {
		d.types = append(d.types, t)
	}
	return t
}

// decode implements Decode and Decoder.Decode (d may be nil).
func decode(r *kgo.Record, d *Decoder) (Command, error) {
	var cmd Command
	if err := decodeInto(r, d, &cmd); err != nil {
		return Command{}, err
	}
	return cmd, nil
}

// decodeInto decodes r into *cmd, overwriting all of it (zero on an
// error). d may be nil.
func decodeInto(r *kgo.Record, d *Decoder, cmd *Command) error {
	if len(r.Key) == 0 {
		*cmd = Command{}
		return fmt.Errorf("%w: %w: record %s/%d@%d", ErrMalformedRecord, ErrEmptyKey, r.Topic, r.Partition, r.Offset)
	}
	var (
		typ      string
		headers  []Header
		seenType bool
	)
	for _, h := range r.Headers {
		switch {
		case h.Key == TypeHeader:
			if seenType {
				*cmd = Command{}
				return fmt.Errorf("%w: record %s/%d@%d has more than one %q header", ErrMalformedRecord, r.Topic, r.Partition, r.Offset, TypeHeader)
			}
			seenType = true
			typ = d.typeOf(h.Value)
		case strings.HasPrefix(h.Key, ReservedHeaderPrefix):
			// Another workrouter header: not part of the command.
		default:
			headers = append(headers, Header{Key: h.Key, Value: h.Value})
		}
	}
	if typ == "" {
		*cmd = Command{}
		return fmt.Errorf("%w: %w: record %s/%d@%d has no non-empty %q header", ErrMalformedRecord, ErrMissingType, r.Topic, r.Partition, r.Offset, TypeHeader)
	}
	*cmd = Command{Key: r.Key, Type: typ, Payload: r.Value, Headers: headers}
	return nil
}
