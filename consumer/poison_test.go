package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/invariants"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/memory"
)

// rawProducer produces records as a foreign client would: explicit
// partitions, any headers, any key — records workrouter's router never
// writes.
type rawProducer struct {
	t  *testing.T
	cl *kgo.Client
}

func newRawProducer(t *testing.T, c *cluster) *rawProducer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &rawProducer{t: t, cl: cl}
}

// send produces recs in order and returns their offsets.
func (p *rawProducer) send(recs ...*kgo.Record) []int64 {
	p.t.Helper()
	res := p.cl.ProduceSync(context.Background(), recs...)
	if err := res.FirstErr(); err != nil {
		p.t.Fatal(err)
	}
	var offs []int64
	for _, r := range res {
		offs = append(offs, r.Record.Offset)
	}
	return offs
}

// command is a valid command record of key with payload on partition p.
func command(t *testing.T, topic string, p int32, key, typ, payload string) *kgo.Record {
	t.Helper()
	r, err := envelope.Encode(topic, p, envelope.Command{Key: []byte(key), Type: typ, Payload: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type poisonCase struct {
	name   string
	rec    *kgo.Record
	reason string
}

// TestPoisonRecordsCostOnlyThemselves (hazard 9): records that are not
// commands, have no key, have no handler, are refused for good, panic their
// handler or are huge, sit among good commands on three partitions. Every
// good command is applied exactly once and in order — also those in the
// same batch before a poison record — and every poison record has exactly
// one dead letter; nothing else is skipped.
func TestPoisonRecordsCostOnlyThemselves(t *testing.T) {
	t.Parallel()
	const partitions = 3
	c := newCluster(t, partitions)
	s := memory.New()
	var panics atomic.Int64
	handler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		switch string(cmd.Payload) {
		case "refused":
			return consumer.Permanent(errors.New("amount is not a number"))
		case "panic":
			panics.Add(1)
			var m map[string]int
			m["boom"]++ // a nil map write: a real panic
		}
		return appendHandler(ctx, tx, cmd)
	}
	w := startWorker(t, c, s, workerOpts{name: "a", maxBatch: 64,
		handlers: map[string]consumer.Handler[*memory.Tx]{"append": handler},
		poison:   consumer.PoisonPolicy{NoHandler: consumer.PoisonDeadLetter, MaxAttempts: 3}})
	testwait.For(t, 30*time.Second, "a to own every partition", func() bool { return len(w.Owned()) == partitions })

	keys := []string{"k0", "k1", "k2"} // one per partition
	raw := newRawProducer(t, c)
	var acked []invariants.Acked
	seq := map[string]int{}
	good := func(p int32, n int) {
		var recs []*kgo.Record
		k := keys[p]
		for range n {
			recs = append(recs, command(t, c.topic, p, k, "append", strconv.Itoa(seq[k])))
			seq[k]++
		}
		for _, off := range raw.send(recs...) {
			acked = append(acked, invariants.Acked{ID: fmt.Sprintf("%d/%d", p, off), Partition: p, Offset: off})
		}
	}
	bad := func(p int32, pc poisonCase) {
		pc.rec.Topic, pc.rec.Partition = c.topic, p
		off := raw.send(pc.rec)[0]
		acked = append(acked, invariants.Acked{ID: fmt.Sprintf("%d/%d", p, off), Partition: p, Offset: off, Poison: true})
	}
	cases := []poisonCase{
		{"not an envelope", &kgo.Record{Key: []byte("k"), Value: []byte(`{"plain": "json"}`)}, consumer.ReasonUndecodable},
		{"null key", &kgo.Record{Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: envelope.TypeHeader, Value: []byte("append")}}}, consumer.ReasonUndecodable},
		{"two type headers", &kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: envelope.TypeHeader, Value: []byte("append")}, {Key: envelope.TypeHeader, Value: []byte("x")}}}, consumer.ReasonUndecodable},
		{"unknown type", command(t, c.topic, 0, "k", "no-such-type", "0"), consumer.ReasonNoHandler},
		{"refused for good", command(t, c.topic, 0, "k", "append", "refused"), consumer.ReasonPermanent},
		{"panics", command(t, c.topic, 0, "k", "append", "panic"), consumer.ReasonHandlerError},
		{"1 MB", &kgo.Record{Key: []byte("k"), Value: bytes.Repeat([]byte("x"), 1<<20)}, consumer.ReasonUndecodable},
	}
	// Good commands, then a poison record, then good ones, in one produce
	// per partition round so that they land in the same batches.
	for i, pc := range cases {
		p := int32(i % partitions)
		good(p, 5)
		bad(p, pc)
		good(p, 5)
	}
	for p := range int32(partitions) {
		good(p, 3)
	}
	total := 0
	for _, n := range seq {
		total += n
	}
	testwait.For(t, 60*time.Second, "every good command applied", func() bool { return appliedCount(s, keys) == total })
	testwait.For(t, 30*time.Second, "every poison record dead-lettered", func() bool {
		dls, _ := s.DeadLetters(t.Context(), dlq.Filter{})
		return len(dls) == len(cases)
	})
	for k, n := range seq {
		if got := logOf(s, k); !slices.Equal(got, seqRange(n)) {
			t.Errorf("key %s: applied %v, want 0..%d in order, each once", k, got, n-1)
		}
	}
	dls, err := s.DeadLetters(t.Context(), dlq.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, d := range dls {
		reasons[d.Record.Reason]++
		if d.Token.Member == "" || d.State != dlq.Open || d.Record.Error == "" {
			t.Errorf("dead letter %+v lacks its token, state or error", d)
		}
	}
	for _, pc := range cases {
		reasons[pc.reason]--
	}
	for r, n := range reasons {
		if n != 0 {
			t.Errorf("reason %s: %+d dead letters off", r, n)
		}
	}
	if panics.Load() < 3 {
		t.Errorf("the panicking handler ran %d times, want its budget of 3: the panic was not retried", panics.Load())
	}
	if st := w.Stats(); st.DeadLettered != int64(len(cases)) {
		t.Errorf("Stats.DeadLettered = %d, want %d", st.DeadLettered, len(cases))
	}
	// D (and F, L, O, X) with the project's checker, from the sink's own
	// records: nothing skipped without exactly one dead letter.
	in := invariants.Input{Acked: acked}
	for _, d := range dls {
		in.DeadLetters = append(in.DeadLetters, invariants.DeadLetter{ID: fmt.Sprintf("%d/%d", d.Scope.Partition, d.Record.Offset),
			Partition: d.Scope.Partition, Offset: d.Record.Offset})
	}
	for _, ev := range s.Events() {
		if ev.Kind == memory.Apply && ev.Accepted {
			for _, o := range ev.Offsets {
				in.Writes = append(in.Writes, invariants.Write{Partition: ev.Scope.Partition, Offset: o, Epoch: ev.Token.Epoch, Member: ev.Token.Member})
			}
		}
	}
	if rep := invariants.Check(in); rep.Total() != 0 {
		t.Fatalf("invariants: %+v %v", rep.Violations, rep.Notes(10))
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

func seqRange(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// errConnLost is a failure of the sink that surfaces through a handler's
// statement, as a broken database connection does.
var errConnLost = errors.New("connection to the database lost")

// outageSink is the memory sink with a database outage: while down, every
// effect fails with errConnLost, and (without a classifier) Ping fails.
type outageSink struct {
	*memory.Sink
	down       atomic.Bool
	failures   atomic.Int64
	classifies bool
}

func (o *outageSink) Unwrap() sink.Sink[*memory.Tx] { return o.Sink }

func (o *outageSink) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*memory.Tx]) (sink.Result, error) {
	res, err := o.Sink.Apply(ctx, tok, b, o.effect(effect))
	return res, o.txBroken(err)
}

// txBroken says of an effect that failed on the outage what a database
// sink says of a transaction whose connection broke: not sound
// (sink.EffectError.TxHealthy), so that the consumer asks the classifier
// or the ping.
func (o *outageSink) txBroken(err error) error {
	if ee := (*sink.EffectError)(nil); errors.As(err, &ee) && errors.Is(ee.Err, errConnLost) {
		ee.TxHealthy = false
	}
	return err
}

func (o *outageSink) effect(effect sink.Effect[*memory.Tx]) sink.Effect[*memory.Tx] {
	return func(ctx context.Context, tx *memory.Tx, i int) error {
		if o.down.Load() {
			o.failures.Add(1)
			return fmt.Errorf("handler: insert: %w", errConnLost)
		}
		return effect(ctx, tx, i)
	}
}

// classifying tells errConnLost for a failure of the sink; its pings
// always answer (sink.Health: the classifier alone decides).
type classifying struct{ *outageSink }

func (c classifying) IsSinkFailure(err error) bool { return errors.Is(err, errConnLost) }

func (classifying) IsPermanent(error) bool { return false }

func (classifying) Ping(context.Context) error { return nil }

// pinging answers pings only while up, and classifies nothing
// (sink.Health: the ping alone decides).
type pinging struct{ *outageSink }

func (pinging) IsSinkFailure(error) bool { return false }

func (pinging) IsPermanent(error) bool { return false }

func (p pinging) Ping(context.Context) error {
	if p.down.Load() {
		return errConnLost
	}
	return nil
}

// TestSinkOutageDeadLettersNothing (hazard 9): the database is down for
// longer than a record's retry budget while commands stream in; its
// failures surface through the handlers' statements. They are failures of
// the sink, not of the records: every command is applied once the database
// is back, and the dead-letter table stays empty. Told apart either by the
// sink's classifier or by a failing ping.
func TestSinkOutageDeadLettersNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		wrap func(*outageSink) sink.Sink[*memory.Tx]
	}{
		{"classifier", func(o *outageSink) sink.Sink[*memory.Tx] { return classifying{o} }},
		{"ping", func(o *outageSink) sink.Sink[*memory.Tx] { return pinging{o} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 2)
			s := memory.New()
			o := &outageSink{Sink: s}
			keys := makeKeys(10)
			w := startWorker(t, c, s, workerOpts{name: "a", sink: tc.wrap(o),
				poison: consumer.PoisonPolicy{MaxAttempts: 2, MaxRetryTime: 50 * time.Millisecond}})
			testwait.For(t, 30*time.Second, "a to own both partitions", func() bool { return len(w.Owned()) == 2 })
			produce(t, c, 2, keys, 0, 5)
			testwait.For(t, 30*time.Second, "the first commands applied", func() bool { return appliedCount(s, keys) == 50 })
			o.down.Store(true)
			var wg sync.WaitGroup
			wg.Go(func() { produce(t, c, 2, keys, 5, 10) })
			// Down for longer than the budget (2 attempts, 50 ms): many
			// failed attempts.
			testwait.For(t, 30*time.Second, "the outage to outlast the budget", func() bool { return o.failures.Load() > 20 })
			o.down.Store(false)
			wg.Wait()
			testwait.For(t, 60*time.Second, "every command applied after the outage", func() bool { return appliedCount(s, keys) == 100 })
			checkInvariants(t, s, keys, 10)
			if dls, _ := s.DeadLetters(t.Context(), dlq.Filter{}); len(dls) != 0 {
				t.Fatalf("the outage dead-lettered %d records: %+v", len(dls), dls[0].Record.Error)
			}
			if o.failures.Load() == 0 || w.Stats().Retries == 0 {
				t.Fatal("the outage did not happen")
			}
		})
	}
}

