package router

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
