package envelope_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, cmd := range []envelope.Command{
		{Key: []byte("k"), Type: "t"},
		{Key: []byte("account-7"), Type: "ledger.post", Payload: []byte(`{"amount":12}`)},
		{Key: []byte{0, 1, 2}, Type: "bin", Payload: []byte{}, Headers: []envelope.Header{
			{Key: "trace", Value: []byte("abc")},
			{Key: "empty", Value: nil},
			{Key: "trace", Value: []byte("dup keys are kept in order")},
		}},
	} {
		rec, err := envelope.Encode("cmds", 3, cmd)
		if err != nil {
			t.Fatalf("Encode(%+v): %v", cmd, err)
		}
		if rec.Topic != "cmds" || rec.Partition != 3 {
			t.Errorf("Encode placed record at %s/%d, want cmds/3", rec.Topic, rec.Partition)
		}
		if len(rec.Headers) == 0 || rec.Headers[0].Key != envelope.TypeHeader || string(rec.Headers[0].Value) != cmd.Type {
			t.Errorf("Encode headers %+v: want %q=%q first", rec.Headers, envelope.TypeHeader, cmd.Type)
		}
		got, err := envelope.Decode(rec)
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
		cmd  envelope.Command
		want error
	}{
		{"nil key", envelope.Command{Type: "t"}, envelope.ErrEmptyKey},
		{"empty key", envelope.Command{Key: []byte{}, Type: "t"}, envelope.ErrEmptyKey},
		{"empty type", envelope.Command{Key: []byte("k")}, envelope.ErrEmptyType},
		{"type header as user header", envelope.Command{Key: []byte("k"), Type: "t",
			Headers: []envelope.Header{{Key: envelope.TypeHeader, Value: []byte("x")}}}, envelope.ErrReservedHeader},
		{"reserved prefix", envelope.Command{Key: []byte("k"), Type: "t",
			Headers: []envelope.Header{{Key: "ok"}, {Key: "workrouter-token"}}}, envelope.ErrReservedHeader},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.cmd.Validate(); !errors.Is(err, c.want) {
				t.Errorf("Validate() = %v, want %v", err, c.want)
			}
			if rec, err := envelope.Encode("cmds", 0, c.cmd); !errors.Is(err, c.want) || rec != nil {
				t.Errorf("Encode() = %v, %v, want nil, %v", rec, err, c.want)
			}
		})
	}
	ok := envelope.Command{Key: []byte("k"), Type: "t"}
	if _, err := envelope.Encode("", 0, ok); !errors.Is(err, envelope.ErrEmptyTopic) {
		t.Errorf("Encode with empty topic = %v, want ErrEmptyTopic", err)
	}
	if _, err := envelope.Encode("cmds", -1, ok); !errors.Is(err, envelope.ErrInvalidPartition) {
		t.Errorf("Encode with partition -1 = %v, want ErrInvalidPartition", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	typ := kgo.RecordHeader{Key: envelope.TypeHeader, Value: []byte("t")}
	for _, c := range []struct {
		name string
		rec  *kgo.Record
		want error
	}{
		{"no type header", &kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: "a"}}}, envelope.ErrMissingType},
		{"empty type header", &kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: envelope.TypeHeader}}}, envelope.ErrMissingType},
		{"no key", &kgo.Record{Headers: []kgo.RecordHeader{typ}}, envelope.ErrEmptyKey},
		{"two type headers", &kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{typ, typ}}, envelope.ErrMalformedRecord},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := envelope.Decode(c.rec)
			if !errors.Is(err, c.want) || !errors.Is(err, envelope.ErrMalformedRecord) {
				t.Errorf("Decode() = %v, want %v and ErrMalformedRecord", err, c.want)
			}
		})
	}
}

