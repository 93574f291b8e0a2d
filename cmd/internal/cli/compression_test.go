package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/internal/batchcodec"
)

// TestProduceCompression: produce writes uncompressed batches by default
// and --compression's codec when given; an unknown codec is refused in
// the flag's words.
func TestProduceCompression(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"none": 1, "zstd": 1})
	for topic, args := range map[string][]string{"none": nil, "zstd": {"--compression", "zstd"}} {
		if _, stderr, err := runCLI(t, nil, append([]string{"produce", "--brokers", addr, "--topic", topic, "--count", "200"}, args...)...); err != nil {
			t.Fatalf("produce %v: %v\n%s", args, err, stderr)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		_, records, err := batchcodec.Count(context.Background(), cl, topic)
		if err != nil {
			t.Fatal(err)
		}
		if records[topic] != 200 || len(records) != 1 {
			t.Fatalf("produce %v wrote records by codec %v, want 200 %s", args, records, topic)
		}
	}
	_, _, err := runCLI(t, nil, "produce", "--brokers", addr, "--topic", "none", "--count", "1", "--compression", "brotli")
	if err == nil || !strings.Contains(err.Error(), `--compression "brotli": want none, gzip, snappy, lz4 or zstd`) {
		t.Fatalf("--compression brotli: %v", err)
	}
}
