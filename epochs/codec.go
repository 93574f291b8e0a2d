package epochs

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderKey is the Kafka record header key under which workrouter forwards a
// token downstream (see [Token.Header]): the token of the tenure that sent
// a command, envelope.Command.Upstream. It is one of workrouter's reserved
// headers, all listed at
// [github.com/workrouter/workrouter/envelope.ReservedHeaderPrefix]: a
// command's user headers cannot set it, and decoding a command fills
// Upstream from it, not the command's headers. Over HTTP the same encoding
// travels, in base64url, in package fencehttp's Workrouter-Token header.
const HeaderKey = "workrouter-token"

// codecVersion is the first byte of every encoded token.
const codecVersion byte = 1

// MaxFieldLen bounds the length of each string field of an encoded token, so
// that decoding garbage never allocates much. Kafka limits group and topic
// names far below it.
const MaxFieldLen = 1 << 12

// ErrInvalidToken is matched by every error that reports a malformed token,
// whether built in memory ([Token.Validate]) or decoded ([Token.UnmarshalBinary]).
var ErrInvalidToken = errors.New("epochs: invalid token")

// AppendBinary appends the compact binary encoding of t to b:
// a version byte, then group, topic and member as uvarint-length-prefixed
// strings, then partition and epoch as zig-zag varints.
func (t Token) AppendBinary(b []byte) ([]byte, error) {
	for _, s := range [...]string{t.Group, t.Topic, t.Member} {
		if len(s) > MaxFieldLen {
			return b, fmt.Errorf("%w: field of %d bytes exceeds %d", ErrInvalidToken, len(s), MaxFieldLen)
		}
	}
	b = append(b, codecVersion)
	b = appendString(b, t.Group)
	b = appendString(b, t.Topic)
	b = binary.AppendVarint(b, int64(t.Partition))
	b = binary.AppendVarint(b, int64(t.Epoch))
	b = appendString(b, t.Member)
	return b, nil
}

// MarshalBinary returns the compact binary encoding of t (see
// [Token.AppendBinary]).
func (t Token) MarshalBinary() ([]byte, error) {
	return t.AppendBinary(make([]byte, 0, 16+len(t.Group)+len(t.Topic)+len(t.Member)))
}

// UnmarshalBinary decodes b, as produced by [Token.MarshalBinary], into t.
// It never panics; any malformed input returns an error matching
// [ErrInvalidToken] and leaves t unchanged.
func (t *Token) UnmarshalBinary(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty encoding", ErrInvalidToken)
	}
	if b[0] != codecVersion {
		return fmt.Errorf("%w: unknown codec version %d", ErrInvalidToken, b[0])
	}
	d := decoder{b: b[1:]}
	var out Token
	out.Group = d.string()
	out.Topic = d.string()
	out.Partition = d.int32()
	out.Epoch = d.int32()
	out.Member = d.string()
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrInvalidToken, len(d.b))
	}
	*t = out
	return nil
}

// Header returns the Kafka record header (key [HeaderKey]) carrying t, for
// forwarding the token downstream: package envelope writes it for a
// command's Upstream token, and package fencehttp sends the same value, in
// base64url, to a service that checks it itself.
func (t Token) Header() (key string, value []byte, err error) {
	v, err := t.MarshalBinary()
	return HeaderKey, v, err
}

// FromHeader decodes a header value produced by [Token.Header].
func FromHeader(value []byte) (Token, error) {
	var t Token
	err := t.UnmarshalBinary(value)
	return t, err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidToken}, args...)...)
	}
}

func (d *decoder) string() string {
	if d.err != nil {
		return ""
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail("bad string length")
		return ""
	}
	d.b = d.b[k:]
	if n > MaxFieldLen || n > uint64(len(d.b)) {
		d.fail("string length %d out of range", n)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) int32() int32 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Varint(d.b)
	if k <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[k:]
	if v < -1<<31 || v > 1<<31-1 {
		d.fail("value %d overflows int32", v)
		return 0
	}
	return int32(v)
}
