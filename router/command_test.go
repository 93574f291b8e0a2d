package router_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/router"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, cmd := range []router.Command{
		{Key: []byte("k"), Type: "t"},
		{Key: []byte("account-7"), Type: "ledger.post", Payload: []byte(`{"amount":12}`)},
		{Key: []byte{0, 1, 2}, Type: "bin", Payload: []byte{}, Headers: []router.Header{
			{Key: "trace", Value: []byte("abc")},
			{Key: "empty", Value: nil},
			{Key: "trace", Value: []byte("dup keys are kept in order")},
		}},
	} {
		rec, err := router.Encode("cmds", 3, cmd)
		if err != nil {
			t.Fatalf("Encode(%+v): %v", cmd, err)
		}
		if rec.Topic != "cmds" || rec.Partition != 3 {
			t.Errorf("Encode placed record at %s/%d, want cmds/3", rec.Topic, rec.Partition)
		}
		if len(rec.Headers) == 0 || rec.Headers[0].Key != router.TypeHeader || string(rec.Headers[0].Value) != cmd.Type {
			t.Errorf("Encode headers %+v: want %q=%q first", rec.Headers, router.TypeHeader, cmd.Type)
		}
		got, err := router.Decode(rec)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)): %v", cmd, err)
		}
		if !reflect.DeepEqual(got, cmd) {
			t.Errorf("Decode(Encode(x)) = %+v, want %+v", got, cmd)
		}
	}
}

func TestValidationErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cmd  router.Command
		want error
	}{
		{"nil key", router.Command{Type: "t"}, router.ErrEmptyKey},
		{"empty key", router.Command{Key: []byte{}, Type: "t"}, router.ErrEmptyKey},
		{"empty type", router.Command{Key: []byte("k")}, router.ErrEmptyType},
		{"type header as user header", router.Command{Key: []byte("k"), Type: "t",
			Headers: []router.Header{{Key: router.TypeHeader, Value: []byte("x")}}}, router.ErrReservedHeader},
		{"reserved prefix", router.Command{Key: []byte("k"), Type: "t",
			Headers: []router.Header{{Key: "ok"}, {Key: "workrouter-token"}}}, router.ErrReservedHeader},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.cmd.Validate(); !errors.Is(err, c.want) {
				t.Errorf("Validate() = %v, want %v", err, c.want)
			}
			if rec, err := router.Encode("cmds", 0, c.cmd); !errors.Is(err, c.want) || rec != nil {
				t.Errorf("Encode() = %v, %v, want nil, %v", rec, err, c.want)
			}
		})
	}
	ok := router.Command{Key: []byte("k"), Type: "t"}
	if _, err := router.Encode("", 0, ok); !errors.Is(err, router.ErrEmptyTopic) {
		t.Errorf("Encode with empty topic = %v, want ErrEmptyTopic", err)
	}
	if _, err := router.Encode("cmds", -1, ok); !errors.Is(err, router.ErrInvalidPartition) {
		t.Errorf("Encode with partition -1 = %v, want ErrInvalidPartition", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	typ := kgo.RecordHeader{Key: router.TypeHeader, Value: []byte("t")}
	for _, c := range []struct {
		name string
		rec  *kgo.Record
		want error
	}{
		{"no type header", &kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: "a"}}}, router.ErrMissingType},
		{"empty type header", &kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: router.TypeHeader}}}, router.ErrMissingType},
		{"no key", &kgo.Record{Headers: []kgo.RecordHeader{typ}}, router.ErrEmptyKey},
		{"two type headers", &kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{typ, typ}}, router.ErrMalformedRecord},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := router.Decode(c.rec)
			if !errors.Is(err, c.want) || !errors.Is(err, router.ErrMalformedRecord) {
				t.Errorf("Decode() = %v, want %v and ErrMalformedRecord", err, c.want)
			}
		})
	}
}

func TestDecodeSkipsOtherReservedHeaders(t *testing.T) {
	rec := &kgo.Record{Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{
		{Key: "workrouter-token", Value: []byte{1}},
		{Key: "user", Value: []byte("u")},
		{Key: router.TypeHeader, Value: []byte("t")},
	}}
	got, err := router.Decode(rec)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := router.Command{Key: []byte("k"), Type: "t", Payload: []byte("v"),
		Headers: []router.Header{{Key: "user", Value: []byte("u")}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decode = %+v, want %+v", got, want)
	}
}

// TestDecoderDecodesAsDecode: a Decoder returns what Decode returns, errors
// included (DecodeInto too, over a command that held something else), for more types than it remembers, and decodes a record of a
// type it remembers without allocating.
func TestDecoderDecodesAsDecode(t *testing.T) {
	var recs []*kgo.Record
	for i := range 3 * router.DecoderTypes {
		cmd := router.Command{Key: fmt.Appendf(nil, "k%d", i), Type: fmt.Sprintf("type-%d", i%(2*router.DecoderTypes)), Payload: []byte("p")}
		if i%5 == 0 {
			cmd.Headers = []router.Header{{Key: "h", Value: []byte("v")}}
		}
		rec, err := router.Encode("t", 0, cmd)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	recs = append(recs, &kgo.Record{Topic: "t", Key: []byte("k")}, // no type
		&kgo.Record{Topic: "t", Headers: []kgo.RecordHeader{{Key: router.TypeHeader, Value: []byte("x")}}}, // no key
		&kgo.Record{Topic: "t", Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: router.TypeHeader, Value: []byte("x")}, {Key: router.TypeHeader, Value: []byte("y")}}})
	var d router.Decoder
	for round := range 2 {
		for i, rec := range recs {
			want, wantErr := router.Decode(rec)
			got, err := d.Decode(rec)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, record %d: Decoder gave %+v, %v; Decode gave %+v, %v", round, i, got, err, want, wantErr)
			}
			into := router.Command{Key: []byte("stale"), Type: "stale", Headers: []router.Header{{Key: "stale"}}}
			err = d.DecodeInto(rec, &into)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(into, want) {
				t.Fatalf("round %d, record %d: DecodeInto gave %+v, %v; Decode gave %+v, %v", round, i, into, err, want, wantErr)
			}
		}
	}
	rec := recs[1] // a remembered type, no user headers
	if allocs := testing.AllocsPerRun(100, func() { _, _ = d.Decode(rec) }); allocs != 0 {
		t.Fatalf("Decoder.Decode of a remembered type allocates %v times, want 0", allocs)
	}
	var into router.Command
	if allocs := testing.AllocsPerRun(100, func() { _ = d.DecodeInto(rec, &into) }); allocs != 0 {
		t.Fatalf("Decoder.DecodeInto of a remembered type allocates %v times, want 0", allocs)
	}
}