func TestDecodeSkipsOtherReservedHeaders(t *testing.T) {
	rec := &kgo.Record{Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{
		{Key: "workrouter-future", Value: []byte{1}},
		{Key: "user", Value: []byte("u")},
		{Key: envelope.TypeHeader, Value: []byte("t")},
	}}
	got, err := envelope.Decode(rec)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := envelope.Command{Key: []byte("k"), Type: "t", Payload: []byte("v"),
		Headers: []envelope.Header{{Key: "user", Value: []byte("u")}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decode = %+v, want %+v", got, want)
	}
}

// TestDecoderDecodesAsDecode: a Decoder returns what Decode returns, errors
// included (DecodeInto too, over a command that held something else), for more types than it remembers, and decodes a record of a
// type it remembers without allocating.
func TestDecoderDecodesAsDecode(t *testing.T) {
	var recs []*kgo.Record
	for i := range 3 * envelope.DecoderTypes {
		cmd := envelope.Command{Key: fmt.Appendf(nil, "k%d", i), Type: fmt.Sprintf("type-%d", i%(2*envelope.DecoderTypes)), Payload: []byte("p")}
		if i%5 == 0 {
			cmd.Headers = []envelope.Header{{Key: "h", Value: []byte("v")}}
		}
		rec, err := envelope.Encode("t", 0, cmd)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	recs = append(recs, &kgo.Record{Topic: "t", Key: []byte("k")}, // no type
		&kgo.Record{Topic: "t", Headers: []kgo.RecordHeader{{Key: envelope.TypeHeader, Value: []byte("x")}}}, // no key
		&kgo.Record{Topic: "t", Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: envelope.TypeHeader, Value: []byte("x")}, {Key: envelope.TypeHeader, Value: []byte("y")}}})
	var d envelope.Decoder
	for round := range 2 {
		for i, rec := range recs {
			want, wantErr := envelope.Decode(rec)
			got, err := d.Decode(rec)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, record %d: Decoder gave %+v, %v; Decode gave %+v, %v", round, i, got, err, want, wantErr)
			}
			into := envelope.Command{Key: []byte("stale"), Type: "stale", Headers: []envelope.Header{{Key: "stale"}}}
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
	var into envelope.Command
	if allocs := testing.AllocsPerRun(100, func() { _ = d.DecodeInto(rec, &into) }); allocs != 0 {
		t.Fatalf("Decoder.DecodeInto of a remembered type allocates %v times, want 0", allocs)
	}
}

// TestReservedHeaders: every reserved header that ReservedHeaderPrefix's
// list names, the token header of package epochs included, starts with the
// prefix, is refused as a user header, and is left out of a decoded
// command's user headers.
func TestReservedHeaders(t *testing.T) {
	tokenKey, _, err := epochs.Token{Group: "g", Topic: "t", Partition: 1, Epoch: 2, Member: "m"}.Header()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{envelope.TypeHeader, envelope.IDHeader, envelope.RedriveOfHeader, envelope.RedriveForHeader, epochs.HeaderKey, tokenKey} {
		if !strings.HasPrefix(key, envelope.ReservedHeaderPrefix) {
			t.Errorf("reserved header %q does not start with %q", key, envelope.ReservedHeaderPrefix)
		}
		cmd := envelope.Command{Key: []byte("k"), Type: "t", Headers: []envelope.Header{{Key: key, Value: []byte("v")}}}
		if err := cmd.Validate(); !errors.Is(err, envelope.ErrReservedHeader) {
			t.Errorf("Validate of a user header %q = %v, want ErrReservedHeader", key, err)
		}
		if key == envelope.TypeHeader {
			continue
		}
		rec, err := envelope.Encode("t", 0, envelope.Command{Key: []byte("k"), Type: "t"})
		if err != nil {
			t.Fatal(err)
		}
		value := []byte("v")
		if key == epochs.HeaderKey { // it must hold a token (see TestUpstreamRoundTrip)
			_, value, _ = epochs.Token{Group: "g", Topic: "t", Partition: 1, Epoch: 2, Member: "m"}.Header()
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: key, Value: value})
		if got, err := envelope.Decode(rec); err != nil || len(got.Headers) != 0 {
			t.Errorf("Decode of a record with header %q = %+v, %v; want no user headers", key, got, err)
		}
	}
}

