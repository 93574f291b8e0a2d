package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// Ratio is one comparison of workrouter with a baseline on the final line,
// computed from the repeated runs of both: throughput(workrouter) /
// throughput(baseline), or with CPU the baseline's CPU per record over
// workrouter's (see Row.CPUPerRecord), so that higher is better in both.
type Ratio struct {
	Name     string  // e.g. "router_vs_raw"
	Num, Den string  // result IDs: workrouter's and the baseline's
	Target   float64 // the ratio it must reach; 0: reported, no target
	// CPU makes the ratio one of CPU per record instead of throughput.
	CPU bool
	// Value is the median throughput of Num's runs over the median of
	// Den's (with CPU: the median CPU per record of Den's runs over the
	// median of Num's); valid only if OK.
	Value float64
	// Pairs are the per-pair ratios: run i of Num against run i of Den,
	// as Value, for every round i in which both measured something (the
	// two ran next to each other, see All).
	Pairs []float64
	OK    bool // false: an input was skipped, failed or absent
}

// String is the ratio formatted %.2f, or "n/a".
func (r Ratio) String() string {
	if !r.OK {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", r.Value)
}

// Met reports whether the ratio has a target, was measured and its
// median reached the target.
func (r Ratio) Met() bool { return r.HasTarget() && r.OK && r.Value >= r.Target }

// HasTarget reports whether the ratio has a target (else it is only
// reported).
func (r Ratio) HasTarget() bool { return r.Target > 0 }

// PairSpread is the spread of the per-pair ratios.
func (r Ratio) PairSpread() Spread { return SpreadOf(r.Pairs) }

// EveryPairMet reports whether there was at least one pair and every
// per-pair ratio reached the target.
func (r Ratio) EveryPairMet() bool {
	return r.HasTarget() && r.OK && len(r.Pairs) > 0 && r.PairSpread().Min >= r.Target
}

// NoTargetVerdict is Verdict's word for a measured ratio without a
// target.
const NoTargetVerdict = "reported (no target)"

// QuickVerdict is Verdict's word for a measured ratio of a --quick run.
const QuickVerdict = "indicative (--quick decides no target)"

// Verdict is the target line's verdict: "n/a (not measured)"; for a
// ratio without a target NoTargetVerdict; with quick
// (a --quick run: fewer records, so the ratios only indicate) always
// QuickVerdict; otherwise "met" or "MISSED" by the median ratio, followed
// by whether every pair agrees, e.g. "met (every pair)", "met (median;
// worst pair 0.88)", "MISSED (median; best pair 0.93)".
func (r Ratio) Verdict(quick bool) string {
	switch {
	case !r.OK:
		return "n/a (not measured)"
	case !r.HasTarget():
		return NoTargetVerdict
	case quick:
		return QuickVerdict
	}
	word := "MISSED"
	if r.Met() {
		word = "met"
	}
	ps := r.PairSpread()
	switch {
	case ps.N == 0:
		return word + " (median; no complete pair)"
	case r.Met() && ps.Min >= r.Target, !r.Met() && ps.Max < r.Target:
		return word + " (every pair)"
	case r.Met():
		return fmt.Sprintf("%s (median; worst pair %.2f)", word, ps.Min)
	default:
		return fmt.Sprintf("%s (median; best pair %.2f)", word, ps.Max)
	}
}

// ratioDefs lists the final line's ratios in order, with their targets
// (docs/performance.md). The fenced workloads W2-* deduplicate command
// IDs, so fenced_vs_unfenced_* is fenced with deduplication on against
// unfenced; dedupe_on_vs_off_* is the same workload with deduplication on
// against off (W2n-*), at batch 256 and, without a target, at batch 1.
// fence_vs_unfenced_pg_b* is the fence on PostgreSQL (deduplication off:
// the same writes as the baseline), the worker's against the raw
// consumer's, at MaxBatch 1, 16 and 256. Without targets,
// worker_vs_raw_pg and fence_in_worker_pg split the batch-256 one in two
// through W2u-pg, the same worker without a fence: its plumbing against
// the raw consumer, and the fence inside the same worker.
var ratioDefs = []Ratio{
	{Name: "router_vs_raw", Num: "W1", Den: "B1", Target: 0.95},
	{Name: "fenced_vs_unfenced_pg", Num: "W2-pg", Den: "B3-pg", Target: 0.90},
	{Name: "fenced_vs_unfenced_sqlite", Num: "W2-sqlite", Den: "B3-sqlite", Target: 0.90},
	{Name: "dedupe_on_vs_off_pg", Num: "W2-pg", Den: "W2n-pg", Target: 0.90},
	{Name: "dedupe_on_vs_off_sqlite", Num: "W2-sqlite", Den: "W2n-sqlite", Target: 0.90},
	{Name: "dedupe_on_vs_off_pg_b1", Num: "W2-pg-b1", Den: "W2n-pg-b1"},
	{Name: "dedupe_on_vs_off_sqlite_b1", Num: "W2-sqlite-b1", Den: "W2n-sqlite-b1"},
	{Name: "fence_vs_unfenced_pg_b1", Num: "W2n-pg-b1", Den: "B3-pg-b1", Target: 0.90},
	{Name: "fence_vs_unfenced_pg_b16", Num: "W2n-pg-b16", Den: "B3-pg-b16", Target: 0.90},
	{Name: "fence_vs_unfenced_pg_b256", Num: "W2n-pg", Den: "B3-pg", Target: 0.95},
	{Name: "worker_vs_raw_pg", Num: "W2u-pg", Den: "B3-pg"},
	{Name: "fence_in_worker_pg", Num: "W2n-pg", Den: "W2u-pg"},
	{Name: "produce_vs_raw", Num: "W4", Den: "B4", Target: 0.95},
	{Name: "produce_file_vs_kcat", Num: "W8", Den: "B5", Target: 0.5},
	{Name: "router_vs_sarama", Num: "W1", Den: "B2", Target: 2.0},
	{Name: "fenced_vs_unfenced_redis", Num: "W2-redis", Den: "B3-redis", Target: 0.90},
	{Name: "kafka_sink_vs_gts", Num: "W2-kafka", Den: "B3-kafka", Target: 0.90},
	{Name: "kafka_sink_vs_gts_b4096", Num: "W2-kafka-b4096", Den: "B3-kafka"},
	{Name: "keys_vs_serial", Num: "W7", Den: "W3", Target: 8},
	{Name: "keys_vs_serial_pg", Num: "W7-pg", Den: "W3", Target: 4},
}

// cpuRatioDefs lists the final line's CPU ratios, after ratioDefs' (see
// Ratio.CPU): the consuming workload against its baselines, and the Kafka
// sink against GroupTransactSession, whose client-side work is all in
// this process. They have no target: the CPU of a run is the whole
// process's (see Result.CPU), the embedded broker's included.
var cpuRatioDefs = []Ratio{
	{Name: "router_vs_raw_cpu", Num: "W1", Den: "B1"},
	{Name: "router_vs_sarama_cpu", Num: "W1", Den: "B2"},
	{Name: "kafka_sink_vs_gts_cpu", Num: "W2-kafka", Den: "B3-kafka"},
}

// normID folds a result ID for matching: lower case, letters and digits
// only, "postgres"/"postgresql" shortened to "pg" ("W2-Postgres" is "w2pg").
func normID(id string) string {
	id = strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return unicode.ToLower(r)
		}
		return -1
	}, id)
	id = strings.ReplaceAll(id, "postgresql", "pg")
	return strings.ReplaceAll(id, "postgres", "pg")
}

