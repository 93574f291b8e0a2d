package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/memory"
)

// produceType sends one command of type typ with key to the partition the
// router would choose for it, and returns that partition.
func produceType(t *testing.T, c *cluster, partitions int32, key, typ string) int32 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := envelope.Partition([]byte(key), partitions)
	r, err := envelope.Encode(c.topic, p, envelope.Command{Key: []byte(key), Type: typ, Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadinessNamesTheStalledPartition: a command without a handler
// stalls its partition (the default PoisonPolicy); the Worker stays ready
// under Readiness(0) and is not ready under a shorter maxStall, naming that
// partition, its attempts and its cause, and no other partition.
func TestReadinessNamesTheStalledPartition(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 2)
	w := startWorker(t, c, memory.New(), workerOpts{name: "w"})
	testwait.For(t, 30*time.Second, "the worker to be ready with both partitions", func() bool {
		return w.Ready() && len(w.Owned()) == 2
	})
	if r := w.Readiness(time.Millisecond); !r.Ready || r.String() != "ready" {
		t.Fatalf("Readiness before any stall = %+v (%q), want ready", r, r)
	}
	p := produceType(t, c, 2, "k", "unknown-type")
	testwait.For(t, 30*time.Second, "the partition to stall", func() bool {
		for _, st := range w.Partitions() {
			if st.Token.Partition == p && st.State == consumer.StateStalled && st.Attempts >= 2 {
				return true
			}
		}
		return false
	})
	if !w.Ready() {
		t.Fatalf("Ready() false while a partition is stalled: Readiness(0) = %q; stalls must not affect it without maxStall", w.Readiness(0))
	}
	time.Sleep(5 * time.Millisecond)
	r := w.Readiness(time.Millisecond)
	if r.Ready || r.Reason != "" || len(r.Blocking) != 1 || r.Blocking[0].Token.Partition != p {
		t.Fatalf("Readiness(1ms) with partition %d stalled = %+v, want not ready blocked by partition %d alone", p, r, p)
	}
	msg := r.String()
	if !strings.HasPrefix(msg, fmt.Sprintf("partition %d: stalled for ", p)) || !regexp.MustCompile(`\([0-9]+ attempts?\): `).MatchString(msg) || !strings.Contains(msg, "unknown-type") {
		t.Fatalf("Readiness(1ms) says %q, want \"partition %d: stalled for <d> (<n> attempts): <cause naming the type>\"", msg, p)
	}
	if r := w.Readiness(time.Hour); !r.Ready {
		t.Fatalf("Readiness(1h) = %q, want ready: the stall is younger than an hour", r)
	}
	w.Close()
	if r := w.Readiness(0); r.Ready || r.Reason == "" {
		t.Fatalf("Readiness after Close = %+v, want a whole-worker reason", r)
	}
}

// TestDeadLetterTopicChecked: New refuses a dead-letter topic that is the
// command topic (ErrDeadLetterLoop) or that does not exist
// (ErrDeadLetterTopicMissing), both matching ErrConfig, and accepts one
// that exists.
func TestDeadLetterTopicChecked(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1)
	cfg := consumer.Config[*memory.Tx]{
		Brokers: c.addrs, Group: "g", Topic: c.topic, Sink: memory.New(),
		Handlers: map[string]consumer.Handler[*memory.Tx]{"append": appendHandler},
	}
	for _, tc := range []struct {
		dlq  string
		want error
	}{
		{c.topic, consumer.ErrDeadLetterLoop},
		{"no-such-dlq", consumer.ErrDeadLetterTopicMissing},
	} {
		cfg := cfg
		cfg.DeadLetterTopic = tc.dlq
		w, err := consumer.New(t.Context(), cfg)
		if err == nil {
			w.Close()
		}
		if !errors.Is(err, tc.want) || !errors.Is(err, consumer.ErrConfig) || !strings.Contains(err.Error(), tc.dlq) {
			t.Errorf("DeadLetterTopic %q: err = %v, want %v (and ErrConfig) naming the topic", tc.dlq, err, tc.want)
		}
	}
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(c.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.CreateTopic(t.Context(), 1, 1, nil, "dlq"); err != nil {
		t.Fatal(err)
	}
	cfg.DeadLetterTopic = "dlq"
	w, err := consumer.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("DeadLetterTopic that exists: %v", err)
	}
	w.Close()
}

// TestKeyConcurrencyCapped: New refuses more than MaxKeyConcurrency lanes
// and accepts exactly that many.
func TestKeyConcurrencyCapped(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1)
	cfg := consumer.Config[*memory.Tx]{
		Brokers: c.addrs, Group: "g", Topic: c.topic, Sink: memory.New(),
		Handlers:       map[string]consumer.Handler[*memory.Tx]{"append": appendHandler},
		KeyConcurrency: consumer.MaxKeyConcurrency + 1,
	}
	if _, err := consumer.New(t.Context(), cfg); !errors.Is(err, consumer.ErrConfig) || !strings.Contains(err.Error(), fmt.Sprint(consumer.MaxKeyConcurrency+1)) {
		t.Fatalf("KeyConcurrency %d: %v, want ErrConfig naming it", cfg.KeyConcurrency, err)
	}
	cfg.KeyConcurrency = consumer.MaxKeyConcurrency
	w, err := consumer.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("KeyConcurrency %d: %v", cfg.KeyConcurrency, err)
	}
	w.Close()
}
