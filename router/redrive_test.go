package router_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"

	"github.com/workrouter/workrouter/router"
)

// headerValues returns the values of rec's headers named key.
func headerValues(rec *kgo.Record, key string) []string {
	var vs []string
	for _, h := range rec.Headers {
		if h.Key == key {
			vs = append(vs, string(h.Value))
		}
	}
	return vs
}

// TestRedriveAddsReservedHeader: a redriven command goes to its key's
// partition with its type, payload, user headers and ID, plus the
// reserved RedriveOfHeader naming its dead letter and RedriveForHeader
// naming the group it is for (one of each, even for a command decoded
// from the dead letter of an earlier redrive), which Decode keeps out of
// the user headers; an empty source or group and a reserved user header
// are refused and send nothing.
func TestRedriveAddsReservedHeader(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	ctx := testContext(t)
	cmd := router.Command{Key: []byte("acct-7"), Type: "deposit", Payload: []byte(`{"amount":5}`), ID: "deposit-c1",
		Headers: []envelope.Header{{Key: "trace", Value: []byte("abc")}}}
	o := router.RedriveOptions{DeadLetter: "42", Group: "ledger-workers"}

	if _, err := r.Redrive(ctx, cmd, router.RedriveOptions{Group: "g"}); !errors.Is(err, router.ErrNoRedriveSource) {
		t.Fatalf("Redrive without a source: %v, want ErrNoRedriveSource", err)
	}
	if _, err := r.Redrive(ctx, cmd, router.RedriveOptions{DeadLetter: "42"}); !errors.Is(err, router.ErrNoRedriveGroup) {
		t.Fatalf("Redrive without a group: %v, want ErrNoRedriveGroup", err)
	}
	for _, key := range []string{envelope.RedriveOfHeader, envelope.RedriveForHeader, envelope.IDHeader} {
		bad := cmd
		bad.Headers = []envelope.Header{{Key: key, Value: []byte("1")}}
		if _, err := r.Redrive(ctx, bad, o); !errors.Is(err, envelope.ErrReservedHeader) {
			t.Fatalf("Redrive with a user header %s: %v, want ErrReservedHeader", key, err)
		}
	}

	again := cmd
	again.RedriveFor = "an-earlier-target" // as decoded from a redrive's dead letter
	for i, c := range []router.Command{cmd, again} {
		res, err := r.Redrive(ctx, c, o)
		if err != nil {
			t.Fatalf("Redrive %d: %v", i, err)
		}
		if want := envelope.Partition(cmd.Key, 4); res.Partition != want || res.Offset != int64(i) || res.ID != cmd.ID {
			t.Fatalf("Redrive %d went to %d@%d with ID %q, want %d@%d with ID %q", i, res.Partition, res.Offset, res.ID, want, i, cmd.ID)
		}
	}
	recs := consume(t, addrs, topic, 2)
	if len(recs) != 2 {
		t.Fatalf("consumed %d records, want exactly the two redriven", len(recs))
	}
	for _, rec := range recs {
		if of, forGroup, ids := headerValues(rec, envelope.RedriveOfHeader), headerValues(rec, envelope.RedriveForHeader), headerValues(rec, envelope.IDHeader); len(of) != 1 || of[0] != "42" ||
			len(forGroup) != 1 || forGroup[0] != "ledger-workers" || len(ids) != 1 || ids[0] != cmd.ID {
			t.Fatalf("record headers %v: want one %s: 42, one %s: ledger-workers and one %s: %s", rec.Headers,
				envelope.RedriveOfHeader, envelope.RedriveForHeader, envelope.IDHeader, cmd.ID)
		}
		got, err := envelope.Decode(rec)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if got.Type != cmd.Type || !bytes.Equal(got.Key, cmd.Key) || !bytes.Equal(got.Payload, cmd.Payload) ||
			len(got.Headers) != 1 || got.Headers[0].Key != "trace" || got.ID != cmd.ID || got.RedriveFor != "ledger-workers" {
			t.Fatalf("decoded %+v, want %+v for ledger-workers (the redrive headers are not user headers)", got, cmd)
		}
	}
}

// TestRedriveOfACommandWithoutID: a dead letter's command without an ID
// (a foreign producer's) is redriven with one the router generates.
func TestRedriveOfACommandWithoutID(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	res, err := r.Redrive(testContext(t), router.Command{Key: []byte("k"), Type: "t"}, router.RedriveOptions{DeadLetter: "3", Group: "g"})
	if err != nil || res.ID == "" {
		t.Fatalf("Redrive = %+v, %v; want a generated ID", res, err)
	}
	recs := consume(t, addrs, topic, 1)
	if ids := headerValues(recs[0], envelope.IDHeader); len(ids) != 1 || ids[0] != res.ID {
		t.Fatalf("the redriven record's IDs are %v, want [%s]", ids, res.ID)
	}
}