// TestZombieCannotDeadLetter: a zombie whose handler refuses a record for
// good wakes after the new owner claimed but before it wrote (the zombie
// window); its dead letter is fenced like a write. The record is applied
// by the new owner, never dead-lettered by the zombie.
func TestZombieCannotDeadLetter(t *testing.T) {
	t.Parallel()
	bGate := newGate()
	bHandler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		bGate.wait()
		return appendHandler(ctx, tx, cmd)
	}
	z := setupZombieOpts(t, bHandler, zombieOpts{aFails: consumer.Permanent(errors.New("refused by the zombie's stale logic"))})
	t.Cleanup(bGate.open)
	aTok := z.a.Owned()[0]
	testwait.For(t, 60*time.Second, "b to claim the partition", func() bool {
		bMember, _ := z.b.Member()
		_, ok := claimedBy(z.s, bMember)
		return ok
	})
	z.aGate.open() // the zombie wakes: its handler refuses, it tries to dead-letter
	var err error
	select {
	case err = <-z.aFenced:
	case <-time.After(30 * time.Second):
		t.Fatal("the zombie's dead letter was not refused")
	}
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Op != sink.OpDeadLetter || fe.Offered != aTok {
		t.Fatalf("zombie: %v, want a fenced dead letter by %v", err, aTok)
	}
	bGate.open()
	testwait.For(t, 60*time.Second, "b to apply every command", func() bool { return appliedCount(z.s, z.keys) == len(z.keys)*z.perKey })
	if dls, _ := z.s.DeadLetters(t.Context(), dlq.Filter{}); len(dls) != 0 {
		t.Fatalf("the zombie's dead letter landed: %+v", dls)
	}
	z.stopHole()
	checkInvariants(t, z.s, z.keys, z.perKey)
}

