package consumer_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/memory"
)

// offsets reads, as any admin client would, the group's committed offset
// of partition p (-1 if none) and the sink's NextOffset of it (-1 if the
// sink has no fence for it).
type offsets struct {
	t   *testing.T
	adm *kadm.Client
	s   *memory.Sink
	c   *cluster
}

func newOffsets(t *testing.T, c *cluster, s *memory.Sink) *offsets {
	t.Helper()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	return &offsets{t: t, adm: adm, s: s, c: c}
}

func (o *offsets) committed(p int32) int64 {
	o.t.Helper()
	offs, err := o.adm.FetchOffsets(o.t.Context(), o.c.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return -1 // the worker has not joined yet: nothing committed
	}
	if err != nil {
		o.t.Fatal(err)
	}
	if off, ok := offs.Lookup(o.c.topic, p); ok && off.Err == nil {
		return off.At
	}
	return -1
}

func (o *offsets) sinkNext(p int32) int64 {
	o.t.Helper()
	fs, err := o.s.Fences(o.t.Context())
	if err != nil {
		o.t.Fatal(err)
	}
	for _, f := range fs {
		if f.Scope.Partition == p {
			return f.NextOffset
		}
	}
	return -1
}

// gatedApplies is a sink whose Applies of one partition wait on gate,
// from that partition's from-th Apply on, before they reach the sink.
type gatedApplies struct {
	*memory.Sink
	partition int32
	from      int64
	calls     atomic.Int64
	gate      *gate
}

func (g *gatedApplies) Unwrap() sink.Sink[*memory.Tx] { return g.Sink }

func (g *gatedApplies) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*memory.Tx]) (sink.Result, error) {
	if tok.Partition == g.partition && g.calls.Add(1) >= g.from {
		g.gate.wait()
	}
	return g.Sink.Apply(ctx, tok, b, effect)
}

// TestCommitNeverAheadOfTheSink (docs/design.md#checkpoint-and-kafka-commits):
// while a batch of partition 0 is inside the sink's Apply, the group's
// committed offset of partition 0 is not past the sink's NextOffset, even
// after the committer has committed another partition's newer work; once
// the Apply returns, the commit catches up with the sink.
func TestCommitNeverAheadOfTheSink(t *testing.T) {
	t.Parallel()
	const partitions = 2
	c := newCluster(t, partitions)
	s := memory.New()
	g := &gatedApplies{Sink: s, partition: 0, from: 2, gate: newGate()}
	var mu sync.Mutex
	var commits []map[int32]int64
	w := startWorker(t, c, s, workerOpts{name: "a", sink: g, observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
		if cm, ok := e.(consumer.Committed); ok {
			mu.Lock()
			commits = append(commits, cm.Offsets)
			mu.Unlock()
		}
	})}})
	t.Cleanup(g.gate.open) // before the worker's Close
	testwait.For(t, 30*time.Second, "a to own both partitions", func() bool { return len(w.Owned()) == partitions })
	o := newOffsets(t, c, s)
	raw := newRawProducer(t, c)
	send := func(p int32, seq int) {
		raw.send(command(t, c.topic, p, "k"+strconv.Itoa(int(p)), "append", strconv.Itoa(seq)))
	}
	send(0, 0)
	send(1, 0)
	testwait.For(t, 30*time.Second, "the first records committed", func() bool { return o.committed(0) == 1 && o.committed(1) == 1 })

	send(0, 1) // its Apply waits inside the sink
	select {
	case <-g.gate.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("partition 0's second batch never reached the sink")
	}
	mu.Lock()
	seen := len(commits)
	mu.Unlock()
	// Partition 1 applies meanwhile; the commit of its new offset is a
	// commit made while partition 0's Apply is in progress, of everything
	// the committer had by then.
	send(1, 1)
	testwait.For(t, 30*time.Second, "partition 1's new offset committed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, cm := range commits[seen:] {
			if cm[1] == 2 {
				return true
			}
		}
		return false
	})
	if got, next := o.committed(0), o.sinkNext(0); got > next || next != 1 {
		t.Fatalf("while partition 0's Apply is in progress: committed offset %d, sink NextOffset %d; the commit is ahead of the sink", got, next)
	}

	g.gate.open()
	testwait.For(t, 30*time.Second, "the commit to catch up with the sink", func() bool { return o.sinkNext(0) == 2 && o.committed(0) == 2 })
	if got := logOf(s, "k0"); len(got) != 2 {
		t.Fatalf("partition 0 applied %v, want two records", got)
	}
}

