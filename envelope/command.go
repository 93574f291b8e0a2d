package envelope

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
)

// ReservedHeaderPrefix is the prefix of the record header keys that
// workrouter reserves for itself: user headers whose key starts with it are
// refused with [ErrReservedHeader], and [Decode] leaves such headers out of
// Command.Headers. These are all the reserved headers a command record may
// carry:
//
//   - [TypeHeader], "workrouter-type": the command's Type, on every command;
//   - [IDHeader], "workrouter-id": the command's ID (its idempotency key,
//     [Command].ID), on every command package router sends and on those of
//     foreign producers that set it;
//   - [RedriveOfHeader], "workrouter-redrive-of": on a command re-produced
//     from a dead letter, that dead letter's ID;
//   - [RedriveForHeader], "workrouter-redrive-for": on a command
//     re-produced from a dead letter, the consumer group the redrive is for
//     ([Command].RedriveFor);
//   - [github.com/workrouter/workrouter/epochs.HeaderKey],
//     "workrouter-token": the fencing token of the tenure whose handler
//     sent the command ([Command].Upstream), in the token's binary codec
//     ([github.com/workrouter/workrouter/epochs.Token.Header]). It is
//     defined in package epochs, with the codec, because a token also
//     travels where there is no Kafka record (package fencehttp sends it
//     in an HTTP header); it is listed here because a command carries it.
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

// IDHeader is the reserved record header that carries a command's ID, its
// idempotency key ([Command].ID): at most one per record, 1 to [MaxIDLen]
// bytes of UTF-8 without control characters. A record without it has no
// ID. Foreign producers may set it themselves (docs/interop.md).
const IDHeader = ReservedHeaderPrefix + "id"

// RedriveForHeader is the reserved record header that names the consumer
// group a command re-produced from a dead letter is for: the group that
// dead-lettered it. A redrive is re-produced to the topic every group of
// that topic reads, and only the named group is to apply it; [Decode]
// returns its value as Command.RedriveFor. Only package router's
// Router.Redrive writes it, next to [RedriveOfHeader].
const RedriveForHeader = ReservedHeaderPrefix + "redrive-for"

// MaxIDLen is the longest [Command].ID, in bytes: long enough for a UUID
// (36), a ULID (26) or a key such as "order-<uuid>-capture", short enough
// that a sink can keep many of them per partition for deduplication.
const MaxIDLen = 128

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
	// ID is the command's idempotency key: two records with the same ID
	// are the same command, sent twice (a retried send, a producer's
	// retry, a broker that wrote a batch twice), and a worker that
	// deduplicates applies it once. Duplicates are found per partition,
	// which the key selects, so the same ID must always travel with the
	// same key (it does, being the same command); never give two
	// different commands one ID. Optional: "" is no ID, and a command
	// without one is applied once per offset, as any record. When set it
	// is 1 to [MaxIDLen] bytes of valid UTF-8 without control characters
	// ([ErrInvalidID]), so that any sink can store it as text and any log
	// can print it. It travels in the [IDHeader] record header.
	//
	// Package router generates an ID for a command sent without one, once
	// per send, and returns it in its Result: to make retrying a send safe,
	// set ID yourself (an order number, a UUID you keep with the request),
	// or retry with the ID the first attempt returned.
	ID string
	// RedriveFor is set on a command re-produced from a dead letter
	// (package router's Router.Redrive): the consumer group that redrive
	// is for, the group that dead-lettered the original. [Decode] fills it
	// from the [RedriveForHeader] header; on every other command it is "".
	// It is not the sender's to set: [Command.Validate] refuses a command
	// with RedriveFor set ([ErrRedriveFor]), so that a command decoded
	// from a redrive and sent on is not skipped by every group but one;
	// Router.Redrive writes the header itself.
	RedriveFor string
	// Upstream is the fencing token of the tenure whose handler sent this
	// command, when that handler forwards it: a follow-up command produced
	// from a handler sets Upstream to the consumer.Command's Token, so that
	// a worker downstream, or a resource it calls, can tell which tenure
	// asked, and refuse a follow-up from a tenure older than one it has
	// seen (a zombie's send is not fenced by its sink: it leaves before
	// the sink's commit; docs/fenced-resources.md#follow-up-commands).
	// Optional: the zero token is none. When set it must be a valid token
	// (epochs.Token.Validate, fields of at most epochs.MaxFieldLen bytes;
	// [ErrInvalidUpstream]). It travels in the epochs.HeaderKey record
	// header; [Decode] fills it from there.
	Upstream epochs.Token
}

// Header is a user record header of a [Command].
type Header struct {
	// Key is the header key; it must not start with [ReservedHeaderPrefix].
	Key string
	// Value is the header value, opaque to workrouter.
	Value []byte
}

