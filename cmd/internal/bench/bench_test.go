package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// tinyRecords is the unit tests' scale: behaviour, not speed.
const tinyRecords = 5000

// TestWorkloadsCountEveryRecord runs the Kafka workloads and baselines at a
// tiny scale and checks that each processed exactly the pre-loaded records.
func TestWorkloadsCountEveryRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, cleanup, err := Setup(ctx, SetupConfig{Records: tinyRecords, Keys: 500})
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	for _, w := range []struct {
		id  string
		run Workload
	}{{"W1", W1}, {"B0", B0}, {"B1", B1}, {"W4", W4}, {"B4", B4}} {
		r, err := w.run(ctx, env)
		if err != nil {
			t.Fatalf("%s: %v", w.id, err)
		}
		if r.ID != w.id || r.Records != tinyRecords || r.Skipped != "" || r.Throughput() <= 0 {
			t.Errorf("%s: got %+v, want %d records", w.id, r, tinyRecords)
		}
	}
}

func TestSelect(t *testing.T) {
	got, err := Select(All(1), []string{"w1", "B1"})
	if err != nil || len(got) != 2 || got[0].ID != "B1" || got[1].ID != "W1" {
		t.Fatalf("Select = %v, %v", got, err)
	}
	if _, err := Select(All(1), []string{"X9"}); err == nil {
		t.Fatal("Select(X9) succeeded")
	}
}

func TestReport(t *testing.T) {
	res := []Result{
		{ID: "W1", Name: "w", Records: 900, Elapsed: time.Second},
		{ID: "B1", Name: "b", Records: 1000, Elapsed: time.Second},
		{ID: "W2-Postgres", Skipped: "no DSN"},
		{ID: "W4", Records: 500, Elapsed: time.Second},
		{ID: "B4", Records: 1000, Elapsed: time.Second},
	}
	var buf bytes.Buffer
	if err := WriteReport(&buf, res); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if want := "bench: router_vs_raw=0.90 fenced_vs_unfenced_pg=n/a fenced_vs_unfenced_sqlite=n/a produce_vs_raw=0.50 router_vs_sarama=n/a"; lines[len(lines)-1] != want {
		t.Fatalf("final line %q, want %q", lines[len(lines)-1], want)
	}
	for _, re := range []string{`target router_vs_raw=0.90 .*: met`, `target produce_vs_raw=0.50 .*: MISSED`, `W2-Postgres .*skipped: no DSN`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("report lacks %s:\n%s", re, out)
		}
	}
}

// benchEnv sets up a quick-scale environment for one Go benchmark.
func benchEnv(b *testing.B) (*Env, context.Context) {
	b.Helper()
	ctx := b.Context()
	env, cleanup, err := Setup(ctx, SetupConfig{Quick: true, PostgresDSN: os.Getenv("WORKROUTER_TEST_POSTGRES")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cleanup)
	return env, ctx
}

// runBench runs the workload id of All(1) once per iteration at quick
// scale and reports its mean throughput as records/s.
func runBench(b *testing.B, id string) {
	entries, err := Select(All(1), []string{id})
	if err != nil {
		b.Fatal(err)
	}
	env, ctx := benchEnv(b)
	var recs int
	var el time.Duration
	b.ResetTimer()
	for b.Loop() {
		r, err := entries[0].Run(ctx, env)
		if err != nil {
			b.Fatal(err)
		}
		if r.Skipped != "" {
			b.Skip(r.Skipped)
		}
		recs += r.Records
		el += r.Elapsed
	}
	switch {
	case id == "W6" && recs > 0:
		b.ReportMetric(el.Seconds()/float64(recs), "s/takeover")
	case el > 0:
		b.ReportMetric(float64(recs)/el.Seconds(), "records/s")
	}
}

func TestMedianOf(t *testing.T) {
	var calls int
	rates := []int{300, 100, 500, 200, 400} // records per second
	w := MedianOf(5, func(context.Context, *Env) (Result, error) {
		r := Result{ID: "X", Records: rates[calls], Elapsed: time.Second, Extra: "e"}
		calls++
		return r, nil
	})
	r, err := w(t.Context(), &Env{})
	if err != nil || calls != 5 || r.Records != 300 || r.Extra != "e median of 5" {
		t.Fatalf("MedianOf(5): %+v, %v after %d calls; want the 300 records/s run", r, err, calls)
	}
	calls = 0
	boom := errors.New("boom")
	w = MedianOf(5, func(context.Context, *Env) (Result, error) {
		calls++
		if calls == 2 {
			return Result{ID: "X"}, boom
		}
		return Result{ID: "X", Records: 1, Elapsed: time.Second}, nil
	})
	if _, err := w(t.Context(), &Env{}); !errors.Is(err, boom) || calls != 2 {
		t.Fatalf("MedianOf with a failing run: %v after %d calls; want boom after 2", err, calls)
	}
}

func BenchmarkW1(b *testing.B)         { runBench(b, "W1") }
func BenchmarkB0(b *testing.B)         { runBench(b, "B0") }
func BenchmarkB1(b *testing.B)         { runBench(b, "B1") }
func BenchmarkW3(b *testing.B)         { runBench(b, "W3") }
func BenchmarkW4(b *testing.B)         { runBench(b, "W4") }
func BenchmarkB4(b *testing.B)         { runBench(b, "B4") }
func BenchmarkB2(b *testing.B)         { runBench(b, "B2") }
func BenchmarkW2SQLite(b *testing.B)   { runBench(b, "W2-sqlite") }
func BenchmarkB3SQLite(b *testing.B)   { runBench(b, "B3-sqlite") }
func BenchmarkW2Postgres(b *testing.B) { runBench(b, "W2-pg") }
func BenchmarkB3Postgres(b *testing.B) { runBench(b, "B3-pg") }
func BenchmarkW5(b *testing.B)         { runBench(b, "W5") }
func BenchmarkW6(b *testing.B)         { runBench(b, "W6") }