// TestRevokeCommitsAtOnce: the committer commits at most once per pace
// (here an hour, so its next tick never comes during the test), but a
// revoke commits the partition's last applied offset at once: right after
// the revoke (Close leaves the group) the group's committed offset is the
// sink's NextOffset.
func TestRevokeCommitsAtOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(1)
	w := startWorker(t, c, s, workerOpts{name: "a", commitPace: time.Hour})
	o := newOffsets(t, c, s)
	produce(t, c, 1, keys, 0, 1)
	testwait.For(t, 30*time.Second, "the first record committed", func() bool { return o.committed(0) == 1 })
	produce(t, c, 1, keys, 1, 5)
	testwait.For(t, 30*time.Second, "every record applied", func() bool { return o.sinkNext(0) == 5 })
	if got := o.committed(0); got != 1 {
		t.Fatalf("committed offset %d before the revoke, want 1: the committer's next tick came (the test needs it out of reach)", got)
	}
	w.Close()
	if got, next := o.committed(0), o.sinkNext(0); got != next {
		t.Fatalf("after the revoke: committed offset %d, sink NextOffset %d; the revoke did not commit at once", got, next)
	}
}

// TestRetryBudgetIsExact: a handler that always fails is called exactly
// Poison.MaxAttempts times for its record (or its type's MaxAttempts in
// Poison.Types) before the record is dead-lettered with Attempts equal to
// that budget; the records around it are applied once each.
func TestRetryBudgetIsExact(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	var mu sync.Mutex
	calls := map[int64]int{} // offset → calls of a failing handler
	fail := func(_ context.Context, _ *memory.Tx, cmd consumer.Command) error {
		mu.Lock()
		calls[cmd.Offset]++
		mu.Unlock()
		return errors.New("always fails")
	}
	rec := &events{}
	w := startWorker(t, c, s, workerOpts{name: "a", observers: []consumer.Observer{rec},
		handlers: map[string]consumer.Handler[*memory.Tx]{"append": appendHandler, "fail": fail, "fail5": fail},
		poison:   consumer.PoisonPolicy{MaxAttempts: 3, Types: map[string]consumer.TypePolicy{"fail5": {MaxAttempts: 5}}}})
	testwait.For(t, 30*time.Second, "a to own the partition", func() bool { return len(w.Owned()) == 1 })
	raw := newRawProducer(t, c)
	// In one produce, so that the failing records share batches with good
	// ones before and after them.
	offs := raw.send(
		command(t, c.topic, 0, "k", "append", "0"),
		command(t, c.topic, 0, "k", "fail", "x"),
		command(t, c.topic, 0, "k", "append", "1"),
		command(t, c.topic, 0, "k", "fail5", "y"),
		command(t, c.topic, 0, "k", "append", "2"),
	)
	testwait.For(t, 30*time.Second, "both failing records dead-lettered and the rest applied", func() bool {
		dls, _ := s.DeadLetters(t.Context(), dlq.Filter{})
		return len(dls) == 2 && len(logOf(s, "k")) == 3
	})
	budget := map[int64]int{offs[1]: 3, offs[3]: 5}
	mu.Lock()
	for off, want := range budget {
		if calls[off] != want {
			t.Errorf("the failing handler ran %d times for offset %d, want its budget of %d", calls[off], off, want)
		}
	}
	mu.Unlock()
	dls, err := s.DeadLetters(t.Context(), dlq.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dls {
		if want := budget[d.Record.Offset]; d.Record.Attempts != want || d.Record.Reason != consumer.ReasonHandlerError {
			t.Errorf("dead letter of offset %d: attempts %d reason %s, want %d and %s", d.Record.Offset, d.Record.Attempts, d.Record.Reason, want, consumer.ReasonHandlerError)
		}
	}
	for _, e := range rec.find(func(e consumer.Event) bool { _, ok := e.(consumer.DeadLettered); return ok }) {
		if d := e.(consumer.DeadLettered); d.Attempts != budget[d.Offset] {
			t.Errorf("DeadLettered event of offset %d: attempts %d, want %d", d.Offset, d.Attempts, budget[d.Offset])
		}
	}
	if got := logOf(s, "k"); len(got) != 3 || got[0] != 0 || got[1] != 1 || got[2] != 2 {
		t.Errorf("good records applied %v, want [0 1 2]", got)
	}
}
