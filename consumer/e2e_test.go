package consumer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestEndToEndRebalance runs 20,000 commands through 3 workers: one joins
// late and one leaves in the middle. L, O, X and F must hold on the memory
// sink's data and history.
func TestEndToEndRebalance(t *testing.T) {
	t.Parallel()
	const partitions = 6
	c := newCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(200)
	const perKey = 100 // 20,000 commands

	a := startWorker(t, c, s, workerOpts{name: "a"})
	b := startWorker(t, c, s, workerOpts{name: "b"})

	produce(t, c, partitions, keys, 0, perKey/2)
	testwait.For(t, 60*time.Second, "some progress", func() bool { return appliedCount(s, keys) > 2000 })

	cw := startWorker(t, c, s, workerOpts{name: "c"}) // joins late
	testwait.For(t, 30*time.Second, "c to own partitions", func() bool { return len(cw.Owned()) > 0 })
	// c's joining moves partitions from a or b: whoever owned 3 (or all
	// 6) must give some up for 2 each. Under KIP-848 c may first get a
	// partition nobody had acknowledged yet (one of a member that had
	// not heartbeated since the topic reached the coordinator), and the
	// revocation follows at the owner's next heartbeat.
	testwait.For(t, 30*time.Second, "a or b to give up a partition for c", func() bool {
		return a.Stats().Revoked+b.Stats().Revoked > 0
	})
	produce(t, c, partitions, keys, perKey/2, perKey)
	testwait.For(t, 60*time.Second, "more progress", func() bool { return appliedCount(s, keys) > 12000 })

	// b and c alone can apply 12,000 of the 20,000: under KIP-848 a's
	// share may reach it only at its next heartbeat.
	testwait.For(t, 30*time.Second, "a to own partitions before it leaves", func() bool { return len(a.Owned()) > 0 })
	aOwned := a.Owned()
	a.Close() // leaves in the middle
	testwait.For(t, 120*time.Second, "all 20,000 commands applied", func() bool { return appliedCount(s, keys) >= len(keys)*perKey })

	checkInvariants(t, s, keys, perKey)
	var records, batches int64
	for _, w := range []*consumer.Worker[*memory.Tx]{a, b, cw} {
		st := w.Stats()
		records += st.Records
		batches += st.Batches
		if st.FencedApplies != 0 || st.FencedClaims != 0 {
			t.Errorf("unexpected fenced outcomes without faults: %+v", st)
		}
	}
	if records != int64(len(keys)*perKey) {
		t.Errorf("workers applied %d records, want %d", records, len(keys)*perKey)
	}
	if batches >= records {
		t.Errorf("%d batches for %d records: not batching", batches, records)
	}
	testwait.For(t, 30*time.Second, "a's partitions to move to b and c", func() bool {
		owned := map[int32]bool{}
		for _, tok := range append(b.Owned(), cw.Owned()...) {
			owned[tok.Partition] = true
		}
		for _, tok := range aOwned {
			if !owned[tok.Partition] {
				return false
			}
		}
		return true
	})
}

func TestConfigValidation(t *testing.T) {
	s := memory.New()
	h := map[string]consumer.Handler[*memory.Tx]{"append": appendHandler}
	base := consumer.Config[*memory.Tx]{Brokers: []string{"127.0.0.1:1"}, Group: "g", Topic: "t", Sink: s, Handlers: h}
	cases := map[string]func(*consumer.Config[*memory.Tx]){
		"no brokers":  func(c *consumer.Config[*memory.Tx]) { c.Brokers = nil },
		"no group":    func(c *consumer.Config[*memory.Tx]) { c.Group = "" },
		"no topic":    func(c *consumer.Config[*memory.Tx]) { c.Topic = "" },
		"no sink":     func(c *consumer.Config[*memory.Tx]) { c.Sink = nil },
		"no handlers": func(c *consumer.Config[*memory.Tx]) { c.Handlers = nil },
		"nil handler": func(c *consumer.Config[*memory.Tx]) {
			c.Handlers = map[string]consumer.Handler[*memory.Tx]{"x": nil}
		},
		"negative batch": func(c *consumer.Config[*memory.Tx]) { c.MaxBatch = -1 },
		"bad protocol":   func(c *consumer.Config[*memory.Tx]) { c.Protocol = 7 },
	}
	for name, mut := range cases {
		cfg := base
		mut(&cfg)
		if _, err := consumer.New(context.Background(), cfg); !errors.Is(err, consumer.ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}

// TestStaticMembershipRefused: hazard 1 (docs/design.md#hazard-1).
func TestStaticMembershipRefused(t *testing.T) {
	cfg := consumer.Config[*memory.Tx]{
		Brokers: []string{"127.0.0.1:1"}, Group: "g", Topic: "t", Sink: memory.New(),
		Handlers:   map[string]consumer.Handler[*memory.Tx]{"append": appendHandler},
		InstanceID: "worker-1",
	}
	_, err := consumer.New(context.Background(), cfg)
	if !errors.Is(err, consumer.ErrStaticMembership) {
		t.Fatalf("err = %v, want ErrStaticMembership", err)
	}
	if !strings.Contains(err.Error(), "same generation") && !strings.Contains(err.Error(), "share one generation") {
		t.Fatalf("error does not say why: %v", err)
	}
}

func TestUnreachableBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := consumer.New(ctx, consumer.Config[*memory.Tx]{
		Brokers: []string{"127.0.0.1:1"}, Group: "g", Topic: "t", Sink: memory.New(),
		Handlers: map[string]consumer.Handler[*memory.Tx]{"append": appendHandler},
	})
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("err = %v, want an unreachable-broker error", err)
	}
}

