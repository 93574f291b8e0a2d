package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
	"github.com/workrouter/workrouter/sink/sinkmetrics"
)

// TestNewRefusesConfig: New refuses a config it cannot serve, before it
// connects, with an error matching ErrConfig.
func TestNewRefusesConfig(t *testing.T) {
	ok := kafka.Config{Brokers: []string{"127.0.0.1:1"}, CheckpointTopic: "cp"}
	for name, mod := range map[string]func(*kafka.Config){
		"no brokers":                     func(c *kafka.Config) { c.Brokers = nil },
		"no checkpoint topic":            func(c *kafka.Config) { c.CheckpointTopic = "" },
		"checkpoint topic is dead topic": func(c *kafka.Config) { c.DeadLetterTopic = c.CheckpointTopic },
		"negative producers":             func(c *kafka.Config) { c.Producers = -1 },
		"negative timeout":               func(c *kafka.Config) { c.TransactionTimeout = -time.Second },
		"negative dead-letter bytes":     func(c *kafka.Config) { c.MaxDeadLetterBytes = -1 },
		"group prefix with broker fence": func(c *kafka.Config) { c.GroupPrefix = "x-" },
	} {
		cfg := ok
		mod(&cfg)
		if s, err := kafka.New(context.Background(), cfg); !errors.Is(err, kafka.ErrConfig) {
			if s != nil {
				s.Close()
			}
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
}

// TestProduceRefusesSinkTopics: a handler cannot produce to the sink's
// own checkpoint or dead-letter topic, nor without a topic; the batch
// fails as the handler's error and sends nothing.
func TestProduceRefusesSinkTopics(t *testing.T) {
	b := newFake(t)
	tp := b.sinkTopics(t)
	s := b.newSink(t, tp, func(c *kafka.Config) { c.ClientFenceOnly = true })
	in := b.topic(t, "in", 1, nil)
	tok := epochs.Token{Group: "g-" + b.sfx, Topic: in, Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(t.Context(), tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	for i, topic := range []string{tp.checkpoint, tp.dead, ""} {
		// An offset of its own each: a refusal that failed to refuse
		// must not turn the next case into a replay.
		_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{int64(i)}}, func(ctx context.Context, tx *kafka.Tx, _ int) error {
			return tx.Produce(ctx, kafka.Record{Topic: topic, Value: []byte("x")})
		})
		var ee *sink.EffectError
		if !errors.Is(err, kafka.ErrBadRecord) || !errors.As(err, &ee) || s.IsSinkFailure(err) {
			t.Errorf("a record to topic %q: %v; want the handler's *sink.EffectError matching ErrBadRecord", topic, err)
		}
	}
	if dl := b.readCommitted(t, tp.dead); len(dl) != 0 {
		t.Errorf("%d records reached the dead-letter topic", len(dl))
	}
}

// TestOffsetCommitterThroughWrapper: the worker finds the sink's
// consumer.OffsetCommitter (and sink.Health) through the metrics wrapper,
// as it finds every optional capability, with sink.As.
func TestOffsetCommitterThroughWrapper(t *testing.T) {
	b := newFake(t)
	s := b.newSink(t, b.sinkTopics(t), func(c *kafka.Config) { c.ClientFenceOnly = true })
	w, err := sinkmetrics.Wrap[*kafka.Tx](s, prometheus.NewRegistry(), "kafka")
	if err != nil {
		t.Fatal(err)
	}
	if oc, ok := sink.As[consumer.OffsetCommitter](w); !ok || !oc.CommitsOffsets() {
		t.Fatal("consumer.OffsetCommitter is not found through the metrics wrapper: the worker would commit offsets beside the sink's transactions")
	}
	if _, ok := sink.As[sink.Health](w); !ok {
		t.Fatal("sink.Health is not found through the metrics wrapper")
	}
}
