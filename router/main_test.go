package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/router"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds waits that would otherwise hang a broken test; no test
// asserts anything about how long an operation takes.
const testTimeout = 30 * time.Second

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newCluster starts an in-process kfake broker with topic seeded with
// partitions partitions and returns its addresses.
func newCluster(t testing.TB, topic string, partitions int32) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatalf("kfake.NewCluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// newRouter creates a Router on addrs and closes it at cleanup.
func newRouter(t testing.TB, cfg router.Config) *router.Router {
	t.Helper()
	r, err := router.New(testContext(t), cfg)
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// newClient returns a plain kgo client closed at cleanup.
func newClient(t *testing.T, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// partitionCount reads topic's partition count independently of the router.
func partitionCount(t *testing.T, addrs []string, topic string) int32 {
	t.Helper()
	adm := kadm.NewClient(newClient(t, addrs))
	td, err := adm.ListTopics(testContext(t), topic)
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil {
		t.Fatalf("ListTopics(%q): present=%v err=%v", topic, ok, d.Err)
	}
	return int32(len(d.Partitions))
}

// addPartitions adds n partitions to topic and asserts the count went up.
func addPartitions(t *testing.T, addrs []string, topic string, n int) (before, after int32) {
	t.Helper()
	before = partitionCount(t, addrs, topic)
	adm := kadm.NewClient(newClient(t, addrs))
	resps, err := adm.CreatePartitions(testContext(t), n, topic)
	if err != nil {
		t.Fatalf("CreatePartitions: %v", err)
	}
	if err := resps.Error(); err != nil {
		t.Fatalf("CreatePartitions: %v", err)
	}
	after = partitionCount(t, addrs, topic)
	if after != before+int32(n) {
		t.Fatalf("partition count after CreatePartitions = %d, want %d", after, before+int32(n))
	}
	return before, after
}

// consume reads n records from the start of topic.
func consume(t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := newClient(t, addrs, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx := testContext(t)
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(recs), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s/%d: %v", topic, p, err)
		})
		recs = append(recs, fs.Records()...)
	}
	return recs
}