// TestKIP848 runs the worker on the next-generation group protocol: tenure
// tokens carry member epochs, a member joining moves partitions, and the
// invariants hold.
func TestKIP848(t *testing.T) {
	t.Parallel()
	const partitions = 4
	c := newCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(40)
	a := startWorker(t, c, s, workerOpts{name: "a", protocol: consumer.KIP848})
	testwait.For(t, 30*time.Second, "a to own every partition", func() bool { return len(a.Owned()) == partitions })
	produce(t, c, partitions, keys, 0, 25)
	b := startWorker(t, c, s, workerOpts{name: "b", protocol: consumer.KIP848})
	testwait.For(t, 30*time.Second, "b to own partitions", func() bool { return len(b.Owned()) > 0 })
	produce(t, c, partitions, keys, 25, 50)
	testwait.For(t, 60*time.Second, "all applied", func() bool { return appliedCount(s, keys) == len(keys)*50 })
	for _, tok := range b.Owned() {
		if tok.Epoch <= 0 {
			t.Fatalf("b's tenure token has no member epoch: %v", tok)
		}
	}
	if st := a.Stats(); st.Revoked == 0 {
		t.Fatalf("a gave nothing up when b joined: %+v", st)
	}
	checkInvariants(t, s, keys, 50)
}

// TestHandlerErrorRetriedNeverSkipped: a failing handler makes its batch
// roll back and retry with backoff; once it succeeds every command is
// applied once, in order. A command with no handler stalls its partition
// rather than being skipped.
func TestHandlerErrorRetriedNeverSkipped(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(3)
	var failures atomic.Int64
	flaky := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		if string(cmd.Payload) == "7" && failures.Add(1) <= 3 {
			return errors.New("downstream hiccup")
		}
		return appendHandler(ctx, tx, cmd)
	}
	w := startWorker(t, c, s, workerOpts{name: "a", handler: flaky})
	produce(t, c, 1, keys, 0, 20)
	testwait.For(t, 30*time.Second, "all applied", func() bool { return appliedCount(s, keys) == 60 })
	checkInvariants(t, s, keys, 20)
	if failures.Load() < 3 || w.Stats().Retries < 3 {
		t.Fatalf("the handler error did not happen or was not retried: failures=%d stats=%+v", failures.Load(), w.Stats())
	}

	// A command type nobody handles: nothing after it is applied.
	rec, err := envelope.Encode(c.topic, 0, envelope.Command{Key: []byte(keys[0]), Type: "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produce(t, c, 1, keys, 20, 21)
	before := w.Stats().Retries
	testwait.For(t, 30*time.Second, "the unhandled command to be retried", func() bool { return w.Stats().Retries > before+2 })
	if n := appliedCount(s, keys); n != 60 {
		t.Fatalf("%d commands applied past an unhandled one; want 60 (stalled)", n)
	}
}

// TestCommitsSinkCheckpointAtClaim: a worker that died after its sink commit
// and before its Kafka commit leaves the sink ahead of Kafka. The next owner
// must commit the sink's checkpoint even when no record is left to apply,
// or lag never returns to zero. (Found by the process-level kill test.)
func TestCommitsSinkCheckpointAtClaim(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(2)
	produce(t, c, 1, keys, 0, 5) // offsets 0..9
	// A previous tenure applied everything but never committed to Kafka.
	old := epochs.Token{Group: c.group, Topic: c.topic, Partition: 0, Epoch: 0, Member: "dead-worker"}
	if _, err := s.Claim(context.Background(), old, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	offsets := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	if _, err := s.Apply(context.Background(), old, sink.Batch{Offsets: offsets}, func(context.Context, *memory.Tx, int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, c, s, workerOpts{name: "a"})
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(c.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	testwait.For(t, 30*time.Second, "Kafka's committed offset to reach the sink's checkpoint", func() bool {
		offs, err := adm.FetchOffsets(context.Background(), c.group)
		if err != nil {
			return false
		}
		o, ok := offs.Lookup(c.topic, 0)
		return ok && o.At == 10
	})
	if st := w.Stats(); st.Records != 0 {
		t.Fatalf("the worker re-applied %d records already in the sink", st.Records)
	}
}
