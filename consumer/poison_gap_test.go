package consumer_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/memory"
)

// txnProducer produces in transactions, as Kafka Streams, Flink or a
// transactional franz-go client do: every transaction leaves a control
// record (its commit or abort marker) at an offset a read_committed
// consumer never sees, and an aborted transaction's records are skipped
// too.
type txnProducer struct {
	t  *testing.T
	cl *kgo.Client
}

func newTxnProducer(t *testing.T, c *cluster) *txnProducer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID("poison-gap-"+t.Name()), kgo.DefaultProduceTopic(c.topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &txnProducer{t: t, cl: cl}
}

// txn produces recs in one transaction, commits it (or aborts it, if
// commit is false), and returns their offsets.
func (p *txnProducer) txn(commit bool, recs ...*kgo.Record) []int64 {
	p.t.Helper()
	ctx := p.t.Context()
	if err := p.cl.BeginTransaction(); err != nil {
		p.t.Fatal(err)
	}
	res := p.cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		p.t.Fatal(err)
	}
	end := kgo.TryCommit
	if !commit {
		end = kgo.TryAbort
	}
	if err := p.cl.EndTransaction(ctx, end); err != nil {
		p.t.Fatal(err)
	}
	var offs []int64
	for _, r := range res {
		offs = append(offs, r.Record.Offset)
	}
	return offs
}

// TestPoisonAfterOffsetGap (hazard 9): a poison record right after an
// offset with no record for a read_committed consumer (a transaction's
// commit or abort marker, an aborted transaction's record) is
// dead-lettered at its own offset, and the good commands around it are
// applied: the gap does not stall the partition.
func TestPoisonAfterOffsetGap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		abort bool // an aborted transaction between the good command and the poison record
	}{
		{"commit markers", false},
		{"aborted transaction", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 1)
			s := memory.New()
			var (
				mu      sync.Mutex
				stalled []consumer.Stalled
				dead    []consumer.DeadLettered
			)
			obs := consumer.ObserverFunc(func(e consumer.Event) {
				mu.Lock()
				defer mu.Unlock()
				switch e := e.(type) {
				case consumer.Stalled:
					stalled = append(stalled, e)
				case consumer.DeadLettered:
					dead = append(dead, e)
				}
			})
			p := newTxnProducer(t, c)
			// Good command (offset 0), its commit marker (1), [an aborted
			// command (2) and its abort marker (3)], a record that is not
			// a command, its marker, a good command, its marker.
			first := p.txn(true, command(t, c.topic, 0, "k", "append", "0"))
			if tc.abort {
				p.txn(false, command(t, c.topic, 0, "k", "append", "aborted"))
			}
			poison := p.txn(true, &kgo.Record{Topic: c.topic, Partition: 0, Key: []byte("k"), Value: []byte(`{"plain": "json"}`)})[0]
			last := p.txn(true, command(t, c.topic, 0, "k", "append", "1"))[0]
			if first[0] != 0 || poison <= first[0]+1 || last <= poison+1 {
				t.Fatalf("offsets %d, %d, %d: want gaps (markers) between the records", first[0], poison, last)
			}

			// noStall fails the test at the first Stalled event of a dead
			// letter: the partition is stuck behind the poison record.
			noStall := func() {
				t.Helper()
				mu.Lock()
				defer mu.Unlock()
				for _, e := range stalled {
					if e.Op == sink.OpDeadLetter {
						t.Fatalf("Stalled event for the dead letter at %d (attempt %d): %v", e.FirstOffset, e.Attempt, e.Err)
					}
				}
			}
			w := startWorker(t, c, s, workerOpts{name: "a", observers: []consumer.Observer{obs}})
			testwait.For(t, 30*time.Second, "the good commands applied", func() bool {
				noStall()
				return appliedCount(s, []string{"k"}) == 2
			})
			testwait.For(t, 30*time.Second, "the poison record dead-lettered", func() bool {
				dls, _ := s.DeadLetters(t.Context(), dlq.Filter{})
				return len(dls) == 1
			})
			noStall()
			if got := logOf(s, "k"); !slices.Equal(got, []int{0, 1}) {
				t.Fatalf("applied %v, want [0 1] (the aborted command never)", got)
			}
			dls, err := s.DeadLetters(t.Context(), dlq.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			if d := dls[0]; d.Record.Offset != poison || d.Record.Reason != consumer.ReasonUndecodable || d.State != dlq.Open {
				t.Fatalf("dead letter %+v: want the record at offset %d, undecodable, open", d, poison)
			}
			fences, err := s.Fences(t.Context())
			if err != nil || len(fences) != 1 || fences[0].NextOffset != last+1 {
				t.Fatalf("fences %+v, %v: want NextOffset %d", fences, err, last+1)
			}
			if st := w.Stats(); st.DeadLettered != 1 {
				t.Fatalf("Stats.DeadLettered = %d, want 1", st.DeadLettered)
			}
			mu.Lock()
			if len(dead) != 1 || dead[0].Offset != poison {
				t.Errorf("DeadLettered events %+v, want one at offset %d", dead, poison)
			}
			mu.Unlock()
			if err := s.Verify(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
