package consumer_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/memory"
)

// lockedBuffer is a bytes.Buffer safe for a logger's and the test's
// goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestTopicMissingIsReported: a worker whose topic does not exist says so
// at once (a TopicMissing event naming the brokers it asked, logged at
// WARN), keeps saying so, and once the topic is created reports
// TopicFound ("topic now exists") and consumes it.
func TestTopicMissingIsReported(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2)
	c.topic = "not-created-yet"
	s := memory.New()

	var (
		mu     sync.Mutex
		events []consumer.Event
	)
	record := consumer.ObserverFunc(func(e consumer.Event) {
		switch e.(type) {
		case consumer.TopicMissing, consumer.TopicFound:
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
	})
	seen := func() []consumer.Event {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(events)
	}
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := consumer.Config[*memory.Tx]{
		Brokers: c.ListenAddrs(), Group: c.group, Topic: c.topic, Sink: s,
		Handlers:       map[string]consumer.Handler[*memory.Tx]{"append": appendHandler},
		SessionTimeout: time.Second, RebalanceTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
		LagInterval: 100 * time.Millisecond,
		Logger:      logger,
		Observers:   []consumer.Observer{record},
	}
	consumer.SetTopicCheckInterval(&cfg, 300*time.Millisecond) // not the 5 s by default between the checks it waits for
	w, err := consumer.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	testwait.For(t, 30*time.Second, "a TopicMissing event", func() bool { return len(seen()) > 0 })
	first, ok := seen()[0].(consumer.TopicMissing)
	if !ok {
		t.Fatalf("first topic event is %T, want TopicMissing", seen()[0])
	}
	if first.Topic != c.topic || !slices.Equal(first.Brokers, c.ListenAddrs()) || first.Attempts != 1 || first.Since.IsZero() {
		t.Fatalf("TopicMissing = %+v, want topic %q, brokers %v, attempt 1", first, c.topic, c.ListenAddrs())
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "topic does not exist") ||
		!strings.Contains(out, "brokers="+c.ListenAddrs()[0]) || !strings.Contains(out, "topic="+c.topic) {
		t.Fatalf("the log does not warn about the missing topic with its brokers:\n%s", out)
	}
	// It keeps saying so, at the bounded rate, with the streak's start.
	testwait.For(t, 30*time.Second, "a second TopicMissing", func() bool { return len(seen()) > 1 })
	second := seen()[1].(consumer.TopicMissing)
	if second.Attempts != 2 || !second.Since.Equal(first.Since) {
		t.Fatalf("second TopicMissing = %+v after %+v", second, first)
	}

	adm, err := kadm.NewOptClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.CreateTopic(context.Background(), 2, 1, nil, c.topic); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "TopicFound", func() bool {
		_, ok := seen()[len(seen())-1].(consumer.TopicFound)
		return ok
	})
	found := seen()[len(seen())-1].(consumer.TopicFound)
	if found.Topic != c.topic || !found.MissingSince.Equal(first.Since) || found.Attempts < 2 {
		t.Fatalf("TopicFound = %+v", found)
	}
	if !strings.Contains(logs.String(), "topic now exists") {
		t.Fatalf("no \"topic now exists\" log line:\n%s", logs.String())
	}
	keys := makeKeys(10)
	produce(t, c, 2, keys, 0, 5)
	testwait.For(t, 60*time.Second, "the new topic's commands applied", func() bool { return appliedCount(s, keys) == 50 })
}

// TestTopicMissingLogLevel: the logging observer warns about a missing
// topic, and logs at ERROR once it has been missing for a minute
// (TopicMissingErrorAfter, export_test.go).
func TestTopicMissingLogLevel(t *testing.T) {
	for _, tc := range []struct {
		missingFor time.Duration
		want       string
	}{
		{time.Second, "level=WARN"},
		{consumer.TopicMissingErrorAfter + time.Second, "level=ERROR"},
	} {
		var buf bytes.Buffer
		consumer.NewLogObserver(slog.New(slog.NewTextHandler(&buf, nil))).Observe(consumer.TopicMissing{
			Topic: "ledger", Brokers: []string{"10.0.0.1:9092", "10.0.0.2:9092"}, Since: time.Now().Add(-tc.missingFor), Attempts: 7,
		})
		out := buf.String()
		if strings.Count(out, "\n") != 1 || !strings.Contains(out, tc.want) || !strings.Contains(out, "brokers=10.0.0.1:9092,10.0.0.2:9092") ||
			!strings.Contains(out, "checks=7") {
			t.Errorf("missing for %s: logged %q, want one %s line naming the brokers", tc.missingFor, out, tc.want)
		}
	}
}
