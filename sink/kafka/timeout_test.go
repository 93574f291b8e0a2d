package kafka_test

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
)

// TestTransactionTimeoutHealed: a process that freezes inside a
// transaction, between its records and its offset commit, for longer than
// the transaction timeout, finds on waking that the coordinator aborted
// the transaction: the Apply fails (a sink failure, not a fence), none of
// its records is visible, and the producer goes on (kgo recovers its
// producer ID when the sink aborts), so that the retried Apply commits,
// once.
func TestTransactionTimeoutHealed(t *testing.T) {
	forBrokers(t, func(t *testing.T, b *broker) {
		ctx := t.Context()
		tp := b.sinkTopics(t)
		in := b.topic(t, "in", 1, nil)
		var logs syncBuffer
		s := b.newSink(t, tp, func(c *kafka.Config) {
			c.ClientFenceOnly, c.Producers, c.TransactionTimeout = true, 1, time.Second
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		tok := epochs.Token{Group: "wr-kafkasink-timeout-" + b.sfx, Topic: in, Partition: 0, Epoch: 1, Member: "m"}
		if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, produceEffect(tp.out, []int64{0}, "first")); err != nil {
			t.Fatal(err)
		}
		// The freeze lasts until the coordinator has aborted the
		// transaction: Kafka checks its transactions' timeouts every
		// transaction.abort.timed.out.transaction.cleanup.interval.ms
		// (10 s by default), kfake at the timeout.
		adm := b.admin(t)
		prefix := "wr-kafkasink-test-" + b.sfx + "-"
		var once sync.Once
		var froze, aborted bool
		kafka.SetTestBeforeOffsetCommit(func() {
			once.Do(func() {
				froze = true
				deadline := time.Now().Add(60 * time.Second)
				for time.Now().Before(deadline) {
					time.Sleep(200 * time.Millisecond)
					txns, err := adm.ListTransactions(ctx, nil, nil)
					if err != nil {
						continue
					}
					for id, tx := range txns {
						if strings.HasPrefix(id, prefix) && tx.State != "Ongoing" {
							aborted = true
							t.Logf("transaction %s is %s", id, tx.State)
							return
						}
					}
				}
			})
		})
		defer kafka.SetTestBeforeOffsetCommit(nil)
		_, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}}, produceEffect(tp.out, []int64{1}, "frozen"))
		if !froze || !aborted {
			t.Fatalf("froze %v, the coordinator aborted the transaction %v: the fault did not happen", froze, aborted)
		}
		if err == nil {
			t.Fatal("the Apply frozen past the transaction timeout succeeded: the coordinator did not abort its transaction")
		}
		if errors.Is(err, sink.ErrFenced) || !s.IsSinkFailure(err) {
			t.Fatalf("the timed-out Apply: %v; want a sink failure, not a fence", err)
		}
		t.Logf("the timed-out transaction: %v", err)
		if !strings.Contains(logs.String(), "kafka sink: transaction aborted") {
			t.Fatalf("the abort was not logged: %q", logs.String())
		}
		res, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}}, produceEffect(tp.out, []int64{1}, "retried"))
		if err != nil || res.Applied != 1 {
			t.Fatalf("the retried Apply = %+v, %v; want it applied (the producer healed)", res, err)
		}
		got := outputsOf(t, b, tp.out)
		if v := got[1]; len(v) != 1 || v[0] != "retried" {
			t.Fatalf("input 1: outputs %q, want exactly [retried]", v)
		}
		if v := got[0]; len(v) != 1 {
			t.Fatalf("input 0: outputs %q, want one", v)
		}
	})
}
