package payments_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/examples/internal/testenv"
	"github.com/workrouter/workrouter/examples/payments"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestFollowUpCarriesUpstream: a worker's handler sends a follow-up
// command (a receipt) through the router with its tenure's token as
// Upstream; the worker of another group downstream reads that token as
// cmd.Upstream, beside its own tenure's cmd.Token.
func TestFollowUpCarriesUpstream(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, payments.Topic, "receipts"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	rt, err := router.New(t.Context(), router.Config{Brokers: brokers, Topic: "receipts"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })

	var mu sync.Mutex
	var sentUnder []epochs.Token
	type receipt struct{ upstream, own epochs.Token }
	var got []receipt
	testenv.Worker(t, brokers, "payers", payments.Topic, "payer", memory.New(), map[string]consumer.Handler[*memory.Tx]{
		payments.CommandType: func(ctx context.Context, _ *memory.Tx, cmd consumer.Command) error {
			mu.Lock()
			sentUnder = append(sentUnder, cmd.Token)
			mu.Unlock()
			_, err := rt.Send(ctx, router.Command{Key: cmd.Key, Type: "receipt", ID: "receipt-" + cmd.ID, Upstream: cmd.Token})
			return err
		},
	})
	testenv.Worker(t, brokers, "receipters", "receipts", "receipter", memory.New(), map[string]consumer.Handler[*memory.Tx]{
		"receipt": func(_ context.Context, _ *memory.Tx, cmd consumer.Command) error {
			mu.Lock()
			got = append(got, receipt{cmd.Upstream, cmd.Token})
			mu.Unlock()
			return nil
		},
	})
	testenv.Produce(t, brokers, payments.Topic, []router.Command{{Key: []byte("acct-1"), Type: payments.CommandType, ID: "c1",
		Payload: []byte(`{"account":"acct-1","cents":100}`)}})
	testenv.WaitFor(t, 30*time.Second, "the receipt", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0, nil
	})
	mu.Lock()
	defer mu.Unlock()
	r := got[0]
	if r.upstream != sentUnder[0] || r.upstream.Group != "payers" {
		t.Fatalf("the receipt's Upstream is %v, want the payer's tenure %v", r.upstream, sentUnder[0])
	}
	if r.own.Group != "receipters" || r.own.Topic != "receipts" {
		t.Fatalf("the receipt's own Token is %v, want the receipters' tenure", r.own)
	}
}