// TestCommandIDRoundTrip: a command's ID travels in one IDHeader, right
// after the type header, and decodes back (Decode, Decoder.Decode and
// DecodeInto alike); a command without one has no IDHeader and decodes
// with ID "".
func TestCommandIDRoundTrip(t *testing.T) {
	for _, cmd := range []envelope.Command{
		{Key: []byte("k"), Type: "t", ID: "7b0c2c9e-3a1f-4c8e-9d55-0b6f1f2a9e41"},
		{Key: []byte("k"), Type: "t", ID: "commande-n°42", Payload: []byte("p"), Headers: []envelope.Header{{Key: "trace", Value: []byte("abc")}}},
		{Key: []byte("k"), Type: "t", ID: strings.Repeat("x", envelope.MaxIDLen)},
		{Key: []byte("k"), Type: "t"},
	} {
		rec, err := envelope.Encode("cmds", 0, cmd)
		if err != nil {
			t.Fatalf("Encode(%+v): %v", cmd, err)
		}
		var ids []string
		for _, h := range rec.Headers {
			if h.Key == envelope.IDHeader {
				ids = append(ids, string(h.Value))
			}
		}
		switch {
		case cmd.ID == "" && len(ids) != 0:
			t.Errorf("Encode of a command without an ID wrote %s headers %q", envelope.IDHeader, ids)
		case cmd.ID != "" && (len(ids) != 1 || ids[0] != cmd.ID || rec.Headers[1].Key != envelope.IDHeader):
			t.Errorf("Encode of ID %q wrote headers %+v, want one %s second", cmd.ID, rec.Headers, envelope.IDHeader)
		}
		var d envelope.Decoder
		var into envelope.Command
		for i, decode := range []func() (envelope.Command, error){
			func() (envelope.Command, error) { return envelope.Decode(rec) },
			func() (envelope.Command, error) { return d.Decode(rec) },
			func() (envelope.Command, error) { err := d.DecodeInto(rec, &into); return into, err },
		} {
			got, err := decode()
			if err != nil {
				t.Fatalf("decoder %d of %+v: %v", i, cmd, err)
			}
			if !reflect.DeepEqual(got, cmd) {
				t.Errorf("decoder %d: Decode(Encode(x)) = %+v, want %+v", i, got, cmd)
			}
		}
	}
}

