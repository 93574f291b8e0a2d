package kafka_test

import (
	"context"
	"errors"
	"strconv"
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
// control is kfake's. In "shared", the Applies of two scopes share the
// transaction whose reply is lost: both scopes are marked uncertain, and
// neither retry produces anything (red if only one call's scope is
// marked).
func TestEndTxnReplyLost(t *testing.T) {
	t.Run("one", func(t *testing.T) { endTxnReplyLost(t, 1) })
	t.Run("shared", func(t *testing.T) { endTxnReplyLost(t, 2) })
}

func endTxnReplyLost(t *testing.T, scopes int) {
	b := newFake(t)
	ctx := t.Context()
	tp := b.sinkTopics(t)
	in := b.topic(t, "in", int32(scopes), nil)
	s := b.newSink(t, tp, func(c *kafka.Config) {
		c.ClientFenceOnly, c.Producers, c.TransactionTimeout = true, 1, 2*time.Second
	})
	toks := make([]epochs.Token, scopes)
	outs := make([]string, scopes)
	for i := range toks {
		toks[i] = epochs.Token{Group: "wr-kafkasink-lostreply-" + b.sfx, Topic: in, Partition: int32(i), Epoch: 1, Member: "m"}
		outs[i] = tp.out
		if i > 0 {
			outs[i] = b.topic(t, "out-"+strconv.Itoa(i), 1, nil)
		}
		if _, err := s.Claim(ctx, toks[i], sink.Observed{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, toks[i], sink.Batch{Offsets: []int64{0}}, produceEffect(outs[i], []int64{0}, "first")); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Stats()

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

	errs := make([]error, scopes)
	calls := make([]func(), scopes)
	for i, tok := range toks {
		calls[i] = func() {
			_, errs[i] = s.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}}, produceEffect(outs[i], []int64{1}, "lost-reply"))
		}
	}
	together(t, s, calls...)
	mu.Lock()
	cutting = false
	n, ok, lerr := cuts, committed, landed
	mu.Unlock()
	if n == 0 || !ok {
		t.Fatalf("the control cut %d EndTxn replies and committed %v (%v): the fault did not happen; the Applies returned %v, the sink's stats went from %+v to %+v",
			n, ok, lerr, errs, before, s.Stats())
	}
	if st := s.Stats(); st.Transactions-before.Transactions != 1 || (scopes > 1 && st.SharedCalls-before.SharedCalls != int64(scopes)) {
		t.Fatalf("the Applies took %d transactions, %d calls shared; want 1 (shared by all %d)",
			st.Transactions-before.Transactions, st.SharedCalls-before.SharedCalls, scopes)
	}
	for i, err := range errs {
		if err == nil || errors.Is(err, sink.ErrFenced) {
			t.Fatalf("Apply of %s whose EndTxn reply was lost: %v, want an error that is not sink.ErrFenced", toks[i], err)
		}
		t.Logf("the first Apply of %s (%d EndTxn replies cut): %v", toks[i], n, err)
		if got := outputsOf(t, b, outs[i]); len(got[1]) != 1 {
			t.Fatalf("%s: input 1's outputs after the lost reply: %q, want the one the landed transaction committed", toks[i], got[1])
		}
	}

	for i, tok := range toks {
		res, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}}, produceEffect(outs[i], []int64{1}, "retried"))
		got := outputsOf(t, b, outs[i])
		if err != nil || res.Applied != 0 || res.NextOffset != 2 {
			t.Fatalf("the retried Apply of %s = %+v, %v; want nothing applied, NextOffset 2; input 1's outputs: %q", tok, res, err, got[1])
		}
		t.Logf("the retry of %s: %+v", tok, res)
		if v := got[1]; len(v) != 1 || v[0] != "lost-reply" {
			t.Fatalf("%s: input 1: outputs %q, want exactly [lost-reply] (produced once)", tok, v)
		}
		if v := got[0]; len(v) != 1 {
			t.Fatalf("%s: input 0: outputs %q, want one", tok, v)
		}
	}
}