// TestPermanentIsNotSecondGuessed: a handler marks its own error permanent,
// and that error happens to wrap one the sink's classifier takes for a
// failure of the sink (on PostgreSQL, a handler's json.Unmarshal of a
// truncated payload returns io.ErrUnexpectedEOF). The handler's verdict
// wins while the sink answers its ping: the record is dead-lettered and
// the partition goes on; it does not stall for ever as an outage.
func TestPermanentIsNotSecondGuessed(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	o := &outageSink{Sink: s}
	keys := makeKeys(3)
	handler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		if string(cmd.Payload) == "1" {
			return consumer.Permanent(fmt.Errorf("decoding the payload: %w", errConnLost))
		}
		return appendHandler(ctx, tx, cmd)
	}
	w := startWorker(t, c, s, workerOpts{name: "a", sink: classifyingPinger{o}, handler: handler})
	produce(t, c, 1, keys, 0, 3)
	testwait.For(t, 30*time.Second, "the good commands applied", func() bool { return appliedCount(s, keys) == 2*len(keys) })
	dls, err := s.DeadLetters(t.Context(), dlq.Filter{})
	if err != nil || len(dls) != len(keys) {
		t.Fatalf("dead letters %d, %v: want %d", len(dls), err, len(keys))
	}
	for _, d := range dls {
		if d.Record.Reason != consumer.ReasonPermanent {
			t.Fatalf("dead letter reason %q, want %q", d.Record.Reason, consumer.ReasonPermanent)
		}
	}
	if w.Stats().DeadLettered != int64(len(keys)) {
		t.Fatalf("Stats %+v", w.Stats())
	}
}