// Validate reports whether c can be sent: it needs a key and a type, an ID
// that is empty or valid (see Command.ID), no RedriveFor, an Upstream token
// that is zero or valid, and no header key may start with
// [ReservedHeaderPrefix]. The error matches [ErrEmptyKey], [ErrEmptyType],
// [ErrInvalidID], [ErrRedriveFor], [ErrInvalidUpstream] or
// [ErrReservedHeader].
// Safe to call from any goroutine.
func (c Command) Validate() error {
	if len(c.Key) == 0 {
		return fmt.Errorf("%w: a command needs a key to select its partition", ErrEmptyKey)
	}
	if c.Type == "" {
		return fmt.Errorf("%w: command with key %q", ErrEmptyType, c.Key)
	}
	if c.ID != "" {
		if err := checkID(c.ID); err != nil {
			return fmt.Errorf("%w: command with key %q: its command ID %s", ErrInvalidID, c.Key, err)
		}
	}
	if c.RedriveFor != "" {
		return fmt.Errorf("%w: command with key %q has RedriveFor %q", ErrRedriveFor, c.Key, c.RedriveFor)
	}
	if !c.Upstream.IsZero() {
		if err := checkUpstream(c.Upstream); err != nil {
			return fmt.Errorf("%w: command with key %q: %w", ErrInvalidUpstream, c.Key, err)
		}
	}
	for i, h := range c.Headers {
		if strings.HasPrefix(h.Key, ReservedHeaderPrefix) {
			return fmt.Errorf("%w: header %d key %q starts with %q", ErrReservedHeader, i, h.Key, ReservedHeaderPrefix)
		}
	}
	return nil
}

// checkUpstream returns why tok, not zero, cannot travel as a command's
// Upstream, or nil.
func checkUpstream(tok epochs.Token) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	for _, f := range [...]string{tok.Group, tok.Topic, tok.Member} {
		if len(f) > epochs.MaxFieldLen {
			return fmt.Errorf("%w: field of %d bytes exceeds %d", epochs.ErrInvalidToken, len(f), epochs.MaxFieldLen)
		}
	}
	return nil
}

// appendUpstream appends to dst the record header that carries tok as a
// command's Upstream, if tok is not zero (internal/cmdheaders.AppendUpstream
// is the router's copy, which TestAgreesWithEncode holds to it).
func appendUpstream(dst []kgo.RecordHeader, tok epochs.Token) []kgo.RecordHeader {
	if tok.IsZero() {
		return dst
	}
	k, v, err := tok.Header()
	if err != nil {
		return dst
	}
	return append(dst, kgo.RecordHeader{Key: k, Value: v})
}

