package router_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/internal/batchcodec"
	"github.com/workrouter/workrouter/router"
)

// TestCompression: the batches the router puts on the wire are compressed
// with Config.Compression, and with none by default (the codec every Kafka
// client reads without a plugin). The records are sent asynchronously so
// that they share batches: franz-go leaves a batch uncompressed when
// compressing does not make it smaller, as with a lone record.
func TestCompression(t *testing.T) {
	for _, c := range []envelope.Compression{"", envelope.CompressionNone, envelope.CompressionGzip, envelope.CompressionSnappy, envelope.CompressionLZ4, envelope.CompressionZstd} {
		t.Run(c.String()+map[bool]string{true: "-default"}[c == ""], func(t *testing.T) {
			const n = 50
			topic := "compression-" + c.String()
			addrs := newCluster(t, topic, 2)
			r := newRouter(t, router.Config{Brokers: addrs, Topic: topic, Compression: c})
			ctx := testContext(t)
			for i := range n {
				r.SendAsync(ctx, router.Command{Key: fmt.Appendf(nil, "k%d", i%2), Type: "deposit",
					Payload: []byte(strings.Repeat(`{"amount": 100, "currency": "EUR"} `, 8))}, func(_ router.Result, err error) {
					if err != nil {
						t.Errorf("send %d: %v", i, err)
					}
				})
			}
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			batches, records, err := batchcodec.Count(ctx, newClient(t, addrs), topic)
			if err != nil {
				t.Fatal(err)
			}
			want := c.String()
			if records[want] != n || len(records) != 1 {
				t.Fatalf("records on the wire by codec: %v (batches %v), want all %d %s", records, batches, n, want)
			}
			t.Logf("%d records in %d %s batches", n, batches[want], want)
		})
	}
	_, err := router.New(testContext(t), router.Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", Compression: "brotli"})
	if !errors.Is(err, router.ErrConfig) {
		t.Fatalf("Compression brotli: %v, want ErrConfig", err)
	}
}