// find returns the row with ID id.
func find(rows []Row, id string) (Row, bool) {
	for _, r := range rows {
		if normID(r.ID) == normID(id) {
			return r, true
		}
	}
	return Row{}, false
}

// Ratios computes the final line's ratios from rows: ratioDefs', then
// cpuRatioDefs'.
func Ratios(rows []Row) []Ratio {
	out := make([]Ratio, 0, len(ratioDefs)+len(cpuRatioDefs))
	for _, d := range ratioDefs {
		out = append(out, ratio(d, rows, Row.Throughput, Row.rate))
	}
	for _, d := range cpuRatioDefs {
		d.CPU = true
		// The baseline's CPU per record over the workload's: the
		// arguments swap.
		r := ratio(Ratio{Num: d.Den, Den: d.Num}, rows, Row.CPUPerRecord, Row.cpuPerRecord)
		d.Value, d.Pairs, d.OK = r.Value, r.Pairs, r.OK
		out = append(out, d)
	}
	return out
}

// ratio returns d with Value, Pairs and OK computed from rows: the median
// of Num's values over the median of Den's, and run i of Num over run i
// of Den.
func ratio(d Ratio, rows []Row, spread func(Row) Spread, run func(Row, int) (float64, bool)) Ratio {
	num, ok1 := find(rows, d.Num)
	den, ok2 := find(rows, d.Den)
	sn, sd := spread(num), spread(den)
	if !ok1 || !ok2 || sn.N == 0 || sd.N == 0 || sd.Median <= 0 {
		return d
	}
	d.Value, d.OK = sn.Median/sd.Median, true
	for j := range min(len(num.Runs), len(den.Runs)) {
		a, okA := run(num, j)
		b, okB := run(den, j)
		if okA && okB && b > 0 {
			d.Pairs = append(d.Pairs, a/b)
		}
	}
	return d
}