// checkID returns why id, non-empty, is not a valid ID (to follow "its
// ID"), or nil. It does not allocate for a valid ID.
func checkID(id string) error {
	if len(id) > MaxIDLen {
		return fmt.Errorf("is %d bytes, longer than %d", len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if b := id[i]; b >= utf8.RuneSelf {
			return checkIDRunes(id[i:])
		} else if b < 0x20 || b == 0x7f {
			return fmt.Errorf("has a control character at byte %d", i)
		}
	}
	return nil
}

// checkIDRunes is checkID for the rest of an ID from its first non-ASCII
// byte.
func checkIDRunes(id string) error {
	if !utf8.ValidString(id) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("has the control character %U", r)
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
	var id []byte
	if cmd.ID != "" {
		id = []byte(cmd.ID)
	}
	return &kgo.Record{
		Topic:     topic,
		Partition: partition,
		Key:       cmd.Key,
		Value:     cmd.Payload,
		Headers:   appendUpstream(appendHeaders(make([]kgo.RecordHeader, 0, len(cmd.Headers)+3), []byte(cmd.Type), id, cmd.Headers), cmd.Upstream),
	}, nil
}

// appendHeaders appends to dst the record headers that carry a command of
// type typ and ID id with the user headers user: the [TypeHeader] first,
// then the [IDHeader] if id is not empty, then the user headers in order
// (internal/cmdheaders.Append is the router's copy, which
// TestAgreesWithEncode holds to it).
func appendHeaders(dst []kgo.RecordHeader, typ, id []byte, user []Header) []kgo.RecordHeader {
	dst = append(dst, kgo.RecordHeader{Key: TypeHeader, Value: typ})
	if len(id) > 0 {
		dst = append(dst, kgo.RecordHeader{Key: IDHeader, Value: id})
	}
	for _, h := range user {
		dst = append(dst, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return dst
}

// Decode returns the command carried by r. Every error it returns matches
// [ErrMalformedRecord]; it also matches [ErrMissingType] if the record has
// no non-empty [TypeHeader], [ErrEmptyKey] if it has no key, or
// [ErrInvalidID] if its [IDHeader] is not a valid ID (see Command.ID). A
// record with more than one TypeHeader, IDHeader or [RedriveForHeader], or
// an empty RedriveForHeader, is malformed too, and so is one with more
// than one [epochs.HeaderKey] or one whose token does not decode
// ([ErrInvalidUpstream]). Command.ID is the IDHeader's value ("" for a
// record without one), Command.RedriveFor the RedriveForHeader's,
// Command.Upstream the decoded token (zero without the header). Reserved
// headers (see [ReservedHeaderPrefix]) are not user headers and are left
// out of Command.Headers. The command references r's key, value and user
// header values; it does not copy them. Its ID and RedriveFor are copies
// (a string each, the only allocations of a Decoder for a record of a type
// it remembers, without user headers and without an Upstream token, whose
// three strings are copies too): a sink
// may keep an ID long after the record is gone, and must not keep a whole
// fetch buffer alive with it. Safe to call from any goroutine.
func Decode(r *kgo.Record) (Command, error) {
	return decode(r, nil)
}

// Decoder decodes records as [Decode] does, and reuses the Type string of
// the command types it has seen: [Decode] allocates a string for every
// record's Type, while a consumer sees the same few types again and again.
// It remembers up to 16 types; a record of any other type is decoded as
// Decode decodes it. It copies command IDs into chunks of 4096 bytes
// that it fills one after another and never
// writes again, instead of allocating a string for each: a consumer's
// stream of IDs costs one allocation per chunk, and the garbage collector
// one object per chunk for the IDs a sink keeps (a retained ID keeps its
// whole chunk). The zero Decoder is ready to use. A Decoder is used by one
// goroutine at a time.
type Decoder struct {
	types []string
	ids   []byte // the current chunk of IDs: bytes below len are never written again
}

// decoderTypes is how many distinct command types a [Decoder] remembers.
const decoderTypes = 16

// decoderIDChunk is the size of a [Decoder]'s chunks of command IDs.
const decoderIDChunk = 4096

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
	if len(d.types) < decoderTypes && t != "" {
		d.types = append(d.types, t)
	}
	return t
}

// idOf returns b as a string: in d's current chunk of IDs (a new one if
// it is full), or a string of its own if d is nil or b is longer than an
// ID may be (the caller refuses it).
func (d *Decoder) idOf(b []byte) string {
	if d == nil || len(b) == 0 || len(b) > MaxIDLen {
		return string(b)
	}
	if cap(d.ids)-len(d.ids) < len(b) {
		d.ids = make([]byte, 0, decoderIDChunk)
	}
	start := len(d.ids)
	d.ids = append(d.ids, b...)
	// The bytes [start, len) are never written again: append writes only
	// past len, and d.ids is never resliced below it.
	return unsafe.String(&d.ids[start], len(b))
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
		typ, id, redriveFor       string
		headers                   []Header
		seenType, seenID, seenFor bool
		upstream                  epochs.Token
		seenUpstream              bool
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
		case h.Key == IDHeader:
			if seenID {
				*cmd = Command{}
				return fmt.Errorf("%w: record %s/%d@%d has more than one %q header", ErrMalformedRecord, r.Topic, r.Partition, r.Offset, IDHeader)
			}
			seenID = true
			id = d.idOf(h.Value)
			if id == "" {
				*cmd = Command{}
				return fmt.Errorf("%w: %w: record %s/%d@%d has an empty %q header", ErrMalformedRecord, ErrInvalidID, r.Topic, r.Partition, r.Offset, IDHeader)
			}
			if err := checkID(id); err != nil {
				*cmd = Command{}
				return fmt.Errorf("%w: %w: record %s/%d@%d: its %q header %s", ErrMalformedRecord, ErrInvalidID, r.Topic, r.Partition, r.Offset, IDHeader, err)
			}
		case h.Key == RedriveForHeader:
			if seenFor {
				*cmd = Command{}
				return fmt.Errorf("%w: record %s/%d@%d has more than one %q header", ErrMalformedRecord, r.Topic, r.Partition, r.Offset, RedriveForHeader)
			}
			seenFor = true
			if redriveFor = string(h.Value); redriveFor == "" {
				*cmd = Command{}
				return fmt.Errorf("%w: record %s/%d@%d has an empty %q header", ErrMalformedRecord, r.Topic, r.Partition, r.Offset, RedriveForHeader)
			}
		case h.Key == epochs.HeaderKey:
			if seenUpstream {
				*cmd = Command{}
				return fmt.Errorf("%w: record %s/%d@%d has more than one %q header", ErrMalformedRecord, r.Topic, r.Partition, r.Offset, epochs.HeaderKey)
			}
			seenUpstream = true
			tok, err := epochs.FromHeader(h.Value)
			if err == nil {
				err = tok.Validate()
			}
			if err != nil {
				*cmd = Command{}
				return fmt.Errorf("%w: %w: record %s/%d@%d: its %q header: %w", ErrMalformedRecord, ErrInvalidUpstream, r.Topic, r.Partition, r.Offset, epochs.HeaderKey, err)
			}
			upstream = tok
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
	*cmd = Command{Key: r.Key, Type: typ, Payload: r.Value, Headers: headers, ID: id, RedriveFor: redriveFor, Upstream: upstream}
	return nil
}
