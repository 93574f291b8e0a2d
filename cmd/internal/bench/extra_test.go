package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/envelope"
)

// extraEnv starts an embedded broker with a 12-partition topic pre-loaded
// with records 100-byte commands with IDs (CommandID), independent of the package's Setup.
func extraEnv(t *testing.T, records int) (*Env, *broker.Broker) {
	t.Helper()
	const topic = "extra-commands"
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{topic: 12}, MinSessionTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	env := &Env{drops: &dropLog{}, Brokers: []string{b.Addr()}, Topic: topic, Partitions: 12, Records: records, Keys: 500, Size: 100,
		PostgresDSN: os.Getenv("WORKROUTER_TEST_POSTGRES"), TempDir: t.TempDir()}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, records)
	for i := range records {
		key := []byte("key-" + strconv.Itoa(i%env.Keys))
		payload := []byte(strings.Repeat("x", env.Size-8) + strconv.Itoa(10_000_000 + i)[:8])
		r, err := envelope.Encode(topic, envelope.Partition(key, env.Partitions), envelope.Command{Key: key, Type: CommandType, Payload: payload, ID: CommandID(env, i)})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return env, b
}

func runWorkload(t *testing.T, w Workload, env *Env) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := w(ctx, env)
	if err != nil {
		t.Fatalf("%s: %v", r.ID, err)
	}
	t.Logf("%s %q: records=%d elapsed=%s throughput=%.0f/s cpu/rec=%s extra=%q skipped=%q",
		r.ID, r.Name, r.Records, r.Elapsed, r.Throughput(), r.CPUPerRecord(), r.Extra, r.Skipped)
	return r
}

func TestExtraProcessAll(t *testing.T) {
	const n = 3000
	env, _ := extraEnv(t, n)
	for _, tc := range []struct {
		name      string
		w         Workload
		mayBeSkip bool
	}{
		{"B2", B2, true},
		{"W2SQLite", W2SQLite, false},
		{"W2nSQLite", w2SQLite(w2Variants[1]), false},
		{"W2SQLiteB1", w2SQLite(w2Variants[2]), false},
		{"W2nSQLiteB1", w2SQLite(w2Variants[3]), false},
		{"B3SQLite", B3SQLite, false},
		{"W2Postgres", W2Postgres, true},
		{"W2nPostgres", w2Postgres(w2Variants[1]), true},
		{"W2PostgresB1", w2Postgres(w2Variants[2]), true},
		{"W2nPostgresB1", w2Postgres(w2Variants[3]), true},
		{"W2nPostgresB16", w2Postgres(w2Variants[4]), true},
		{"W2uPostgres", W2uPostgres, true},
		{"B3PostgresB1", b3Postgres("B3-pg-b1", 1, PostgresBatch1Records), true},
		{"B3PostgresB16", b3Postgres("B3-pg-b16", 16, PostgresBatch16Records), true},
		{"B3Postgres", B3Postgres, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasSuffix(tc.name, "Postgres") && env.PostgresDSN == "" {
				env := *env
				env.PostgresDSN = ""
				if r := runWorkload(t, tc.w, &env); r.Skipped == "" {
					t.Fatal("not skipped without a DSN")
				}
				t.Skip("WORKROUTER_TEST_POSTGRES not set")
			}
			r := runWorkload(t, tc.w, env)
			if tc.name == "B2" {
				// Sarama is linked only with -tags sarama (CI runs both).
				if !saramaLinked {
					if !strings.Contains(r.Skipped, "-tags "+SaramaBuildTag) {
						t.Fatalf("B2 without Sarama linked: skipped %q, want the build tag named", r.Skipped)
					}
					t.Skipf("skipped: %s", r.Skipped)
				}
				if r.Skipped != "" {
					t.Fatalf("B2 with Sarama linked was skipped: %s", r.Skipped)
				}
			}
			if r.Skipped != "" {
				if !tc.mayBeSkip {
					t.Fatalf("skipped: %s", r.Skipped)
				}
				t.Skipf("skipped: %s", r.Skipped)
			}
			if r.Records != n {
				t.Fatalf("records processed = %d, want %d", r.Records, n)
			}
			// A W2 row deduplicates (recording a row of IDs per
			// batch) exactly when its ID says so; W2n never does.
			// W2u-pg leaves no fence row: it runs without the fence.
			if r.ID == "W2u-pg" {
				if r.Extra != "fence_rows=0" {
					t.Fatalf("%s: extra %q, want fence_rows=0", r.ID, r.Extra)
				}
				return
			}
			if strings.HasPrefix(r.ID, "W2") {
				rowsN, err := strconv.Atoi(strings.TrimPrefix(r.Extra, "id_rows="))
				if on := !strings.HasPrefix(r.ID, "W2n"); err != nil || on != (rowsN > 0) {
					t.Fatalf("%s: extra %q: want id_rows > 0 exactly with deduplication on", r.ID, r.Extra)
				}
				if strings.HasSuffix(r.ID, "-b1") && !strings.HasPrefix(r.ID, "W2n") && rowsN != n {
					t.Fatalf("%s: %d ID rows for %d records at batch 1", r.ID, rowsN, n)
				}
			}
		})
	}
}

func TestExtraW5Latency(t *testing.T) {
	env, _ := extraEnv(t, 1000)
	r := runWorkload(t, W5LatencyAt(1000), env) // 1000 commands at 1000/s: ~1s
	if r.Records != 1000 {
		t.Fatalf("records = %d, want 1000", r.Records)
	}
	for _, p := range []string{"p50=", "p99=", "p99.9="} {
		if !strings.Contains(r.Extra, p) {
			t.Fatalf("extra %q lacks %s", r.Extra, p)
		}
	}
	if r.Elapsed < 900*time.Millisecond {
		t.Fatalf("open loop at 1000/s for 1000 commands took %s", r.Elapsed)
	}
}

// TestExtraW5AtHalfItsMaximum runs W5 and W5-sqlite as the bench does:
// the maximum rate first (the median of W5MaxRuns runs), then half of it.
func TestExtraW5AtHalfItsMaximum(t *testing.T) {
	env, _ := extraEnv(t, 2000)
	for _, w := range []Workload{W5, W5SQLite} {
		r := runWorkload(t, w, env)
		if r.Records != 2000 {
			t.Fatalf("%s: records = %d, want 2000", r.ID, r.Records)
		}
		if !strings.Contains(r.Extra, fmt.Sprintf("(median of %d: ", W5MaxRuns)) || !strings.Contains(r.Extra, "p99=") {
			t.Fatalf("%s: extra %q lacks the maximum's spread or p99", r.ID, r.Extra)
		}
	}
}

func TestExtraW6Takeover(t *testing.T) {
	env, b := extraEnv(t, 1)
	r := runWorkload(t, W6TakeoverOn(nil), env)
	if r.Skipped == "" {
		t.Fatal("W6 without a cluster not skipped")
	}
	r = runWorkload(t, W6TakeoverOn(b.Cluster()), env)
	if r.Skipped != "" || r.Records != 1 || r.Elapsed <= 0 || !strings.Contains(r.Extra, "session_timeout=2s") {
		t.Fatalf("W6 result %+v", r)
	}
}
