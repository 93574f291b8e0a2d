package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"regexp"
	"slices"
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
	defer func() {
		if err := cleanup(); err != nil {
			t.Error(err)
		}
	}()
	for _, w := range []struct {
		id  string
		run Workload
	}{{"W1", W1}, {"W1n", W1n}, {"B0", B0}, {"B1", B1}, {"W4", W4}, {"B4", B4}} {
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

// rows builds rows of repeats runs from records per second (0: a failed
// run), each run lasting a second.
func rows(repeats int, rates map[string][]int) []Row {
	var out []Row
	for _, id := range []string{"B1", "W1", "B3-sqlite", "W2-sqlite", "W2n-sqlite", "W2-sqlite-b1", "W2n-sqlite-b1", "B4", "W4"} {
		rs, ok := rates[id]
		if !ok {
			continue
		}
		row := Row{ID: id, Repeats: repeats}
		for _, n := range rs {
			r := Result{ID: id, Name: "name of " + id, Records: n, Elapsed: time.Second}
			if n == 0 {
				r.Skipped = failedPrefix + id + ": boom"
			}
			row.Runs = append(row.Runs, r)
		}
		out = append(out, row)
	}
	return out
}

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Spread
	}{
		{nil, Spread{}},
		{[]float64{3}, Spread{3, 3, 3, 1}},
		{[]float64{300, 100, 500, 200, 400}, Spread{300, 100, 500, 5}},
		{[]float64{4, 1, 3, 2}, Spread{2.5, 1, 4, 4}},
	} {
		if got := SpreadOf(tc.in); got != tc.want {
			t.Errorf("SpreadOf(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// TestRatiosFromRepeats checks the median ratio (median over median, not
// a median of pairs) and the per-pair ratios, which skip a round in which
// either side failed.
func TestRatiosFromRepeats(t *testing.T) {
	rs := rows(5, map[string][]int{
		"B1": {1000, 1000, 900, 1100, 1000},
		"W1": {900, 950, 0, 1000, 800}, // run 3 failed
		"B4": {1000, 2000, 1000},       // runs 4 and 5 not made
		"W4": {500, 1000, 1000, 1000, 1000},
	})
	tp := rs[1].Throughput()
	if tp != (Spread{925, 800, 1000, 4}) {
		t.Fatalf("W1 throughput %+v", tp)
	}
	ratios := Ratios(rs)
	byName := map[string]Ratio{}
	for _, r := range ratios {
		byName[r.Name] = r
	}
	raw := byName["router_vs_raw"]
	if !raw.OK || raw.Value != 925.0/1000 || !slices.Equal(raw.Pairs, []float64{0.9, 0.95, 1000.0 / 1100, 0.8}) {
		t.Fatalf("router_vs_raw = %+v", raw)
	}
	if ps := raw.PairSpread(); ps.Min != 0.8 || ps.Max != 0.95 || ps.N != 4 {
		t.Fatalf("router_vs_raw pair spread %+v", ps)
	}
	prod := byName["produce_vs_raw"]
	if !prod.OK || prod.Value != 1 || !slices.Equal(prod.Pairs, []float64{0.5, 0.5, 1}) {
		t.Fatalf("produce_vs_raw = %+v", prod)
	}
	if r := byName["fenced_vs_unfenced_sqlite"]; r.OK || r.Pairs != nil {
		t.Fatalf("fenced_vs_unfenced_sqlite without rows = %+v", r)
	}
}

// TestCPURatios checks the CPU ratios on made-up CPU times: the
// baseline's median CPU per record over the workload's (higher is better,
// as for throughput), per-pair ratios over the rounds in which both
// measured something and have a CPU time, and n/a without CPU times.
func TestCPURatios(t *testing.T) {
	cpu := func(id string, records int, us ...float64) Row {
		row := Row{ID: id, Repeats: len(us)}
		for _, u := range us {
			r := Result{ID: id, Records: records, Elapsed: time.Second, CPU: time.Duration(u * float64(records) * float64(time.Microsecond))}
			if u < 0 {
				r.Skipped, r.CPU = failedPrefix+id+": boom", 0
			}
			row.Runs = append(row.Runs, r)
		}
		return row
	}
	// CPU µs per record, run by run; -1 is a failed run, 0 a run
	// without a CPU time.
	rs := []Row{
		cpu("B1", 1000, 0.60, 0.62, 0.58, 0.70, 0.61),
		cpu("W1", 2000, 0.80, 0.75, -1, 0, 0.90), // 0.75, 0.80, 0.90
		cpu("B2", 1000, 1.60, 2.00, 1.80, 1.20, 1.50),
	}
	byName := map[string]Ratio{}
	for _, r := range Ratios(rs) {
		byName[r.Name] = r
	}
	if s := rs[1].CPUPerRecord(); s.N != 3 || math.Abs(s.Median-0.80) > 1e-9 || math.Abs(s.Min-0.75) > 1e-9 || math.Abs(s.Max-0.90) > 1e-9 {
		t.Fatalf("W1 CPU per record %+v, want 0.80 [0.75–0.90] over 3 runs", s)
	}
	near := func(got, want []float64) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-9 {
				return false
			}
		}
		return true
	}
	raw := byName["router_vs_raw_cpu"]
	if !raw.CPU || !raw.OK || raw.Num != "W1" || raw.Den != "B1" || math.Abs(raw.Value-0.61/0.80) > 1e-9 ||
		!near(raw.Pairs, []float64{0.60 / 0.80, 0.62 / 0.75, 0.61 / 0.90}) {
		t.Fatalf("router_vs_raw_cpu = %+v, want %.4f, pairs from rounds 1, 2, 5", raw, 0.61/0.80)
	}
	sar := byName["router_vs_sarama_cpu"]
	if !sar.OK || math.Abs(sar.Value-1.60/0.80) > 1e-9 || !near(sar.Pairs, []float64{1.60 / 0.80, 2.00 / 0.75, 1.50 / 0.90}) {
		t.Fatalf("router_vs_sarama_cpu = %+v, want %.2f", sar, 1.60/0.80)
	}
	if got, want := TargetLine(raw, false), "target router_vs_raw_cpu=0.76 [0.68–0.83 over 3 pairs] (CPU/record of B1 over W1, no target): reported (no target)"; got != want {
		t.Errorf("TargetLine = %q, want %q", got, want)
	}
	// The throughput ratio of the same rows is unchanged by the CPU times.
	if r := byName["router_vs_raw"]; !r.OK || r.CPU || r.Value != 2 {
		t.Errorf("router_vs_raw = %+v, want 2 (2000 records/s over 1000)", r)
	}
	// No CPU times (getrusage failed): n/a, not a division by zero.
	none := []Row{cpu("B1", 1000, 0, 0), cpu("W1", 1000, 0.8, 0.8)}
	for _, r := range Ratios(none) {
		if r.CPU && r.OK {
			t.Errorf("%s without the baseline's CPU = %+v, want n/a", r.Name, r)
		}
	}
}

func TestVerdicts(t *testing.T) {
	r := func(v float64, pairs ...float64) Ratio {
		return Ratio{Name: "produce_vs_raw", Num: "W4", Den: "B4", Target: 0.95, Value: v, Pairs: pairs, OK: true}
	}
	for _, tc := range []struct {
		r     Ratio
		quick bool
		want  string
	}{
		{r(0.97, 0.95, 0.99, 0.97), false, "met (every pair)"},
		{r(0.97, 0.88, 0.99, 0.97), false, "met (median; worst pair 0.88)"},
		{r(0.90, 0.88, 0.96, 0.90), false, "MISSED (median; best pair 0.96)"},
		{r(0.90, 0.88, 0.90), false, "MISSED (every pair)"},
		{r(0.97), false, "met (median; no complete pair)"},
		{r(0.97, 0.95, 0.99), true, "indicative (--quick decides no target)"},
		{r(0.50, 0.50), true, "indicative (--quick decides no target)"},
		{Ratio{Target: 0.95}, true, "n/a (not measured)"},
		{Ratio{Target: 0.95}, false, "n/a (not measured)"},
		{Ratio{Value: 0.5, Pairs: []float64{0.5}, OK: true}, false, "reported (no target)"},
		{Ratio{Value: 0.5, Pairs: []float64{0.5}, OK: true}, true, "reported (no target)"},
		{Ratio{}, false, "n/a (not measured)"},
	} {
		if got := tc.r.Verdict(tc.quick); got != tc.want {
			t.Errorf("Verdict(%+v, quick %v) = %q, want %q", tc.r, tc.quick, got, tc.want)
		}
	}
	if got, want := TargetLine(r(0.97, 0.95, 0.99, 0.97, 0.96, 0.98), false),
		"target produce_vs_raw=0.97 [0.95–0.99 over 5 pairs] (W4/B4, want >= 0.95): met (every pair)"; got != want {
		t.Errorf("TargetLine = %q, want %q", got, want)
	}
}

// TestTargets pins the targets (docs/performance.md).
func TestTargets(t *testing.T) {
	want := map[string]float64{"router_vs_raw": 0.95, "fenced_vs_unfenced_pg": 0.90, "fenced_vs_unfenced_sqlite": 0.90,
		"dedupe_on_vs_off_pg": 0.90, "dedupe_on_vs_off_sqlite": 0.90, "dedupe_on_vs_off_pg_b1": 0, "dedupe_on_vs_off_sqlite_b1": 0,
		"fence_vs_unfenced_pg_b1": 0.90, "fence_vs_unfenced_pg_b16": 0.90, "fence_vs_unfenced_pg_b256": 0.95,
		"worker_vs_raw_pg": 0, "fence_in_worker_pg": 0,
		"produce_vs_raw": 0.95, "produce_file_vs_kcat": 0.5, "router_vs_sarama": 2.0, "fenced_vs_unfenced_redis": 0.90, "kafka_sink_vs_gts": 0.90, "kafka_sink_vs_gts_b4096": 0, "keys_vs_serial": 8, "keys_vs_serial_pg": 4,
		"router_vs_raw_cpu": 0, "router_vs_sarama_cpu": 0, "kafka_sink_vs_gts_cpu": 0}
	rs := Ratios(nil)
	if len(rs) != len(want) {
		t.Errorf("%d ratios, want %d", len(rs), len(want))
	}
	for _, r := range rs {
		if tg, ok := want[r.Name]; !ok || r.Target != tg {
			t.Errorf("%s target %.2f, want %.2f (known %v)", r.Name, r.Target, tg, ok)
		}
	}
}

func TestReport(t *testing.T) {
	rs := rows(3, map[string][]int{
		"W1":            {950, 1000, 900},
		"B1":            {1000, 1000, 1000},
		"B3-sqlite":     {1000, 1000, 1000},
		"W2-sqlite":     {900, 950, 1000},
		"W2n-sqlite":    {1000, 1050, 1100},
		"W2-sqlite-b1":  {50, 60, 40},
		"W2n-sqlite-b1": {100, 100, 100},
		"W4":            {500, 0, 500},
		"B4":            {1000, 1000, 1000},
	})
	rs = append(rs, Row{ID: "W2-Postgres", Repeats: 3, Runs: []Result{{ID: "W2-Postgres", Skipped: "no DSN"}}})
	for _, quick := range []bool{false, true} {
		var buf bytes.Buffer
		if err := WriteReport(&buf, rs, quick); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if want := "bench: router_vs_raw=0.95 fenced_vs_unfenced_pg=n/a fenced_vs_unfenced_sqlite=0.95 dedupe_on_vs_off_pg=n/a dedupe_on_vs_off_sqlite=0.90 dedupe_on_vs_off_pg_b1=n/a dedupe_on_vs_off_sqlite_b1=0.50 fence_vs_unfenced_pg_b1=n/a fence_vs_unfenced_pg_b16=n/a fence_vs_unfenced_pg_b256=n/a worker_vs_raw_pg=n/a fence_in_worker_pg=n/a produce_vs_raw=0.50 produce_file_vs_kcat=n/a router_vs_sarama=n/a fenced_vs_unfenced_redis=n/a kafka_sink_vs_gts=n/a kafka_sink_vs_gts_b4096=n/a keys_vs_serial=n/a keys_vs_serial_pg=n/a router_vs_raw_cpu=n/a router_vs_sarama_cpu=n/a kafka_sink_vs_gts_cpu=n/a send_p50=n/a send_p99=n/a"; lines[len(lines)-1] != want {
			t.Fatalf("final line %q, want %q", lines[len(lines)-1], want)
		}
		res := []string{
			`records/s +min–max`,
			`W1 +name of W1 +950 +3/3 +1\.00 +950 +900–1000 `,
			`W4 +name of W4 +500 +2/3 .*run 2 of 3 failed: W4: boom`,
			`W2-Postgres .*0/3 .*skipped: no DSN`,
			// No target: reported the same, quick or not.
			`target dedupe_on_vs_off_sqlite_b1=0.50 \[0.40–0.60 over 3 pairs\] \(W2-sqlite-b1/W2n-sqlite-b1, no target\): reported \(no target\)`,
		}
		if quick {
			res = append(res,
				`target router_vs_raw=0.95 \[0.90–1.00 over 3 pairs\] \(W1/B1, want >= 0.95\): indicative \(--quick decides no target\)`,
				`target produce_vs_raw=0.50 \[0.50–0.50 over 2 pairs\] .*: indicative \(--quick decides no target\)`)
		} else {
			res = append(res,
				`target router_vs_raw=0.95 \[0.90–1.00 over 3 pairs\] \(W1/B1, want >= 0.95\): met \(median; worst pair 0.90\)`,
				`target produce_vs_raw=0.50 \[0.50–0.50 over 2 pairs\] .*: MISSED \(every pair\)`,
				`target dedupe_on_vs_off_sqlite=0.90 \[0.90–0.91 over 3 pairs\] \(W2-sqlite/W2n-sqlite, want >= 0.90\): met \(every pair\)`,
				`target fenced_vs_unfenced_pg=n/a \(W2-pg/B3-pg, want >= 0.90\): n/a \(not measured\)`)
		}
		for _, re := range res {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("quick %v: report lacks %s:\n%s", quick, re, out)
			}
		}
		if quick == strings.Contains(out, ": met") || quick == strings.Contains(out, "MISSED") {
			t.Errorf("quick %v: verdicts\n%s", quick, out)
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
	b.Cleanup(func() {
		if err := cleanup(); err != nil {
			b.Error(err)
		}
	})
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

func BenchmarkW1(b *testing.B)          { runBench(b, "W1") }
func BenchmarkW1n(b *testing.B)         { runBench(b, "W1n") }
func BenchmarkB0(b *testing.B)          { runBench(b, "B0") }
func BenchmarkB1(b *testing.B)          { runBench(b, "B1") }
func BenchmarkW3(b *testing.B)          { runBench(b, "W3") }
func BenchmarkW4(b *testing.B)          { runBench(b, "W4") }
func BenchmarkB4(b *testing.B)          { runBench(b, "B4") }
func BenchmarkB2(b *testing.B)          { runBench(b, "B2") }
func BenchmarkW2SQLite(b *testing.B)    { runBench(b, "W2-sqlite") }
func BenchmarkW2nSQLite(b *testing.B)   { runBench(b, "W2n-sqlite") }
func BenchmarkB3SQLite(b *testing.B)    { runBench(b, "B3-sqlite") }
func BenchmarkW2Postgres(b *testing.B)  { runBench(b, "W2-pg") }
func BenchmarkW2nPostgres(b *testing.B) { runBench(b, "W2n-pg") }
func BenchmarkW2uPostgres(b *testing.B) { runBench(b, "W2u-pg") }
func BenchmarkB3Postgres(b *testing.B)  { runBench(b, "B3-pg") }
func BenchmarkW2Kafka(b *testing.B)     { runBench(b, "W2-kafka") }
func BenchmarkB3Kafka(b *testing.B)     { runBench(b, "B3-kafka") }
func BenchmarkW5(b *testing.B)          { runBench(b, "W5") }
func BenchmarkW6(b *testing.B)          { runBench(b, "W6") }

// TestLatencyTargets: the send targets take the median over W9's measured
// runs of each run's percentile, and say whether every run met them.
func TestLatencyTargets(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	w8 := Row{ID: "W9", Repeats: 5}
	for _, p := range [][2]float64{{0.2, 0.9}, {0.3, 6}, {0.25, 1.2}, {5, 20}, {0.22, 1.1}} {
		w8.Runs = append(w8.Runs, Result{ID: "W9", Records: 2000, Elapsed: time.Second, P50: ms(p[0]), P99: ms(p[1])})
	}
	w8.Runs = append(w8.Runs, Result{ID: "W9", Skipped: "failed: boom", P50: ms(9)})
	lats := Latencies([]Row{w8})
	if len(lats) != 2 || lats[0].Name != "send_p50" || lats[1].Name != "send_p99" {
		t.Fatalf("latency targets %+v", lats)
	}
	if got, want := LatencyLine(lats[0], false), "target send_p50=0.250ms [0.200–5.000ms over 5 runs] (W9, want < 1ms): met (median; worst run 5.000ms)"; got != want {
		t.Errorf("p50 line %q, want %q", got, want)
	}
	if got, want := LatencyLine(lats[1], false), "target send_p99=1.200ms [0.900–20.000ms over 5 runs] (W9, want < 5ms): met (median; worst run 20.000ms)"; got != want {
		t.Errorf("p99 line %q, want %q", got, want)
	}
	slow := Latency{Name: "x", Row: "W9", Target: time.Millisecond, Runs: []time.Duration{ms(2), ms(3), ms(1.5)}}
	if v := slow.Verdict(false); v != "MISSED (every run)" || slow.Met() {
		t.Errorf("verdict %q", v)
	}
	if v := slow.Verdict(true); v != QuickVerdict {
		t.Errorf("quick verdict %q", v)
	}
	if got := LatencyLine(Latencies(nil)[0], false); got != "target send_p50=n/a (W9, want < 1ms): n/a (not measured)" {
		t.Errorf("unmeasured line %q", got)
	}
}