// FinalLine is the report's last line, each ratio the median one (the
// throughput ratios, then the CPU ones), then each latency target's
// median:
//
//	bench: router_vs_raw=<r> fenced_vs_unfenced_pg=<r> fenced_vs_unfenced_sqlite=<r> dedupe_on_vs_off_pg=<r> dedupe_on_vs_off_sqlite=<r> dedupe_on_vs_off_pg_b1=<r> dedupe_on_vs_off_sqlite_b1=<r> fence_vs_unfenced_pg_b1=<r> fence_vs_unfenced_pg_b16=<r> fence_vs_unfenced_pg_b256=<r> worker_vs_raw_pg=<r> fence_in_worker_pg=<r> produce_vs_raw=<r> produce_file_vs_kcat=<r> router_vs_sarama=<r> fenced_vs_unfenced_redis=<r> kafka_sink_vs_gts=<r> kafka_sink_vs_gts_b4096=<r> keys_vs_serial=<r> keys_vs_serial_pg=<r> router_vs_raw_cpu=<r> router_vs_sarama_cpu=<r> kafka_sink_vs_gts_cpu=<r> send_p50=<ms> send_p99=<ms>
func FinalLine(ratios []Ratio, lats ...Latency) string {
	var b strings.Builder
	b.WriteString("bench:")
	for _, r := range ratios {
		fmt.Fprintf(&b, " %s=%s", r.Name, r)
	}
	for _, l := range lats {
		fmt.Fprintf(&b, " %s=%s", l.Name, l)
	}
	return b.String()
}

// WriteTable writes one row per entry: ID, name, records, runs (measured
// of planned), seconds, records/s (the median over the measured runs),
// its min–max, CPU µs/record, peak RSS MiB and extra (or why it was
// skipped, and which runs failed). Records, seconds, CPU and extra are the
// median run's (see Row.Summary).
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tname\trecords\truns\tseconds\trecords/s\tmin–max\tCPU µs/rec\tpeak RSS MiB\textra")
	for _, row := range rows {
		s, ok := row.Summary()
		tp := row.Throughput()
		runs := fmt.Sprintf("%d/%d", tp.N, row.Repeats)
		if !ok {
			// One run (or none) made: it says why; an entry that
			// reports itself Skipped is not run again. More runs made,
			// all failed: which ones and why.
			why := "not run"
			if len(row.Runs) == 1 {
				why = row.Runs[0].Skipped
				if why == "" {
					why = "measured no throughput"
				} else if !strings.HasPrefix(why, failedPrefix) {
					why = "skipped: " + why
				}
			} else if len(row.Runs) > 1 {
				why = row.Problems()
			}
			fmt.Fprintf(tw, "%s\t%s\t-\t%s\t-\t-\t-\t-\t-\t%s\n", row.ID, s.Name, runs, why)
			continue
		}
		spread := "-"
		if row.Repeats > 1 {
			spread = fmt.Sprintf("%.0f–%.0f", tp.Min, tp.Max)
		}
		extra := s.Extra
		if p := row.Problems(); p != "" {
			extra = strings.TrimSpace(extra + " " + p)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.2f\t%.0f\t%s\t%.2f\t%.0f\t%s\n", row.ID, s.Name, s.Records, runs,
			s.Elapsed.Seconds(), tp.Median, spread, float64(s.CPUPerRecord().Nanoseconds())/1e3,
			float64(s.PeakRSS)/(1<<20), extra)
	}
	return tw.Flush()
}

// TargetLine is the report's line for r, e.g.
//
//	target produce_vs_raw=0.97 [0.95–0.99 over 5 pairs] (W4/B4, want >= 0.95): met (every pair)
//	target dedupe_on_vs_off_sqlite_b1=0.97 [0.95–0.99 over 5 pairs] (W2-sqlite-b1/W2n-sqlite-b1, no target): reported (no target)
//	target router_vs_raw_cpu=0.74 [0.70–0.80 over 5 pairs] (CPU/record of B1 over W1, no target): reported (no target)
//
// with quick as for Verdict.
func TargetLine(r Ratio, quick bool) string {
	spread := ""
	if ps := r.PairSpread(); ps.N > 0 {
		spread = fmt.Sprintf(" [%.2f–%.2f over %d %s]", ps.Min, ps.Max, ps.N, plural(ps.N, "pair", "pairs"))
	}
	want := "no target"
	if r.HasTarget() {
		want = fmt.Sprintf("want >= %.2f", r.Target)
	}
	rows := r.Num + "/" + r.Den
	if r.CPU {
		rows = "CPU/record of " + r.Den + " over " + r.Num
	}
	return fmt.Sprintf("target %s=%s%s (%s, %s): %s", r.Name, r, spread, rows, want, r.Verdict(quick))
}

