package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/examples/internal/testenv"
)

// envMain, set to 1, makes the test binary run main().
const envMain = "BILLING_PRODUCER_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestBillingProducer runs the README's producer program: it sends one
// run-billing command keyed by the tenant to the tenant's partition, and
// prints where it landed.
func TestBillingProducer(t *testing.T) {
	const partitions = 3
	brokers := testenv.Cluster(t, "billing", partitions)
	cmd := exec.Command(os.Args[0], "-brokers", strings.Join(brokers, ","), "-tenant", "tenant-9", "-period", "2027-01")
	cmd.Env = append(os.Environ(), envMain+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("billing-producer: %v\n%s", err, out)
	}
	part := envelope.Partition([]byte("tenant-9"), partitions)
	if want := fmt.Sprintf("partition=%d offset=0\n", part); string(out) != want {
		t.Fatalf("billing-producer printed %q, want %q", out, want)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("billing"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) == 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("no record in topic billing")
		}
		recs = append(recs, fs.Records()...)
	}
	got, err := envelope.Decode(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].Partition != part || string(got.Key) != "tenant-9" || got.Type != "run-billing" || string(got.Payload) != "2027-01" {
		t.Fatalf("record on partition %d: %+v", recs[0].Partition, got)
	}
}
