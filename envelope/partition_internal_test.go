package envelope

import "testing"

// Vectors from Kafka's UtilsTest.testMurmur2 (the Java reference), as also
// pinned by kgo's TestMurmur2KafkaVectors, plus one binary input generated
// with the JVM client (Sarama's murmur2 test).
func TestMurmur2KafkaVectors(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want int32 // Java's signed int result
	}{
		{[]byte("21"), -973932308},
		{[]byte("foobar"), -790332482},
		{[]byte("a-little-bit-long-string"), -985981536},
		{[]byte("a-little-bit-longer-string"), -1486304829},
		{[]byte("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971},
		{[]byte{'a', 'b', 'c'}, 479470107},
		{[]byte{12, 42, 56, 24, 109, 111}, 274204207},
	} {
		if got := int32(murmur2(c.in)); got != c.want {
			t.Errorf("murmur2(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}
