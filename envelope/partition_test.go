package envelope_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
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
			if got := envelope.Partition([]byte(c.key), n); got != want {
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
		if got := envelope.Partition(key, n); got != want {
			t.Fatalf("Partition(%x, %d) = %d, kgo KafkaHasher gives %d", key, n, got, want)
		}
	}
}

// TestCRC32MatchesLibrdkafka pins CRC32 to librdkafka's consistent
// partitioner: the standard CRC-32 check value, and the placements kcat
// (librdkafka's consistent_random) was seen to make on a 6-partition topic
// in issue 14, where murmur2 puts both keys on partition 0.
func TestCRC32MatchesLibrdkafka(t *testing.T) {
	if got := envelope.CRC32.Partition([]byte("123456789"), math.MaxInt32); got != int32(0xCBF43926%uint32(math.MaxInt32)) {
		t.Errorf("CRC32 of the check string: partition %d", got)
	}
	for key, want := range map[string]int32{"acct-0": 1, "acct-9": 3} {
		if got := envelope.CRC32.Partition([]byte(key), 6); got != want {
			t.Errorf("CRC32.Partition(%q, 6) = %d, want %d (kcat)", key, got, want)
		}
		if got := envelope.Murmur2.Partition([]byte(key), 6); got != 0 {
			t.Errorf("Murmur2.Partition(%q, 6) = %d, want 0", key, got)
		}
	}
}

func TestParsePartitioner(t *testing.T) {
	for in, want := range map[string]envelope.Partitioner{
		"murmur2": envelope.Murmur2, "murmur2_random": envelope.Murmur2, "CRC32": envelope.CRC32,
		"consistent": envelope.CRC32, "consistent_random": envelope.CRC32,
	} {
		got, err := envelope.ParsePartitioner(in)
		if err != nil || got != want {
			t.Errorf("ParsePartitioner(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, _ := envelope.ParsePartitioner(got.String()); back != got {
			t.Errorf("%v does not round-trip through String", got)
		}
	}
	for _, bad := range []string{"", "fnv1a", "random"} {
		if _, err := envelope.ParsePartitioner(bad); !errors.Is(err, envelope.ErrUnknownPartitioner) {
			t.Errorf("ParsePartitioner(%q): %v, want ErrUnknownPartitioner", bad, err)
		}
	}
}