// TestInvalidIDs: Validate and Encode refuse an ID that is too long, not
// UTF-8 or holds a control character, and Decode refuses a record whose
// IDHeader is empty or invalid, or that has two, as malformed.
func TestInvalidIDs(t *testing.T) {
	for _, id := range []string{
		strings.Repeat("x", envelope.MaxIDLen+1),
		"a\x00b", "tab\there", "del\x7f", "\xff\xfe", "c1-\u0085",
	} {
		cmd := envelope.Command{Key: []byte("k"), Type: "t", ID: id}
		if err := cmd.Validate(); !errors.Is(err, envelope.ErrInvalidID) {
			t.Errorf("Validate of ID %q = %v, want ErrInvalidID", id, err)
		}
		if rec, err := envelope.Encode("cmds", 0, cmd); !errors.Is(err, envelope.ErrInvalidID) || rec != nil {
			t.Errorf("Encode of ID %q = %v, %v, want ErrInvalidID", id, rec, err)
		}
		rec := &kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{
			{Key: envelope.TypeHeader, Value: []byte("t")}, {Key: envelope.IDHeader, Value: []byte(id)}}}
		if _, err := envelope.Decode(rec); !errors.Is(err, envelope.ErrInvalidID) || !errors.Is(err, envelope.ErrMalformedRecord) {
			t.Errorf("Decode of a record with ID %q = %v, want ErrInvalidID and ErrMalformedRecord", id, err)
		}
	}
	typ := kgo.RecordHeader{Key: envelope.TypeHeader, Value: []byte("t")}
	for name, headers := range map[string][]kgo.RecordHeader{
		"empty ID":     {typ, {Key: envelope.IDHeader}},
		"two IDs":      {typ, {Key: envelope.IDHeader, Value: []byte("a")}, {Key: envelope.IDHeader, Value: []byte("a")}},
		"two targets":  {typ, {Key: envelope.RedriveForHeader, Value: []byte("g")}, {Key: envelope.RedriveForHeader, Value: []byte("g")}},
		"empty target": {typ, {Key: envelope.RedriveForHeader}},
	} {
		var d envelope.Decoder
		into := envelope.Command{Key: []byte("stale"), ID: "stale"}
		if _, err := envelope.Decode(&kgo.Record{Key: []byte("k"), Headers: headers}); !errors.Is(err, envelope.ErrMalformedRecord) {
			t.Errorf("%s: Decode = %v, want ErrMalformedRecord", name, err)
		}
		if err := d.DecodeInto(&kgo.Record{Key: []byte("k"), Headers: headers}, &into); !errors.Is(err, envelope.ErrMalformedRecord) ||
			!reflect.DeepEqual(into, envelope.Command{}) {
			t.Errorf("%s: DecodeInto = %v, left %+v, want ErrMalformedRecord and a zero command", name, err, into)
		}
	}
}

// TestRedriveFor: Decode returns a RedriveForHeader's value as RedriveFor
// (not as a user header), and a command with RedriveFor set cannot be
// sent, so that one decoded from a redrive is not sent on as one.
func TestRedriveFor(t *testing.T) {
	rec, err := envelope.Encode("cmds", 0, envelope.Command{Key: []byte("k"), Type: "t", ID: "c-1"})
	if err != nil {
		t.Fatal(err)
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: envelope.RedriveOfHeader, Value: []byte("7")},
		kgo.RecordHeader{Key: envelope.RedriveForHeader, Value: []byte("ledger-workers")})
	got, err := envelope.Decode(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := envelope.Command{Key: []byte("k"), Type: "t", ID: "c-1", RedriveFor: "ledger-workers"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode = %+v, want %+v", got, want)
	}
	if err := got.Validate(); !errors.Is(err, envelope.ErrRedriveFor) {
		t.Errorf("Validate of a command with RedriveFor = %v, want ErrRedriveFor", err)
	}
	if _, err := envelope.Encode("cmds", 0, got); !errors.Is(err, envelope.ErrRedriveFor) {
		t.Errorf("Encode of a command with RedriveFor = %v, want ErrRedriveFor", err)
	}
}

// TestDecoderAllocationsWithAnID: a Decoder still decodes a record of a
// type it remembers without allocating when the record has no ID, and
// with one allocation per DecoderIDChunk bytes of IDs when it has one:
// the IDs it returned stay what they were while it fills its chunks, and
// Decode (no Decoder) copies each.
func TestDecoderAllocationsWithAnID(t *testing.T) {
	var d envelope.Decoder
	var into envelope.Command
	rec, err := envelope.Encode("t", 0, envelope.Command{Key: []byte("k"), Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.DecodeInto(rec, &into); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = d.DecodeInto(rec, &into) }); allocs != 0 {
		t.Errorf("DecodeInto of a record without an ID allocates %v times, want 0", allocs)
	}

	const n = 1000
	recs := make([]*kgo.Record, n)
	want := make([]string, n)
	for i := range recs {
		want[i] = fmt.Sprintf("7b0c2c9e-3a1f-4c8e-9d55-%012d", i)[:20+i%17]
		if recs[i], err = envelope.Encode("t", 0, envelope.Command{Key: []byte("k"), Type: "t", ID: want[i]}); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]string, n)
	i := 0
	allocs := testing.AllocsPerRun(1, func() {
		for i = range recs {
			_ = d.DecodeInto(recs[i], &into)
			got[i] = into.ID
		}
	})
	bytes := 0
	for _, id := range want {
		bytes += len(id)
	}
	if limit := float64(bytes/envelope.DecoderIDChunk + 2); allocs > limit {
		t.Errorf("DecodeInto of %d records with IDs (%d bytes) allocates %v times, want at most %v", n, bytes, allocs, limit)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ID %d is %q after the later decodes, want %q", i, got[i], want[i])
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = envelope.Decode(recs[1]) }); allocs != 1 {
		t.Errorf("Decode of a record with an ID allocates %v times, want 1 (the ID's copy)", allocs)
	}
}

