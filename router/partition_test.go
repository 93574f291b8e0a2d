package router_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/router"
)

// TestPartitionKafkaVectors checks Partition against the Java results of
// Kafka's murmur2 vectors: toPositive(hash) % n.
func TestPartitionKafkaVectors(t *testing.T) {
	for _, c := range []struct {
		key  string
		hash int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		for _, n := range []int32{1, 3, 4, 12, math.MaxInt32} {
			want := (c.hash & 0x7fffffff) % n
			if got := router.Partition([]byte(c.key), n); got != want {
				t.Errorf("Partition(%q, %d) = %d, want %d", c.key, n, got, want)
			}
		}
	}
}

// TestPartitionMatchesKgoKafkaHasher cross-checks Partition against kgo's
// Java-compatible key partitioner for many random keys and counts.
func TestPartitionMatchesKgoKafkaHasher(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tp := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := range 20000 {
		key := make([]byte, 1+rng.IntN(64))
		for j := range key {
			key[j] = byte(rng.Uint32())
		}
		n := int32(1 + rng.IntN(1000))
		if i%10 == 0 {
			n = 1 + rng.Int32N(math.MaxInt32)
		}
		want := int32(tp.Partition(&kgo.Record{Key: key}, int(n)))
		if got := router.Partition(key, n); got != want {
			t.Fatalf("Partition(%x, %d) = %d, kgo KafkaHasher gives %d", key, n, got, want)
		}
	}
}
