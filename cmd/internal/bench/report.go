package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode"
)

// Ratio is one throughput(workrouter) / throughput(baseline) comparison of
// the final line.
type Ratio struct {
	Name     string  // e.g. "router_vs_raw"
	Num, Den string  // result IDs: workrouter's and the baseline's
	Target   float64 // the ratio it must reach
	Value    float64 // valid only if OK
	OK       bool    // false: an input was skipped, failed or absent
}

// String is the ratio formatted %.2f, or "n/a".
func (r Ratio) String() string {
	if !r.OK {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", r.Value)
}

// Met reports whether the ratio was measured and reached its target.
func (r Ratio) Met() bool { return r.OK && r.Value >= r.Target }

// ratioDefs lists the final line's ratios in order.
var ratioDefs = []Ratio{
	{Name: "router_vs_raw", Num: "W1", Den: "B1", Target: 0.8},
	{Name: "fenced_vs_unfenced_pg", Num: "W2pg", Den: "B3pg", Target: 0.9},
	{Name: "fenced_vs_unfenced_sqlite", Num: "W2sqlite", Den: "B3sqlite", Target: 0.9},
	{Name: "produce_vs_raw", Num: "W4", Den: "B4", Target: 0.9},
	{Name: "router_vs_sarama", Num: "W1", Den: "B2", Target: 1.0},
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

// find returns the measured (not skipped, non-zero) result with ID id.
func find(results []Result, id string) (Result, bool) {
	for _, r := range results {
		if normID(r.ID) == normID(id) && r.Skipped == "" && r.Throughput() > 0 {
			return r, true
		}
	}
	return Result{}, false
}

// Ratios computes the final line's ratios from results.
func Ratios(results []Result) []Ratio {
	out := make([]Ratio, len(ratioDefs))
	for i, d := range ratioDefs {
		num, ok1 := find(results, d.Num)
		den, ok2 := find(results, d.Den)
		if ok1 && ok2 {
			d.Value, d.OK = num.Throughput()/den.Throughput(), true
		}
		out[i] = d
	}
	return out
}

// FinalLine is the report's last line:
//
//	bench: router_vs_raw=<r> fenced_vs_unfenced_pg=<r> fenced_vs_unfenced_sqlite=<r> produce_vs_raw=<r> router_vs_sarama=<r>
func FinalLine(ratios []Ratio) string {
	var b strings.Builder
	b.WriteString("bench:")
	for _, r := range ratios {
		fmt.Fprintf(&b, " %s=%s", r.Name, r)
	}
	return b.String()
}

// WriteTable writes one row per result: ID, name, records, seconds,
// records/s, CPU µs/record, peak RSS MiB and extra (or why it was skipped).
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tname\trecords\tseconds\trecords/s\tCPU µs/rec\tpeak RSS MiB\textra")
	for _, r := range results {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\tskipped: %s\n", r.ID, r.Name, r.Skipped)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.0f\t%.2f\t%.0f\t%s\n", r.ID, r.Name, r.Records,
			r.Elapsed.Seconds(), r.Throughput(), float64(r.CPUPerRecord().Nanoseconds())/1e3,
			float64(r.PeakRSS)/(1<<20), r.Extra)
	}
	return tw.Flush()
}

// WriteReport writes the table, one line per target (met, missed or n/a)
// and the final line.
func WriteReport(w io.Writer, results []Result) error {
	if err := WriteTable(w, results); err != nil {
		return err
	}
	ratios := Ratios(results)
	fmt.Fprintln(w)
	for _, r := range ratios {
		verdict := "n/a (not measured)"
		switch {
		case r.Met():
			verdict = "met"
		case r.OK:
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "target %s=%s (%s/%s, want >= %.2f): %s\n", r.Name, r, r.Num, r.Den, r.Target, verdict)
	}
	_, err := fmt.Fprintln(w, FinalLine(ratios))
	return err
}
