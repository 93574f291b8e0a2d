package cmdheaders_test

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/cmdheaders"
)

// TestAgreesWithEncode: Append then AppendUpstream give the headers
// envelope.Encode writes, in its order, with and without an ID, user
// headers and an upstream token, and envelope.Decode reads the command
// back from them.
func TestAgreesWithEncode(t *testing.T) {
	up := epochs.Token{Group: "g", Topic: "t", Partition: 3, Epoch: 7, Member: "m"}
	for _, cmd := range []envelope.Command{
		{Key: []byte("k"), Type: "deposit", Payload: []byte("p")},
		{Key: []byte("k"), Type: "deposit", ID: "c-1", Payload: []byte("p")},
		{Key: []byte("k"), Type: "deposit", Headers: []envelope.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: nil}}},
		{Key: []byte("k"), Type: "deposit", ID: "c-2", Headers: []envelope.Header{{Key: "a", Value: []byte("1")}}, Upstream: up},
		{Key: []byte("k"), Type: "deposit", Upstream: up},
	} {
		want, err := envelope.Encode("topic", 0, cmd)
		if err != nil {
			t.Fatalf("Encode(%+v): %v", cmd, err)
		}
		got := cmdheaders.AppendUpstream(cmdheaders.Append(nil, []byte(cmd.Type), []byte(cmd.ID), cmd.Headers), cmd.Upstream)
		if !equal(got, want.Headers) {
			t.Errorf("command %+v: headers\n%v\nwant (Encode's)\n%v", cmd, got, want.Headers)
		}
		back, err := envelope.Decode(&kgo.Record{Key: cmd.Key, Value: cmd.Payload, Headers: got})
		if err != nil {
			t.Fatalf("Decode of the appended headers of %+v: %v", cmd, err)
		}
		if back.Type != cmd.Type || back.ID != cmd.ID || back.Upstream != cmd.Upstream || len(back.Headers) != len(cmd.Headers) {
			t.Errorf("decoded %+v, want %+v", back, cmd)
		}
	}
}

func equal(a, b []kgo.RecordHeader) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}
