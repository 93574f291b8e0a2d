package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/kafka"
)

// TestMain fails the package's tests if any goroutine they started is
// still running when they end.
// Run as a child by TestSIGSTOPZombie (WR_KAFKASINK_CHILD set), the
// test binary is a worker process instead.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childWorker())
	}
	if os.Getenv(brokerEnv) != "" {
		os.Exit(childBroker())
	}
	goleak.VerifyTestMain(m)
}

// broker is where a test runs: an in-process kfake cluster, or the real
// cluster named by WORKROUTER_TEST_BROKERS, with topics of the test's own
// (a random suffix) on it.
type broker struct {
	name  string
	addrs []string
	kf    *kfake.Cluster // nil on the real cluster
	sfx   string         // the suffix of the test's topic and group names
}

// forBrokers runs fn as subtests on the brokers a test runs on: kfake
// always, and the real cluster when WORKROUTER_TEST_BROKERS is set. Without
// it, the real subtest skips with one line; under CI=true it is left out
// instead, because CI runs this package a second time with the variable
// set (.ci/run's real-Kafka step), as it does the consumer's suites.
func forBrokers(t *testing.T, fn func(t *testing.T, b *broker)) {
	t.Run("kfake", func(t *testing.T) {
		fn(t, newFake(t))
	})
	env := os.Getenv("WORKROUTER_TEST_BROKERS")
	if env == "" && os.Getenv("CI") == "true" {
		return
	}
	t.Run("kafka", func(t *testing.T) {
		if env == "" {
			t.Skip("skipped: WORKROUTER_TEST_BROKERS is not set (a real Kafka cluster, e.g. .ci/services up)")
		}
		fn(t, &broker{name: "kafka", addrs: strings.Split(env, ","), sfx: suffix()})
	})
}

func suffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newFake(t testing.TB) *broker {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &broker{name: "kfake", addrs: c.ListenAddrs(), kf: c, sfx: suffix()}
}

// topic returns the test's topic named base, created with partitions
// partitions (once: a second call returns the name).
func (b *broker) topic(t testing.TB, base string, partitions int32, configs map[string]*string) string {
	t.Helper()
	name := "wr-kafkasink-" + base + "-" + b.sfx
	adm := b.admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, -1, configs, name); err != nil && !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
		t.Fatalf("create topic %s: %v", name, err)
	}
	waitTopic(t, adm, name, partitions)
	if b.kf == nil {
		t.Cleanup(func() {
			adm, err := kadm.NewOptClient(kgo.SeedBrokers(b.addrs...))
			if err == nil {
				adm.DeleteTopics(context.Background(), name)
				adm.Close()
			}
		})
	}
	return name
}

// waitTopic waits until the metadata serves topic with partitions
// partitions, each with a leader.
func waitTopic(t testing.TB, adm *kadm.Client, name string, partitions int32) {
	t.Helper()
	testwait.For(t, 30*time.Second, "the metadata to serve topic "+name, func() bool {
		md, err := adm.Metadata(context.Background(), name)
		if err != nil || md.Topics[name].Err != nil || len(md.Topics[name].Partitions) < int(partitions) {
			return false
		}
		for _, p := range md.Topics[name].Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
		return true
	})
}

// client returns a plain client of b, closed at the test's end.
func (b *broker) client(t testing.TB) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (b *broker) admin(t testing.TB) *kadm.Client {
	t.Helper()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(b.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	return adm
}

// sinkTopics are the topics one sink writes.
type sinkTopics struct {
	out, checkpoint, dead string
}

func (b *broker) sinkTopics(t testing.TB) sinkTopics {
	compact, large := "compact", "4194304"
	return sinkTopics{
		out:        b.topic(t, "out", 1, nil),
		checkpoint: b.topic(t, "checkpoint", 1, map[string]*string{"cleanup.policy": &compact}),
		// The suite's poison record is 1 MiB, and its dead letter adds
		// headers: above Kafka's default limit.
		dead: b.topic(t, "dead", 1, map[string]*string{"max.message.bytes": &large}),
	}
}

// newSink opens a sink on b writing tp, closed at the test's end.
func (b *broker) newSink(t testing.TB, tp sinkTopics, mod func(*kafka.Config)) *kafka.Sink {
	t.Helper()
	cfg := kafka.Config{Brokers: b.addrs, CheckpointTopic: tp.checkpoint, DeadLetterTopic: tp.dead,
		TransactionalID: "wr-kafkasink-test-" + b.sfx, Producers: 2, MaxDeadLetterBytes: 4 << 20}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := kafka.New(ctx, cfg)
	if err != nil {
		t.Fatalf("kafka.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// readCommitted returns the records of topic (every partition) that a
// read_committed consumer sees, from the start: it produces a sentinel
// record and reads up to it, so that every transaction that ended before
// the call has been read past (one still open would block it).
func (b *broker) readCommitted(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	recs, err := b.tryReadCommitted(topic)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func (b *broker) tryReadCommitted(topic string) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return b.tryReadCommittedCtx(ctx, topic)
}

// tryReadCommittedCtx is tryReadCommitted within ctx.
func (b *broker) tryReadCommittedCtx(ctx context.Context, topic string) ([]*kgo.Record, error) {
	sentinel := "\x00sentinel-" + suffix()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	defer pcl.Close()
	md, err := kadm.NewClient(pcl).Metadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	parts := len(md.Topics[topic].Partitions)
	for p := range parts {
		if err := pcl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(p), Key: []byte(sentinel)}).FirstErr(); err != nil {
			return nil, fmt.Errorf("produce sentinel: %w", err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	seen := 0
	for seen < parts {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read_committed read of %s did not reach its sentinel (an open transaction?): %w", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == sentinel {
				seen++
				return
			}
			if strings.HasPrefix(string(r.Key), "\x00sentinel-") {
				return
			}
			out = append(out, r)
		})
	}
	return out, nil
}

// header returns the value of header key of r.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
