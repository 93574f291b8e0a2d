package router

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// newTestRouter starts a kfake broker with a 2-partition topic and a
// Router on it with opts, closed at cleanup.
func newTestRouter(t *testing.T, opts ...kgo.Opt) *Router {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := New(ctx, Config{Brokers: c.ListenAddrs(), Topic: "t", ClientOpts: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestNoLingerByDefault: the client the router builds has no linger (a
// lone Send is not held back for a batch), and a linger in ClientOpts
// overrides that default.
func TestNoLingerByDefault(t *testing.T) {
	if got := newTestRouter(t).cl.OptValue(kgo.ProducerLinger); got != time.Duration(0) {
		t.Fatalf("default linger %v, want 0", got)
	}
	if got := newTestRouter(t, kgo.ProducerLinger(7*time.Millisecond)).cl.OptValue(kgo.ProducerLinger); got != 7*time.Millisecond {
		t.Fatalf("linger with kgo.ProducerLinger(7ms) in ClientOpts: %v", got)
	}
}

// TestRecordTooLargeIsRefusedBeforeBuffering: a command that cannot fit
// one record batch fails with ErrRecordTooLarge (and kerr.MessageTooLarge)
// without an ID, so nothing was handed to the client; one that fits, of
// the same key, is written.
func TestRecordTooLargeIsRefusedBeforeBuffering(t *testing.T) {
	r := newTestRouter(t, kgo.ProducerBatchMaxBytes(10_000))
	ctx := context.Background()
	res, err := r.Send(ctx, Command{Key: []byte("k"), Type: "t", Payload: make([]byte, 10_000)})
	if !errors.Is(err, ErrRecordTooLarge) || !errors.Is(err, kerr.MessageTooLarge) || res.ID != "" {
		t.Fatalf("Send of 10,000 bytes with 10,000-byte batches: %+v, %v; want ErrRecordTooLarge and no ID", res, err)
	}
	if _, err := r.Send(ctx, Command{Key: []byte("k"), Type: "t", Payload: make([]byte, 9_000)}); err != nil {
		t.Fatalf("Send of 9,000 bytes: %v", err)
	}
}
