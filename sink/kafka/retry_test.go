package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
)

// TestRefusedProduceRetriedInTheTransaction: the broker refuses a
// transaction's produce with a retriable error, NOT_ENOUGH_REPLICAS,
// which is what Apache Kafka answers while it cannot yet verify that the
// partition is in the transaction (KIP-890). The producer retries the
// batch after a metadata refresh, inside the transaction, so the Apply
// commits at its first call and its record is visible once. The
// transaction timeout (3s) is what the retry must beat: a client that
// waits kgo's default metadata age (5s) before that refresh finds its
// transaction aborted by the coordinator, which is what the "default age"
// subtest shows (Config.ClientOpts restores that default).
func TestRefusedProduceRetriedInTheTransaction(t *testing.T) {
	t.Run("sink", func(t *testing.T) {
		if err := refusedProduce(t, nil); err != nil {
			t.Fatalf("Apply after one refused produce: %v; want it committed at its first call", err)
		}
	})
	t.Run("default age", func(t *testing.T) {
		if err := refusedProduce(t, []kgo.Opt{kgo.MetadataMinAge(5 * time.Second)}); err == nil {
			t.Fatal("Apply with kgo's default metadata age committed; want the coordinator to have aborted its transaction (the check above cannot fail)")
		} else {
			t.Logf("as expected at kgo's default metadata age: %v", err)
		}
	})
}

// refusedProduce applies one input whose transaction's first produce to
// the output topic is refused with NOT_ENOUGH_REPLICAS, on a sink with
// the extra client options opts, and returns the Apply's error. It fails
// the test if the fault did not happen, or if the output is not what the
// Apply's result says (once if it committed, absent if not).
func refusedProduce(t *testing.T, opts []kgo.Opt) error {
	ctx := t.Context()
	b := newFake(t)
	tp := b.sinkTopics(t)
	in := b.topic(t, "in", 1, nil)
	s := b.newSink(t, tp, func(c *kafka.Config) {
		c.ClientFenceOnly, c.Producers, c.TransactionTimeout = true, 1, 3*time.Second
		c.ClientOpts = opts
	})
	tok := epochs.Token{Group: "wr-kafkasink-refused-" + b.sfx, Topic: in, Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	fault := b.kf.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: tp.out, Err: kerr.NotEnoughReplicas})
	defer fault.Remove()
	res, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, produceEffect(tp.out, []int64{0}, "once"))
	if fault.Hits() != 1 {
		t.Fatalf("the fault answered %d produce requests, want 1: the fault did not happen", fault.Hits())
	}
	want := 0
	if err == nil {
		if res.NextOffset != 1 || res.Applied != 1 {
			t.Fatalf("Apply: %+v, want input 0 applied", res)
		}
		want = 1
	}
	if got := b.readCommitted(t, tp.out); len(got) != want {
		t.Fatalf("read_committed sees %d records of the output, want %d (Apply: %v)", len(got), want, err)
	}
	return err
}
