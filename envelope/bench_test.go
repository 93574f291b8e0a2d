package envelope_test

import (
	"testing"

	"github.com/workrouter/workrouter/envelope"
)

// benchCommand returns the command the codec benchmarks encode: a key of
// workrouter-lab bench's shape, a 100-byte payload and one user header.
func benchCommand() envelope.Command {
	return envelope.Command{Key: []byte("key-000000"), Type: "bench", Payload: make([]byte, 100),
		Headers: []envelope.Header{{Key: "trace", Value: []byte("abc")}}}
}

// BenchmarkEncode encodes a command with one user header.
func BenchmarkEncode(b *testing.B) {
	cmd := benchCommand()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := envelope.Encode("bench", 3, cmd); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode decodes a record with one user header.
func BenchmarkDecode(b *testing.B) {
	rec, err := envelope.Encode("bench", 3, benchCommand())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := envelope.Decode(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecoder decodes the record of BenchmarkDecode with a Decoder,
// which reuses the Type string of a type it has seen.
func BenchmarkDecoder(b *testing.B) {
	rec, err := envelope.Encode("bench", 3, benchCommand())
	if err != nil {
		b.Fatal(err)
	}
	var d envelope.Decoder
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(rec); err != nil {
			b.Fatal(err)
		}
	}
}
