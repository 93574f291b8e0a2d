package postgres

import (
	"encoding/binary"
	"fmt"

	"github.com/workrouter/workrouter/sink"
)

// A row of <prefix>_done (schema version 6) is one lane batch's spans:
// from_off is the first span's start, to_off the last one's end, and
// spans, when the batch recorded more than one, all of them encoded by
// encodeSpans (NULL: the row is the one span [from_off, to_off), as every
// row of version 5 was). One row per batch instead of one per span: a
// lane's records interleave with the other lanes', so a batch of n
// records is about n spans, and inserting (then compacting) that many
// rows made the server the bottleneck of the lanes (docs/postgres.md#gaps).

// encodeSpans encodes sps (sorted, disjoint, not empty) for a row's spans
// column: nil for one span (the row's bounds say it), else the count and,
// for each span, its distance from the previous span's end (the first:
// from sps[0].From, so 0) and its length, as unsigned varints.
func encodeSpans(sps []sink.Span) []byte {
	if len(sps) <= 1 {
		return nil
	}
	b := make([]byte, 0, 2+4*len(sps))
	b = binary.AppendUvarint(b, uint64(len(sps)))
	prev := sps[0].From
	for _, sp := range sps {
		b = binary.AppendUvarint(b, uint64(sp.From-prev))
		b = binary.AppendUvarint(b, uint64(sp.To-sp.From))
		prev = sp.To
	}
	return b
}

// decodeSpans returns the spans of a row with bounds [from, to) and spans
// column b, appended to dst. A column that does not decode to sorted,
// disjoint, non-empty spans from exactly from to to fails with
// [ErrSchema]: the row was not written by this sink.
func decodeSpans(dst []sink.Span, from, to int64, b []byte) ([]sink.Span, error) {
	if b == nil {
		if from >= to {
			return dst, fmt.Errorf("%w: a done row holds the empty span [%d, %d)", ErrSchema, from, to)
		}
		return append(dst, sink.Span{From: from, To: to}), nil
	}
	bad := func(what string) error {
		return fmt.Errorf("%w: the spans of the done row [%d, %d) do not decode: %s", ErrSchema, from, to, what)
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n < 2 || n > uint64(len(b)) {
		return dst, bad("bad count")
	}
	b = b[k:]
	prev := from
	for i := range n {
		gap, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return dst, bad("truncated")
		}
		length, k2 := binary.Uvarint(b[k1:])
		if k2 <= 0 {
			return dst, bad("truncated")
		}
		b = b[k1+k2:]
		if (i > 0 && gap == 0) || length == 0 || gap > uint64(to-prev) || length > uint64(to-prev)-gap {
			return dst, bad("spans out of bounds, empty or touching")
		}
		sp := sink.Span{From: prev + int64(gap), To: prev + int64(gap) + int64(length)}
		dst = append(dst, sp)
		prev = sp.To
	}
	if len(b) != 0 || prev != to {
		return dst, bad("the spans do not end at the row's end")
	}
	return dst, nil
}
