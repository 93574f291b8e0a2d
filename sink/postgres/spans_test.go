package postgres

import (
	"errors"
	"slices"
	"testing"

	"github.com/workrouter/workrouter/sink"
)

func TestSpansRoundTrip(t *testing.T) {
	for _, sps := range [][]sink.Span{
		{{From: 5, To: 6}},
		{{From: 0, To: 1}, {From: 2, To: 3}},
		{{From: 100, To: 140}, {From: 1 << 40, To: 1<<40 + 1}, {From: 1<<41 + 7, To: 1<<41 + 300}},
	} {
		b := encodeSpans(sps)
		if len(sps) == 1 && b != nil {
			t.Fatalf("one span encoded as %x, want NULL", b)
		}
		got, err := decodeSpans(nil, sps[0].From, sps[len(sps)-1].To, b)
		if err != nil || !slices.Equal(got, sps) {
			t.Fatalf("decode(encode(%v)) = %v, %v", sps, got, err)
		}
	}
}

// A spans column that does not describe its row fails with ErrSchema.
func TestSpansCorrupt(t *testing.T) {
	good := encodeSpans([]sink.Span{{From: 10, To: 11}, {From: 12, To: 14}})
	for name, c := range map[string]struct {
		from, to int64
		b        []byte
	}{
		"empty row":         {5, 5, nil},
		"truncated":         {10, 14, good[:len(good)-1]},
		"trailing bytes":    {10, 14, append(slices.Clone(good), 0)},
		"wrong end":         {10, 15, good},
		"wrong start":       {9, 14, good},
		"count of one":      {10, 14, []byte{1, 0, 4}},
		"touching spans":    {10, 14, []byte{2, 0, 2, 0, 2}},
		"empty span":        {10, 14, []byte{2, 0, 0, 1, 3}},
		"count beyond data": {10, 14, []byte{200, 1}},
	} {
		if _, err := decodeSpans(nil, c.from, c.to, c.b); !errors.Is(err, ErrSchema) {
			t.Errorf("%s: decode = %v, want ErrSchema", name, err)
		}
	}
}