// classifyingPinger both classifies (errConnLost is the sink's) and pings.
type classifyingPinger struct{ *outageSink }

func (c classifyingPinger) IsSinkFailure(err error) bool { return errors.Is(err, errConnLost) }

func (classifyingPinger) IsPermanent(error) bool { return false }

func (c classifyingPinger) Ping(context.Context) error {
	if c.down.Load() {
		return errConnLost
	}
	return nil
}

// errBadValue stands for an error the sink knows no retry can fix (a
// value the database refuses, such as text that is not UTF-8).
var errBadValue = errors.New("the database refused the value")

// permanentClassifying is a sink that classifies errBadValue as permanent
// (sink.Health), as the PostgreSQL sink does for data exceptions.
type permanentClassifying struct{ *memory.Sink }

func (p permanentClassifying) Unwrap() sink.Sink[*memory.Tx] { return p.Sink }

func (permanentClassifying) IsPermanent(err error) bool { return errors.Is(err, errBadValue) }

func (permanentClassifying) IsSinkFailure(error) bool { return false }

func (permanentClassifying) Ping(context.Context) error { return nil }

// TestSinkClassifiedPermanentDeadLettersAtOnce: a handler error the sink
// classifies as permanent (sink.Health) is dead-lettered on
// its first failure (behind the records before it in its batch, which are
// applied without it; it is not run again), with reason permanent, instead
// of after its whole retry budget; the commands around it are applied. It is red when the
// Worker ignores the sink's classifier (the record is tried MaxAttempts
// times and dead-lettered as handler_error).
func TestSinkClassifiedPermanentDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(3)
	var calls atomic.Int64
	handler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		if string(cmd.Payload) == "1" {
			calls.Add(1)
			return fmt.Errorf("inserting %s: %w", cmd.Key, errBadValue)
		}
		return appendHandler(ctx, tx, cmd)
	}
	w := startWorker(t, c, s, workerOpts{name: "a", sink: permanentClassifying{s}, handler: handler,
		poison: consumer.PoisonPolicy{MaxAttempts: 5}})
	produce(t, c, 1, keys, 0, 3)
	testwait.For(t, 30*time.Second, "the good commands applied", func() bool { return appliedCount(s, keys) == 2*len(keys) })
	dls, err := s.DeadLetters(t.Context(), dlq.Filter{})
	if err != nil || len(dls) != len(keys) {
		t.Fatalf("dead letters %d, %v: want %d", len(dls), err, len(keys))
	}
	for _, d := range dls {
		if d.Record.Reason != consumer.ReasonPermanent || d.Record.Attempts != 1 {
			t.Fatalf("dead letter reason %q after %d attempts, want %q after 1 (of a budget of 5)", d.Record.Reason, d.Record.Attempts, consumer.ReasonPermanent)
		}
	}
	if n := calls.Load(); n != int64(len(keys)) {
		t.Fatalf("the failing handler ran %d times for %d records: a permanent error was retried", n, len(keys))
	}
	if w.Stats().DeadLettered != int64(len(keys)) {
		t.Fatalf("Stats %+v", w.Stats())
	}
}

