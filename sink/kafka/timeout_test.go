package kafka_test

import (
	"errors"
	"log/slog"
	"strconv"
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
// once. In "shared", the Applies of two scopes share the frozen
// transaction: each fails, and each retry commits once.
func TestTransactionTimeoutHealed(t *testing.T) {
	forBrokers(t, func(t *testing.T, b *broker) {
		t.Run("one", func(t *testing.T) { transactionTimeout(t, b, 1) })
		t.Run("shared", func(t *testing.T) { transactionTimeout(t, b, 2) })
	})
}

func transactionTimeout(t *testing.T, b *broker, scopes int) {
	ctx := t.Context()
	b = &broker{name: b.name, addrs: b.addrs, kf: b.kf, sfx: suffix()}
	tp := b.sinkTopics(t)
	in := b.topic(t, "in", int32(scopes), nil)
	var logs syncBuffer
	s := b.newSink(t, tp, func(c *kafka.Config) {
		c.ClientFenceOnly, c.Producers, c.TransactionTimeout = true, 1, time.Second
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	toks := make([]epochs.Token, scopes)
	outs := make([]string, scopes)
	for i := range toks {
		toks[i] = epochs.Token{Group: "wr-kafkasink-timeout-" + b.sfx, Topic: in, Partition: int32(i), Epoch: 1, Member: "m"}
		outs[i] = b.topic(t, "out-"+strconv.Itoa(i), 1, nil)
		if _, err := s.Claim(ctx, toks[i], sink.Observed{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, toks[i], sink.Batch{Offsets: []int64{0}}, produceEffect(outs[i], []int64{0}, "first")); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Stats()
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
	errs := make([]error, scopes)
	calls := make([]func(), scopes)
	for i, tok := range toks {
		calls[i] = func() {
			_, errs[i] = s.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}}, produceEffect(outs[i], []int64{1}, "frozen"))
		}
	}
	together(t, s, calls...)
	if !froze || !aborted {
		t.Fatalf("froze %v, the coordinator aborted the transaction %v: the fault did not happen", froze, aborted)
	}
	if st := s.Stats(); st.Transactions-before.Transactions != 1 || (scopes > 1 && st.SharedCalls-before.SharedCalls != int64(scopes)) {
		t.Fatalf("the Applies took %d transactions, %d calls shared; want 1 (shared by all %d)",
			st.Transactions-before.Transactions, st.SharedCalls-before.SharedCalls, scopes)
	}
	for i, err := range errs {
		if err == nil {
			t.Fatalf("the Apply of %s frozen past the transaction timeout succeeded: the coordinator did not abort its transaction", toks[i])
		}
		if errors.Is(err, sink.ErrFenced) || !s.IsSinkFailure(err) {
			t.Fatalf("the timed-out Apply of %s: %v; want a sink failure, not a fence", toks[i], err)
		}
		t.Logf("the timed-out transaction, %s: %v", toks[i], err)
	}
	if !strings.Contains(logs.String(), "kafka sink: transaction aborted") {
		t.Fatalf("the abort was not logged: %q", logs.String())
	}
	for i, tok := range toks {
		res, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}}, produceEffect(outs[i], []int64{1}, "retried"))
		if err != nil || res.Applied != 1 {
			t.Fatalf("the retried Apply of %s = %+v, %v; want it applied (the producer healed)", tok, res, err)
		}
	}
	for i, tok := range toks {
		got := outputsOf(t, b, outs[i])
		if v := got[1]; len(v) != 1 || v[0] != "retried" {
			t.Fatalf("%s: input 1: outputs %q, want exactly [retried]", tok, v)
		}
		if v := got[0]; len(v) != 1 {
			t.Fatalf("%s: input 0: outputs %q, want one", tok, v)
		}
	}
}