// WriteReport writes the table, one line per target (see TargetLine) and
// the final line. quick marks a --quick run, whose ratios decide no target.
func WriteReport(w io.Writer, rows []Row, quick bool) error {
	if err := WriteTable(w, rows); err != nil {
		return err
	}
	ratios := Ratios(rows)
	fmt.Fprintln(w)
	for _, r := range ratios {
		fmt.Fprintln(w, TargetLine(r, quick))
	}
	lats := Latencies(rows)
	for _, l := range lats {
		fmt.Fprintln(w, LatencyLine(l, quick))
	}
	_, err := fmt.Fprintln(w, FinalLine(ratios, lats...))
	return err
}

// Latency is a latency target of the report: a percentile of one latency
// row's runs (Result.P50 or P99), whose median over the runs must stay
// below Target.
type Latency struct {
	Name   string // e.g. "send_p50"
	Row    string // the row's ID: "W9"
	P99    bool   // false: Result.P50, true: Result.P99
	Target time.Duration
	// Runs are the measured runs' percentiles, in run order.
	Runs []time.Duration
}

// latencyDefs lists the latency targets (docs/performance.md).
var latencyDefs = []Latency{
	{Name: "send_p50", Row: "W9", Target: time.Millisecond},
	{Name: "send_p99", Row: "W9", P99: true, Target: 5 * time.Millisecond},
}

// Latencies computes the latency targets from rows.
func Latencies(rows []Row) []Latency {
	out := make([]Latency, len(latencyDefs))
	for i, d := range latencyDefs {
		if row, ok := find(rows, d.Row); ok {
			for _, r := range row.Measured() {
				v := r.P50
				if d.P99 {
					v = r.P99
				}
				if v > 0 {
					d.Runs = append(d.Runs, v)
				}
			}
		}
		out[i] = d
	}
	return out
}

// Spread is the spread of the runs' percentiles, in milliseconds.
func (l Latency) Spread() Spread {
	xs := make([]float64, len(l.Runs))
	for i, d := range l.Runs {
		xs[i] = float64(d) / float64(time.Millisecond)
	}
	return SpreadOf(xs)
}

// Met reports whether the median run's percentile is below the target.
func (l Latency) Met() bool {
	s := l.Spread()
	return s.N > 0 && s.Median < float64(l.Target)/float64(time.Millisecond)
}

// String is the median in milliseconds, %.3f, or "n/a".
func (l Latency) String() string {
	if len(l.Runs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.3fms", l.Spread().Median)
}

// Verdict is the target line's verdict, as Ratio.Verdict's: "n/a (not
// measured)", QuickVerdict, or "met"/"MISSED" by the median, with
// "(every run)" or the worst (best) run.
func (l Latency) Verdict(quick bool) string {
	s := l.Spread()
	target := float64(l.Target) / float64(time.Millisecond)
	switch {
	case s.N == 0:
		return "n/a (not measured)"
	case quick:
		return QuickVerdict
	case l.Met() && s.Max < target, !l.Met() && s.Min >= target:
		return map[bool]string{true: "met", false: "MISSED"}[l.Met()] + " (every run)"
	case l.Met():
		return fmt.Sprintf("met (median; worst run %.3fms)", s.Max)
	default:
		return fmt.Sprintf("MISSED (median; best run %.3fms)", s.Min)
	}
}

// LatencyLine is the report's line for l, e.g.
//
//	target send_p50=0.210ms [0.180–0.250ms over 5 runs] (W9, want < 1ms): met (every run)
func LatencyLine(l Latency, quick bool) string {
	spread := ""
	if s := l.Spread(); s.N > 0 {
		spread = fmt.Sprintf(" [%.3f–%.3fms over %d %s]", s.Min, s.Max, s.N, plural(s.N, "run", "runs"))
	}
	return fmt.Sprintf("target %s=%s%s (%s, want < %s): %s", l.Name, l, spread, l.Row, l.Target, l.Verdict(quick))
}