// resetBeforeDeadLetter is a sink whose first DeadLetter finds the fence
// reset by an operator just before (the reset lands between the worker's
// decision and its dead letter).
type resetBeforeDeadLetter struct {
	*memory.Sink
	once  sync.Once
	reset atomic.Bool
}

func (r *resetBeforeDeadLetter) Unwrap() sink.Sink[*memory.Tx] { return r.Sink }

func (r *resetBeforeDeadLetter) DeadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	r.once.Do(func() {
		fs, err := r.Sink.Fences(ctx)
		for _, f := range fs {
			if err == nil && f.Scope == tok.Scope() {
				_, err = r.Sink.ResetFence(ctx, fenceadmin.ResetRequest{Scope: f.Scope, Expect: f, Reason: "reset before a dead letter (test)"})
			}
		}
		r.reset.Store(err == nil)
	})
	return r.Sink.DeadLetter(ctx, tok, rec)
}

// TestResetBeforeDeadLetterReclaims: an operator resets the fence under a
// live tenure right before it dead-letters a poison record. The refused
// dead letter (nobody holds the scope) is not a zombie's: the worker
// claims again, with a proof, dead-letters the record and applies the
// commands after it, as it does for a refused Apply. It is red when the
// refusal is taken for a newer owner's (the partition stops until a
// rebalance that never comes).
func TestResetBeforeDeadLetterReclaims(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	r := &resetBeforeDeadLetter{Sink: s}
	keys := makeKeys(3)
	w := startWorker(t, c, s, workerOpts{name: "a", sink: r, reclaimInterval: 100 * time.Millisecond})
	testwait.For(t, 30*time.Second, "a to own the partition", func() bool { return len(w.Owned()) == 1 })
	produce(t, c, 1, keys, 0, 1)
	raw := newRawProducer(t, c)
	poison := raw.send(&kgo.Record{Topic: c.topic, Partition: 0, Key: []byte("k"), Value: []byte("not an envelope")})[0]
	produce(t, c, 1, keys, 1, 2)
	testwait.For(t, 30*time.Second, "every command applied after the reset", func() bool { return appliedCount(s, keys) == 2*len(keys) })
	if !r.reset.Load() {
		t.Fatal("the fence was never reset before the dead letter")
	}
	dls, err := s.DeadLetters(t.Context(), dlq.Filter{})
	if err != nil || len(dls) != 1 || dls[0].Record.Offset != poison {
		t.Fatalf("dead letters %+v, %v: want the one at offset %d", dls, err, poison)
	}
	if st := w.Stats(); st.Claims < 2 {
		t.Fatalf("the worker did not claim again after the reset: %+v", st)
	}
	checkInvariants(t, s, keys, 2)
}

