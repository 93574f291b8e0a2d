package envelope_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/internal/cmdheaders"
)

// FuzzDecode feeds the decoder records as they travel: wire is one record
// of a Kafka v2 record batch (a varint length, then attributes, timestamp
// and offset deltas, key, value and headers), read as the client reads a
// fetched record into a kgo.Record (readRecord). The corpus
// (testdata/fuzz/FuzzDecode) holds records that kcat, confluent-kafka-python
// and kafka-python produced to kfake, captured from their produce requests,
// records the router writes, one record for each way a record can be
// malformed, and what fuzzing kept.
//
// For every record that reads: Decode, Decoder.Decode and
// Decoder.DecodeInto agree; every error matches ErrMalformedRecord and
// leaves a zero Command; a command one Decoder returned survives that
// Decoder decoding another record with other ID bytes, and the record's
// own bytes changing; and a decoded command, encoded again as the router
// encodes it, decodes back equal.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, wire []byte) {
		wire = bytes.Clone(wire) // the checks below overwrite the record's bytes
		rec, ok := readRecord(wire)
		if !ok {
			return
		}
		want, wantErr := envelope.Decode(rec)

		var d envelope.Decoder
		got, err := d.Decode(rec)
		into := envelope.Command{Key: []byte("stale"), Type: "stale", ID: "stale", RedriveFor: "stale",
			Headers: []envelope.Header{{Key: "stale"}}}
		intoErr := d.DecodeInto(rec, &into)

		for name, e := range map[string]error{"Decode": wantErr, "Decoder.Decode": err, "Decoder.DecodeInto": intoErr} {
			if (e == nil) != (wantErr == nil) || e != nil && e.Error() != wantErr.Error() {
				t.Fatalf("%s error %v, Decode error %v", name, e, wantErr)
			}
			if e != nil && !errors.Is(e, envelope.ErrMalformedRecord) {
				t.Fatalf("%s error %v does not match ErrMalformedRecord", name, e)
			}
		}
		if wantErr != nil {
			for name, c := range map[string]envelope.Command{"Decode": want, "Decoder.Decode": got, "Decoder.DecodeInto": into} {
				if !reflect.DeepEqual(c, envelope.Command{}) {
					t.Fatalf("%s failed (%v) but returned %+v, want the zero Command", name, wantErr, c)
				}
			}
			return
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(into, want) {
			t.Fatalf("Decode %+v, Decoder.Decode %+v, Decoder.DecodeInto %+v", want, got, into)
		}

		// The ID and RedriveFor are the command's own: neither the same
		// Decoder decoding a record with other ID bytes nor the record's
		// bytes being overwritten changes them.
		id, redriveFor, typ := strings.Clone(want.ID), strings.Clone(want.RedriveFor), strings.Clone(want.Type)
		other := *rec
		other.Headers = append([]kgo.RecordHeader(nil), rec.Headers...)
		otherID := []byte("other-" + strings.Repeat("x", len(id)%7))
		replaced := false
		for i, h := range other.Headers {
			if h.Key == envelope.IDHeader {
				other.Headers[i].Value, replaced = otherID, true
			}
		}
		if !replaced {
			other.Headers = append(other.Headers, kgo.RecordHeader{Key: envelope.IDHeader, Value: otherID})
		}
		var again envelope.Command
		if err := d.DecodeInto(&other, &again); err == nil && again.ID != string(otherID) {
			t.Fatalf("second record decoded with ID %q, want %q", again.ID, otherID)
		}
		_, _ = d.Decode(&other)
		for _, h := range rec.Headers {
			if h.Key == envelope.IDHeader || h.Key == envelope.RedriveForHeader || h.Key == envelope.TypeHeader {
				for i := range h.Value {
					h.Value[i] ^= 0xff
				}
			}
		}
		for name, c := range map[string]envelope.Command{"Decode": want, "Decoder.Decode": got, "Decoder.DecodeInto": into} {
			if c.ID != id || c.RedriveFor != redriveFor || c.Type != typ {
				t.Fatalf("%s: ID, RedriveFor, Type %q, %q, %q changed to %q, %q, %q after the Decoder decoded another record and the record's bytes changed",
					name, id, redriveFor, typ, c.ID, c.RedriveFor, c.Type)
			}
		}
		for _, h := range rec.Headers { // restore the record for the round trip
			if h.Key == envelope.IDHeader || h.Key == envelope.RedriveForHeader || h.Key == envelope.TypeHeader {
				for i := range h.Value {
					h.Value[i] ^= 0xff
				}
			}
		}

		// Sent on as the router sends it (a redrive writes RedriveFor
		// itself), the command decodes back equal.
		send := want
		send.RedriveFor = ""
		if err := send.Validate(); err != nil {
			t.Fatalf("decoded command %+v cannot be sent on: %v", want, err)
		}
		var idb []byte
		if want.ID != "" {
			idb = []byte(want.ID)
		}
		headers := cmdheaders.AppendUpstream(cmdheaders.Append(nil, []byte(send.Type), idb, send.Headers), send.Upstream)
		if want.RedriveFor != "" {
			headers = append(headers, kgo.RecordHeader{Key: envelope.RedriveForHeader, Value: []byte(want.RedriveFor)})
		}
		back, err := envelope.Decode(&kgo.Record{Key: send.Key, Value: send.Payload, Headers: headers})
		if err != nil {
			t.Fatalf("re-encoded command %+v does not decode: %v", want, err)
		}
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("re-encoded command decodes to %+v, want %+v", back, want)
		}
	})
}

// readRecord reads one v2 record from wire the way the client reads a
// fetched batch's records into kgo.Records: a varint length, then
// attributes, timestamp delta, offset delta, key and value (varint length,
// -1 for null) and a varint count of headers (key, value). It reports
// false where the client would stop reading.
func readRecord(wire []byte) (*kgo.Record, bool) {
	length, n := binary.Varint(wire)
	if n <= 0 || length < 0 || int64(len(wire)-n) < length {
		return nil, false
	}
	r := reader{b: wire[n : n+int(length)]}
	r.take(1)  // attributes, unused
	r.varint() // timestamp delta
	r.varint() // offset delta
	rec := &kgo.Record{Topic: "fuzz", Key: r.bytes(), Value: r.bytes()}
	if nh := r.varint(); nh > 0 && !r.bad {
		if nh > int64(len(r.b)) { // each header takes at least two bytes
			return nil, false
		}
		rec.Headers = make([]kgo.RecordHeader, nh)
		for i := range rec.Headers {
			rec.Headers[i] = kgo.RecordHeader{Key: string(r.bytes()), Value: r.bytes()}
		}
	}
	return rec, !r.bad
}

// reader reads Kafka's varint-framed fields; a failed read sets bad.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n > len(r.b) {
		r.bad = true
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) varint() int64 {
	if r.bad {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes reads a varint length and that many bytes: nil for -1 (null).
func (r *reader) bytes() []byte {
	n := r.varint()
	switch {
	case r.bad:
		return nil
	case n < -1 || n > int64(len(r.b)):
		r.bad = true
		return nil
	case n == -1:
		return nil
	}
	return r.take(int(n))
}
