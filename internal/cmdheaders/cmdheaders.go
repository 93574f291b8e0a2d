// Package cmdheaders appends the record headers that carry a command, for
// package router, which builds its records itself to save allocations.
// They are the headers envelope.Encode writes, in its order
// (TestAgreesWithEncode), and what envelope.Decode reads (envelope's
// FuzzDecode round-trips through them).
package cmdheaders

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
)

// Append appends to dst the record headers that carry a command of type
// typ and ID id with the user headers user, in the order envelope.Encode
// writes them: the envelope.TypeHeader first, then the envelope.IDHeader
// if id is not empty, then the user headers in order. It validates
// nothing (see envelope.Command.Validate) and copies neither typ, id nor
// the header values. Safe to call from any goroutine.
func Append(dst []kgo.RecordHeader, typ, id []byte, user []envelope.Header) []kgo.RecordHeader {
	dst = append(dst, kgo.RecordHeader{Key: envelope.TypeHeader, Value: typ})
	if len(id) > 0 {
		dst = append(dst, kgo.RecordHeader{Key: envelope.IDHeader, Value: id})
	}
	for _, h := range user {
		dst = append(dst, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return dst
}

// AppendUpstream appends to dst the record header that carries tok as a
// command's Upstream (epochs.HeaderKey, the token's binary encoding), if
// tok is not zero; it returns dst unchanged for the zero token. It
// validates nothing (see envelope.Command.Validate): a token with an
// oversized field is left out. It goes after Append. Safe to call from
// any goroutine.
func AppendUpstream(dst []kgo.RecordHeader, tok epochs.Token) []kgo.RecordHeader {
	if tok.IsZero() {
		return dst
	}
	k, v, err := tok.Header()
	if err != nil {
		return dst
	}
	return append(dst, kgo.RecordHeader{Key: k, Value: v})
}
