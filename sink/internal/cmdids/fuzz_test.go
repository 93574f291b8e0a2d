package cmdids

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

// FuzzRowCodec checks the stored form of a row of command IDs both ways.
// row is bytes read back from a table: Decode never panics on them, fails
// only with ErrCorrupt, and what it decodes encodes and decodes back the
// same. ids (the IDs, separated by NUL bytes, which an ID never holds) and
// gaps (varints: the distance of each ID's offset from the previous one;
// see batch) make a batch from first: Encode then Decode gives
// its offsets and IDs back, and a row cut short anywhere is refused or
// decodes to the leading IDs of the batch, never to others.
//
// The seeds below are the rows the sinks write (IDs the router generates,
// UUIDs, short keys) and one row for each way Decode refuses; the checked-in
// corpus (testdata/fuzz/FuzzRowCodec) holds what fuzzing kept.
func FuzzRowCodec(f *testing.F) {
	routerIDs := "wr-01J9Z3K7Q8M2N4P6R8T0V2X4Z6-00000001\x00wr-01J9Z3K7Q8M2N4P6R8T0V2X4Z6-00000002\x00wr-01J9Z3K7Q8M2N4P6R8T0V2X4Z6-00000003"
	uuids := "6ba7b810-9dad-41d1-80b4-00c04fd430c8\x006BA7B810-9DAD-41D1-80B4-00C04FD430C8\x006ba7b810-9dad-41d1-80b4-00c04fd430cg"
	mixed := "a\x00\x00order-17\x00order-18\x00ord\x00commande-é-1"
	for _, s := range []struct {
		first int64
		ids   string
		gaps  []byte
	}{
		{0, routerIDs, nil},
		{1 << 40, uuids, binary.AppendUvarint(binary.AppendUvarint(nil, 0), 1000)},
		{7, mixed, []byte{3, 0, 1}},
		{math.MaxInt64 - 2, "x\x00y", nil},
	} {
		offs, ids, _ := batch(s.first, s.ids, s.gaps)
		f.Add(s.first, Encode(s.first, offs, ids), s.ids, s.gaps)
	}
	for _, row := range [][]byte{
		{},
		{0x80},                    // offset varint cut short
		{0, 0x80},                 // ID header varint cut short
		{0, 1, 0xab},              // UUID of 1 byte
		{0, 7, 0, 'a'},            // front-coded with no previous ID
		{0, 2, 'a', 0, 7, 2, 'b'}, // front-coded: prefix of 2 of a 1-byte ID
		{0, 8, 'a', 'b'},          // plain ID of 4 bytes, 2 there
		{0, 5, 'a'},               // ID header of no known form
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 2, 'a'}, // distance past int64: wraps, and round-trips
	} {
		f.Add(int64(0), row, "", []byte(nil))
	}

	f.Fuzz(func(t *testing.T, first int64, row []byte, idText string, gaps []byte) {
		// Bytes from the table.
		offs, ids, err := Decode(first, row)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode(%d, %x): %v does not match ErrCorrupt", first, row, err)
			}
		} else {
			back, backIDs, err := Decode(first, Encode(first, offs, ids))
			if err != nil || !slices.Equal(back, offs) || !slices.Equal(backIDs, ids) {
				t.Fatalf("Decode(%d, %x) = %v %q; encoded again it decodes to %v %q, %v", first, row, offs, ids, back, backIDs, err)
			}
		}

		// A batch of IDs at offsets.
		offs, ids, ok := batch(first, idText, gaps)
		if !ok {
			return
		}
		enc := Encode(first, offs, ids)
		gotOffs, gotIDs, err := Decode(first, enc)
		if err != nil || !slices.Equal(gotOffs, offs) || !slices.Equal(gotIDs, ids) {
			t.Fatalf("Decode(Encode(%d, %v, %q)) = %v %q, %v", first, offs, ids, gotOffs, gotIDs, err)
		}
		for cut := range len(enc) {
			o, i, err := Decode(first, enc[:cut])
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("row cut to %d of %d bytes: %v does not match ErrCorrupt", cut, len(enc), err)
				}
				continue
			}
			if len(o) >= len(offs) || !slices.Equal(o, offs[:len(o)]) || !slices.Equal(i, ids[:len(i)]) {
				t.Fatalf("row of %v %q cut to %d of %d bytes decodes to %v %q", offs, ids, cut, len(enc), o, i)
			}
		}
	})
}

// batch returns the IDs of text (NUL-separated; no IDs for "") at
// ascending offsets from first: each the previous one (first for the first
// ID) plus its gap, a varint of gaps (0 for the first ID and 1 for the
// others where gaps runs out). It returns false if an offset would pass
// the largest int64.
func batch(first int64, text string, gaps []byte) (offs []int64, ids []string, ok bool) {
	if text == "" {
		return nil, nil, true
	}
	ids = strings.Split(text, "\x00")
	off := first
	for i := range ids {
		gap := uint64(min(i, 1))
		if g, n := binary.Uvarint(gaps); n > 0 {
			gap, gaps = g, gaps[n:]
		}
		if gap > uint64(math.MaxInt64-off) {
			return nil, nil, false
		}
		off += int64(gap)
		offs = append(offs, off)
	}
	return offs, ids, true
}