// TestUpstreamRoundTrip: a command's Upstream token travels in one
// epochs.HeaderKey header and decodes back; an invalid one is refused by
// Validate, and a record whose token header does not decode, or that has
// two, is malformed.
func TestUpstreamRoundTrip(t *testing.T) {
	up := epochs.Token{Group: "orders", Topic: "orders", Partition: 4, Epoch: 9, Member: "m-1"}
	cmd := envelope.Command{Key: []byte("k"), Type: "ship", ID: "ship-1", Upstream: up}
	rec, err := envelope.Encode("shipping", 0, cmd)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, h := range rec.Headers {
		if h.Key == epochs.HeaderKey {
			n++
			if got, err := epochs.FromHeader(h.Value); err != nil || got != up {
				t.Fatalf("the header holds %+v, %v; want %+v", got, err, up)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d token headers, want 1", n)
	}
	var d envelope.Decoder
	for _, dec := range []func(*kgo.Record) (envelope.Command, error){envelope.Decode, d.Decode} {
		got, err := dec(rec)
		if err != nil || got.Upstream != up || len(got.Headers) != 0 {
			t.Fatalf("decoded %+v, %v; want Upstream %+v and no user headers", got, err, up)
		}
	}
	// Without Upstream, no header.
	plain, _ := envelope.Encode("shipping", 0, envelope.Command{Key: []byte("k"), Type: "ship"})
	for _, h := range plain.Headers {
		if h.Key == epochs.HeaderKey {
			t.Fatal("a command without Upstream carries a token header")
		}
	}
	for _, bad := range []epochs.Token{{Group: "g", Topic: "t", Epoch: 1}, {Group: "g", Topic: "t", Epoch: -1, Member: "m"},
		{Group: strings.Repeat("g", epochs.MaxFieldLen+1), Topic: "t", Member: "m"}} {
		c := cmd
		c.Upstream = bad
		if err := c.Validate(); !errors.Is(err, envelope.ErrInvalidUpstream) || !errors.Is(err, epochs.ErrInvalidToken) {
			t.Errorf("Validate with Upstream %+v = %v, want ErrInvalidUpstream and epochs.ErrInvalidToken", bad, err)
		}
	}
	_, good, _ := up.Header()
	for name, hs := range map[string][]kgo.RecordHeader{
		"garbage": {{Key: epochs.HeaderKey, Value: []byte{1}}},
		"invalid": {{Key: epochs.HeaderKey, Value: mustHeader(t, epochs.Token{Group: "g", Topic: "t"})}},
		"twice":   {{Key: epochs.HeaderKey, Value: good}, {Key: epochs.HeaderKey, Value: good}},
	} {
		r := &kgo.Record{Key: []byte("k"), Headers: append([]kgo.RecordHeader{{Key: envelope.TypeHeader, Value: []byte("t")}}, hs...)}
		if _, err := envelope.Decode(r); !errors.Is(err, envelope.ErrMalformedRecord) {
			t.Errorf("%s: Decode = %v, want ErrMalformedRecord", name, err)
		}
	}
}

func mustHeader(t *testing.T, tok epochs.Token) []byte {
	t.Helper()
	_, v, err := tok.Header()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
