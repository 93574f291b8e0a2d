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

// TestSendDoesNotWaitForTheLinger: with a linger of a minute (kgo's
// longest), a lone Send is acknowledged long before it, and so are sends
// from several goroutines at once: Send has the client send what it has
// buffered instead of lingering. The ctx would cancel a Send still
// lingering after 20s.
func TestSendDoesNotWaitForTheLinger(t *testing.T) {
	r := newTestRouter(t, kgo.ProducerLinger(time.Minute))
	if !r.lingers {
		t.Fatal("a client with a 1-minute linger, and the router does not know it lingers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.Send(ctx, Command{Key: []byte("k"), Type: "t"}); err != nil {
		t.Fatalf("lone Send with a 1-minute linger: %v", err)
	}
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			_, err := r.Send(ctx, Command{Key: []byte{byte('a' + i)}, Type: "t"})
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Send with a 1-minute linger: %v", err)
		}
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
