package envelope

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Compression is the codec a producer compresses record batches with:
// what every consumer of the topic must be able to decompress
// (docs/interop.md#compression-what-each-consumer-needs says which client needs what).
type Compression string

// The codecs. The zero value is CompressionNone, the default of the
// router and of a Worker's dead-letter mirror: every Kafka client reads
// it without a plugin or an extra package (KafkaJS reads only gzip
// without one; kafka-python needs an extra package for snappy, lz4 and
// zstd).
const (
	CompressionNone   Compression = "none"
	CompressionGzip   Compression = "gzip"
	CompressionSnappy Compression = "snappy"
	CompressionLZ4    Compression = "lz4"
	CompressionZstd   Compression = "zstd"
)

// ParseCompression reads a codec's name: none, gzip, snappy, lz4 or zstd
// ("" is none). It may be called from any goroutine.
func ParseCompression(s string) (Compression, error) {
	c := Compression(s)
	if c == "" {
		return CompressionNone, nil
	}
	if !c.Valid() {
		return "", fmt.Errorf("%w %q: want none, gzip, snappy, lz4 or zstd", ErrUnknownCompression, s)
	}
	return c, nil
}

// Valid reports whether c is one of the codecs or "" (none).
func (c Compression) Valid() bool {
	switch c {
	case "", CompressionNone, CompressionGzip, CompressionSnappy, CompressionLZ4, CompressionZstd:
		return true
	}
	return false
}

// Opt returns the franz-go producer option that compresses with c alone
// (no fallback to another codec): kgo.ProducerBatchCompression. An
// invalid c returns the option of none.
func (c Compression) Opt() kgo.Opt {
	var codec kgo.CompressionCodec
	switch c {
	case CompressionGzip:
		codec = kgo.GzipCompression()
	case CompressionSnappy:
		codec = kgo.SnappyCompression()
	case CompressionLZ4:
		codec = kgo.Lz4Compression()
	case CompressionZstd:
		codec = kgo.ZstdCompression()
	default:
		codec = kgo.NoCompression()
	}
	return kgo.ProducerBatchCompression(codec)
}

// String returns the codec's name ("none" for the zero value).
func (c Compression) String() string {
	if c == "" {
		return string(CompressionNone)
	}
	return string(c)
}
