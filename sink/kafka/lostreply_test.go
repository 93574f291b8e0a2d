package kafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
)

// TestEndTxnReplyLost: the ambiguous commit on the Kafka sink (issue 44).
// The transaction's EndTxn (commit) is applied by the coordinator, but
// its reply never reaches the sink's producer: a kfake control commits
// the transaction by sending the same EndTxn on a connection of its own,
// then closes the producer's connection, and keeps closing it for
// franz-go's retries of the EndTxn (which kfake would answer with success,
// healing the loss inside the client) until the sink's EndTxn gives up.
// The Apply fails (not a fence); the worker retries the same batch. The
// retry must produce nothing twice: the failed EndTxn marks the scope
// uncertain, and the retry reads the committed offset first, which the
// landed transaction moved past the batch (red without the uncertain
// mark: the retry produces the batch's record again). kfake only: the
// control is kfake's.
func TestEndTxnReplyLost(t *testing.T) {
	b := newFake(t)
	ctx := t.Context()
	tp := b.sinkTopics(t)
	in := b.topic(t, "in", 1, nil)
	s := b.newSink(t, tp, func(c *kafka.Config) {
		c.ClientFenceOnly, c.Producers, c.TransactionTimeout = true, 1, 2*time.Second
	})
	tok := epochs.Token{Group: "wr-kafkasink-lostreply-" + b.sfx, Topic: in, Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, produceEffect(tp.out, []int64{0}, "first")); err != nil {
		t.Fatal(err)
	}

	side := b.client(t)
	var (
		mu        sync.Mutex
		cutting   = true
		sideSent  bool  // the control is sending its own EndTxn
		landed    error // the answer to the control's EndTxn: nil if committed
		committed bool  // the control's EndTxn committed
		cuts      int
	)
	b.kf.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		b.kf.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		req := kreq.(*kmsg.EndTxnRequest)
		if !cutting || sideSent || !req.Commit {
			return nil, nil, false // the cluster answers it
		}
		if !committed {
			// Commit the transaction through another connection while
			// this request waits, then lose this one's reply.
			sideSent = true
			dup := *req
			b.kf.SleepControl(func() {
				mu.Unlock()
				rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := dup.RequestWith(rctx, side)
				cancel()
				mu.Lock()
				if err == nil {
					err = kerr.ErrorForCode(resp.ErrorCode)
				}
				landed, committed = err, err == nil
				sideSent = false
			})
		}
		cuts++
		return nil, errors.New("the reply is lost"), true // closes the producer's connection
	})

	_, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}}, produceEffect(tp.out, []int64{1}, "lost-reply"))
	mu.Lock()
	cutting = false
	n, ok, lerr := cuts, committed, landed
	mu.Unlock()
	if n == 0 || !ok {
		t.Fatalf("the control cut %d EndTxn replies and committed %v (%v): the fault did not happen", n, ok, lerr)
	}
	if err == nil || errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Apply whose EndTxn reply was lost: %v, want an error that is not sink.ErrFenced", err)
	}
	t.Logf("the first Apply (%d EndTxn replies cut): %v", n, err)
	if got := outputsOf(t, b, tp.out); len(got[1]) != 1 {
		t.Fatalf("input 1's outputs after the lost reply: %q, want the one the landed transaction committed", got[1])
	}

	res, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}}, produceEffect(tp.out, []int64{1}, "retried"))
	got := outputsOf(t, b, tp.out)
	if err != nil || res.Applied != 0 || res.NextOffset != 2 {
		t.Fatalf("the retried Apply = %+v, %v; want nothing applied, NextOffset 2; input 1's outputs: %q", res, err, got[1])
	}
	t.Logf("the retry: %+v", res)
	if v := got[1]; len(v) != 1 || v[0] != "lost-reply" {
		t.Fatalf("input 1: outputs %q, want exactly [lost-reply] (produced once)", v)
	}
	if v := got[0]; len(v) != 1 {
		t.Fatalf("input 0: outputs %q, want one", v)
	}
}