// netClassifying is the memory sink with a classifier that takes every
// network error for a failure of the sink, as the PostgreSQL and Redis
// sinks do.
type netClassifying struct{ *memory.Sink }

func (c netClassifying) Unwrap() sink.Sink[*memory.Tx] { return c.Sink }

func (netClassifying) IsSinkFailure(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

func (netClassifying) IsPermanent(error) bool { return false }

func (netClassifying) Ping(context.Context) error { return nil }

// TestHandlerNetworkErrorIsTheHandlers (issue 41): a handler whose call to
// another service fails because the service is down (connection refused)
// fails with a network error, which the sink's classifier takes for its
// own failures. Where the error came from decides: the sink's transaction
// was sound (sink.EffectError.TxHealthy), so it is the handler's error,
// spends the record's budget (Stalled with CauseEffect), and the command
// is dead-lettered; the commands after it are applied. It was retried
// without end as a sink outage (CauseSink) before.
func TestHandlerNetworkErrorIsTheHandlers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // a service that is down: connections are refused
	handler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		if string(cmd.Payload) == "call" {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", down)
			if err == nil {
				conn.Close()
				return errors.New("the service is up after all")
			}
			return fmt.Errorf("post to the service: %w", err)
		}
		return appendHandler(ctx, tx, cmd)
	}
	var mu sync.Mutex
	causes := map[string]int{}
	logs := &lockedBuffer{}
	w := startWorker(t, c, s, workerOpts{name: "a", sink: netClassifying{s},
		handlers: map[string]consumer.Handler[*memory.Tx]{"append": handler},
		poison:   consumer.PoisonPolicy{MaxAttempts: 3, MaxRetryTime: time.Hour},
		observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			if st, ok := e.(consumer.Stalled); ok {
				mu.Lock()
				causes[st.Cause]++
				mu.Unlock()
			}
		}), consumer.NewLogObserver(slog.New(slog.NewTextHandler(logs, nil)))}})
	testwait.For(t, 30*time.Second, "a to own the partition", func() bool { return len(w.Owned()) == 1 })
	raw := newRawProducer(t, c)
	raw.send(command(t, c.topic, 0, "k0", "append", "0"), command(t, c.topic, 0, "k0", "append", "call"),
		command(t, c.topic, 0, "k0", "append", "1"), command(t, c.topic, 0, "k0", "append", "2"))
	testwait.For(t, 30*time.Second, "the command that calls the service dead-lettered", func() bool {
		dls, _ := s.DeadLetters(t.Context(), dlq.Filter{})
		return len(dls) == 1
	})
	testwait.For(t, 30*time.Second, "the commands after it applied", func() bool { return appliedCount(s, []string{"k0"}) == 3 })
	dls, err := s.DeadLetters(t.Context(), dlq.Filter{})
	if err != nil || len(dls) != 1 || dls[0].Record.Reason != consumer.ReasonHandlerError || !strings.Contains(dls[0].Record.Error, "connection refused") {
		t.Fatalf("dead letters %+v, %v: want the call's, a handler error (connection refused)", dls, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if causes[consumer.CauseEffect] == 0 || causes[consumer.CauseSink] != 0 {
		t.Fatalf("stall causes %v: want the handler's error as %q only", causes, consumer.CauseEffect)
	}
	// What the operator reads.
	if out := logs.String(); !strings.Contains(out, "cause=effect") || strings.Contains(out, "cause=sink") {
		t.Fatalf("the worker's log does not say cause=effect only:\n%s", out)
	}
}
