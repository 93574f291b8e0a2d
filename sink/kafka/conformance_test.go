package kafka_test

import (
	"context"
	"errors"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"testing"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
	"github.com/workrouter/workrouter/sink/sinktest"
)

// TestConformance runs the conformance suite on the sink's client-side
// fence (ClientFenceOnly: the suite's tokens are made up, no group member
// holds them, so the coordinator could only refuse them all). Every Put
// is a record produced in the batch's transaction to the output topic;
// Get reads that topic as a read_committed consumer. The broker's fence is
// TestZombieRefusedByBroker's.
func TestConformance(t *testing.T) {
	forBrokers(t, func(t *testing.T, b *broker) {
		// The suite's tokens name topic "orders" (partitions 3 and 4) and
		// "orders-other": the coordinator refuses an offset commit for a
		// partition that does not exist (Kafka and kfake alike). On the
		// real cluster they are created if missing and left in place
		// (another run may be using them); their offsets go to groups of
		// the run's own.
		adm := b.admin(t)
		for _, topic := range []string{"orders", "orders-other"} {
			if _, err := adm.CreateTopic(t.Context(), 5, -1, nil, topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				t.Fatal(err)
			}
			waitTopic(t, adm, topic, 5)
		}
		tp := b.sinkTopics(t)
		// A group prefix of its own per sink: the suite's groups are
		// named after its tests, and the real cluster keeps their offsets
		// from run to run.
		open := func(t testing.TB, prefix string) *kafka.Sink {
			return b.newSink(t, tp, func(c *kafka.Config) { c.ClientFenceOnly, c.GroupPrefix = true, prefix })
		}
		var prefixes sync.Map // *kafka.Sink → its group prefix
		sinktest.Run(t, sinktest.Harness[*kafka.Tx]{
			Open: func(t testing.TB) sink.Sink[*kafka.Tx] {
				prefix := suffix() + "-"
				s := open(t, prefix)
				prefixes.Store(s, prefix)
				return s
			},
			// The checkpoint and the holder that committed it are in
			// Kafka (the committed offset and its metadata): a new Sink
			// on the same group reads them.
			Reopen: func(t testing.TB, s sink.Sink[*kafka.Tx]) sink.Sink[*kafka.Tx] {
				prefix, ok := prefixes.Load(s)
				if !ok {
					t.Fatalf("Reopen of a sink Open did not return")
				}
				s.(*kafka.Sink).Close()
				r := open(t, prefix.(string))
				prefixes.Store(r, prefix)
				return r
			},
			Put: func(ctx context.Context, tx *kafka.Tx, key, value string) error {
				return tx.Produce(ctx, kafka.Record{Topic: tp.out, Key: []byte(key), Value: []byte(value)})
			},
			Get: func(ctx context.Context, _ sink.Sink[*kafka.Tx], key string) (string, bool, error) {
				var v string
				var ok bool
				recs, err := b.tryReadCommitted(tp.out)
				if err != nil {
					return "", false, err
				}
				for _, r := range recs {
					if string(r.Key) == key {
						v, ok = string(r.Value), true
					}
				}
				return v, ok, nil
			},
		})
	})
}
