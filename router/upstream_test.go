package router_test

import (
	"errors"
	"testing"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/router"
)

// TestSendForwardsUpstream: a follow-up command sent with the token of the
// tenure that produced it (Command.Upstream) carries it in its
// epochs.HeaderKey header, and a worker downstream decodes it back; a
// command without one carries no token header; an invalid one is refused
// before anything is sent.
func TestSendForwardsUpstream(t *testing.T) {
	addrs := newCluster(t, topic, 1)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	ctx := testContext(t)
	up := epochs.Token{Group: "orders-workers", Topic: "orders", Partition: 2, Epoch: 7, Member: "m-7"}
	for _, cmd := range []router.Command{
		{Key: []byte("order-1"), Type: "ship", ID: "ship-order-1", Upstream: up},
		{Key: []byte("order-2"), Type: "ship"},
	} {
		if _, err := r.Send(ctx, cmd); err != nil {
			t.Fatalf("Send %s: %v", cmd.Key, err)
		}
	}
	bad := router.Command{Key: []byte("order-3"), Type: "ship", Upstream: epochs.Token{Group: "g", Topic: "t", Epoch: 1}}
	if _, err := r.Send(ctx, bad); !errors.Is(err, envelope.ErrInvalidUpstream) {
		t.Fatalf("Send with an invalid Upstream = %v, want ErrInvalidUpstream", err)
	}
	recs := consume(t, addrs, topic, 2)
	want := []epochs.Token{up, {}}
	for i, rec := range recs {
		cmd, err := envelope.Decode(rec)
		if err != nil {
			t.Fatalf("Decode %d: %v", i, err)
		}
		if cmd.Upstream != want[i] || len(cmd.Headers) != 0 {
			t.Errorf("record %d decoded Upstream %+v (user headers %v), want %+v", i, cmd.Upstream, cmd.Headers, want[i])
		}
	}
}
