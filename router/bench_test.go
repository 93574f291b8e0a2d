package router_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/router"
)

// The produce benchmarks send to an in-process kfake broker, which shares
// the CPU with the client: compare SendAsync with RawProduce from the same
// run (go test -bench 'SendAsync|RawProduce' -benchmem), not with figures
// from another machine. The codec's own benchmarks (Encode, Decode, Decoder)
// are in package envelope.

const benchPartitions = 12

// benchCommands returns n commands over 1,000 keys with 100-byte payloads,
// as workrouter-lab bench sends them.
func benchCommands(n int) []router.Command {
	payload := make([]byte, 100)
	cmds := make([]router.Command, n)
	for i := range cmds {
		cmds[i] = router.Command{Key: fmt.Appendf(nil, "key-%06d", i%1000), Type: "bench", Payload: payload}
	}
	return cmds
}

// BenchmarkSendAsync sends b.N commands through Router.SendAsync, then
// Flushes.
func BenchmarkSendAsync(b *testing.B) {
	addrs := newCluster(b, "bench", benchPartitions)
	r := newRouter(b, router.Config{Brokers: addrs, Topic: "bench"})
	ctx := context.Background()
	cmds := benchCommands(1000)
	var failed atomic.Int64
	cb := func(_ router.Result, err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		r.SendAsync(ctx, cmds[i%len(cmds)], cb)
	}
	if err := r.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d sends failed", n)
	}
}

// BenchmarkRawProduce is BenchmarkSendAsync's baseline: the same records
// (envelope.Partition, the type header) through a raw kgo client's Produce,
// uncompressed as the router produces by default.
func BenchmarkRawProduce(b *testing.B) {
	addrs := newCluster(b, "bench", benchPartitions)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	cmds := benchCommands(1000)
	typ := []byte("bench")
	var failed atomic.Int64
	cb := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		cmd := cmds[i%len(cmds)]
		cl.Produce(ctx, &kgo.Record{
			Topic:     "bench",
			Partition: envelope.Partition(cmd.Key, benchPartitions),
			Key:       cmd.Key,
			Value:     cmd.Payload,
			Headers:   []kgo.RecordHeader{{Key: envelope.TypeHeader, Value: typ}},
		}, cb)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d produces failed", n)
	}
}

// BenchmarkSend sends b.N commands one at a time through Router.Send, each
// waiting for its acknowledgement.
func BenchmarkSend(b *testing.B) {
	addrs := newCluster(b, "bench", benchPartitions)
	r := newRouter(b, router.Config{Brokers: addrs, Topic: "bench"})
	ctx := context.Background()
	cmds := benchCommands(1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := r.Send(ctx, cmds[i%len(cmds)]); err != nil {
			b.Fatal(err)
		}
	}
}
