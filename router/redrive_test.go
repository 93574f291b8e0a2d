package router_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/workrouter/workrouter/envelope"

	"github.com/workrouter/workrouter/router"
)

// TestRedriveAddsReservedHeader: a redriven command goes to its key's
// partition with its type, payload and user headers, plus the reserved
// RedriveOfHeader naming its dead letter, which Decode keeps out of the
// user headers; an empty source and a reserved user header are refused
// and send nothing.
func TestRedriveAddsReservedHeader(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	ctx := testContext(t)
	cmd := router.Command{Key: []byte("acct-7"), Type: "deposit", Payload: []byte(`{"amount":5}`),
		Headers: []envelope.Header{{Key: "trace", Value: []byte("abc")}}}

	if _, err := r.Redrive(ctx, cmd, ""); !errors.Is(err, router.ErrNoRedriveSource) {
		t.Fatalf("Redrive without a source: %v, want ErrNoRedriveSource", err)
	}
	bad := cmd
	bad.Headers = []envelope.Header{{Key: envelope.RedriveOfHeader, Value: []byte("1")}}
	if _, err := r.Redrive(ctx, bad, "1"); !errors.Is(err, envelope.ErrReservedHeader) {
		t.Fatalf("Redrive with a reserved user header: %v, want ErrReservedHeader", err)
	}

	res, err := r.Redrive(ctx, cmd, "42")
	if err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	if want := envelope.Partition(cmd.Key, 4); res.Partition != want || res.Offset != 0 {
		t.Fatalf("Redrive went to %d@%d, want %d@0", res.Partition, res.Offset, want)
	}
	recs := consume(t, addrs, topic, 1)
	if len(recs) != 1 {
		t.Fatalf("consumed %d records, want exactly the redriven one", len(recs))
	}
	rec := recs[0]
	var of []string
	for _, h := range rec.Headers {
		if h.Key == envelope.RedriveOfHeader {
			of = append(of, string(h.Value))
		}
	}
	if len(of) != 1 || of[0] != "42" {
		t.Fatalf("record headers %v: want one %s: 42", rec.Headers, envelope.RedriveOfHeader)
	}
	got, err := envelope.Decode(rec)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got.Type != cmd.Type || !bytes.Equal(got.Key, cmd.Key) || !bytes.Equal(got.Payload, cmd.Payload) ||
		len(got.Headers) != 1 || got.Headers[0].Key != "trace" {
		t.Fatalf("decoded %+v, want %+v (the redrive header is not a user header)", got, cmd)
	}
}
