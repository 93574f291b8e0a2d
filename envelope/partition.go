package envelope

import (
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// Partition returns the partition of a topic with numPartitions partitions
// that the Java client's default partitioner picks for key:
// toPositive(murmur2(key)) % numPartitions, where toPositive masks the sign
// bit. Producers in any language that follow Kafka's default place a key on
// the same partition. numPartitions must be positive; Partition panics if
// it is zero, like an integer division. Safe to call from any goroutine.
func Partition(key []byte, numPartitions int32) int32 {
	return int32(murmur2(key)&0x7fffffff) % numPartitions
}

// murmur2 is Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils.murmur2,
// seed 0x9747b28c), returning the Java int's bits as a uint32.
//
// It is written here rather than imported because kgo keeps its copy
// unexported, and the only exported route (kgo.StickyKeyPartitioner) hashes
// inside a producer rather than for a given count.
func murmur2(data []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(data))
	for len(data) >= 4 {
		k := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
		data = data[4:]
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// Partitioner names how keys are mapped to partitions. Every producer of a
// topic and its workers must agree on it: a key placed on another partition
// than the one the workers expect breaks per-key serialization
// (docs/design.md#hazard-11). The zero value is Murmur2.
type Partitioner int

const (
	// Murmur2 is Kafka's default (the Java client's, franz-go's, and
	// librdkafka's "murmur2_random" for keyed records): see [Partition].
	Murmur2 Partitioner = iota
	// CRC32 is librdkafka's "consistent" and "consistent_random" (the
	// default of librdkafka, kcat, confluent-kafka-go, confluent-kafka-python
	// and node-rdkafka) for keyed records: crc32(key) % numPartitions, with
	// the IEEE polynomial. Choose it to adopt workrouter on a topic whose
	// existing producers use librdkafka's default partitioner.
	CRC32
)

// ParsePartitioner returns the Partitioner named s: "murmur2" (also
// librdkafka's "murmur2_random") or "crc32" (also librdkafka's
// "consistent" and "consistent_random"), in any case. Other names fail
// with an error matching [ErrUnknownPartitioner]. Safe to call from any
// goroutine.
func ParsePartitioner(s string) (Partitioner, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "murmur2", "murmur2_random":
		return Murmur2, nil
	case "crc32", "consistent", "consistent_random":
		return CRC32, nil
	}
	return 0, fmt.Errorf("%w %q: want murmur2 or crc32", ErrUnknownPartitioner, s)
}

// String returns "murmur2", "crc32" or "Partitioner(n)". Safe to call from
// any goroutine.
func (p Partitioner) String() string {
	switch p {
	case Murmur2:
		return "murmur2"
	case CRC32:
		return "crc32"
	}
	return "Partitioner(" + strconv.Itoa(int(p)) + ")"
}

// Valid reports whether p is Murmur2 or CRC32. Safe to call from any
// goroutine.
func (p Partitioner) Valid() bool { return p == Murmur2 || p == CRC32 }

// Partition returns the partition p maps key to on a topic with
// numPartitions partitions. numPartitions must be positive, and p valid
// (an invalid p maps like Murmur2). Safe to call from any goroutine.
func (p Partitioner) Partition(key []byte, numPartitions int32) int32 {
	if p == CRC32 {
		return int32(crc32.ChecksumIEEE(key) % uint32(numPartitions))
	}
	return Partition(key, numPartitions)
}
