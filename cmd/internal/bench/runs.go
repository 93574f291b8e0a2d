package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Row is one entry's outcome in a run: every run of it, in the order they
// ran. Runs[i] is the entry's i-th round, so that run i of a workload and
// run i of its baseline (see Ratio) ran next to each other.
type Row struct {
	ID      string
	Repeats int      // measured runs planned (Entry.Repeats, at least 1)
	Runs    []Result // every run made; a failed run has Skipped "failed: …"
	// Warmup is "failed: …" if the group's unreported warm-up run of this
	// entry failed.
	Warmup string
}

// Spread is the median, minimum and maximum of N values (all zero if N is
// 0). The median of an even count is the mean of the middle two.
type Spread struct {
	Median, Min, Max float64
	N                int
}

// SpreadOf returns the spread of xs (not modified).
func SpreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Spread{Median: med, Min: s[0], Max: s[n-1], N: n}
}

// measured reports whether r is a run that measured something: neither
// skipped nor failed, and a positive throughput.
func measured(r Result) bool { return r.Skipped == "" && r.Throughput() > 0 }

// failedPrefix starts the Skipped of a run that returned an error.
const failedPrefix = "failed: "

// Measured returns the runs that measured something (see Throughput), in
// run order.
func (r Row) Measured() []Result {
	var out []Result
	for _, run := range r.Runs {
		if measured(run) {
			out = append(out, run)
		}
	}
	return out
}

// Throughput is the spread of the measured runs' records per second.
func (r Row) Throughput() Spread {
	var xs []float64
	for _, run := range r.Measured() {
		xs = append(xs, run.Throughput())
	}
	return SpreadOf(xs)
}

// rate returns the throughput of run i, and whether run i exists and
// measured something.
func (r Row) rate(i int) (float64, bool) {
	if i < 0 || i >= len(r.Runs) || !measured(r.Runs[i]) {
		return 0, false
	}
	return r.Runs[i].Throughput(), true
}

// CPUPerRecord is the spread of the measured runs' CPU per record
// (Result.CPUPerRecord), in microseconds, over the runs that have one.
func (r Row) CPUPerRecord() Spread {
	var xs []float64
	for _, run := range r.Measured() {
		if c := run.CPUPerRecord(); c > 0 {
			xs = append(xs, float64(c)/float64(time.Microsecond))
		}
	}
	return SpreadOf(xs)
}

// cpuPerRecord returns the CPU per record of run i in microseconds, and
// whether run i exists, measured something and has one.
func (r Row) cpuPerRecord(i int) (float64, bool) {
	if i < 0 || i >= len(r.Runs) || !measured(r.Runs[i]) || r.Runs[i].CPUPerRecord() <= 0 {
		return 0, false
	}
	return float64(r.Runs[i].CPUPerRecord()) / float64(time.Microsecond), true
}

// Name is the first non-empty Name of the row's runs.
func (r Row) Name() string {
	for _, run := range r.Runs {
		if run.Name != "" {
			return run.Name
		}
	}
	return ""
}

// Summary is one Result standing for the row: Records, Elapsed and CPU of
// the median run by throughput (the lower middle one of an even count),
// the largest PeakRSS, and Extra of the median run. ok is false if no run
// measured anything.
func (r Row) Summary() (s Result, ok bool) {
	runs := r.Measured()
	if len(runs) == 0 {
		return Result{ID: r.ID, Name: r.Name()}, false
	}
	slices.SortStableFunc(runs, func(a, b Result) int {
		switch ta, tb := a.Throughput(), b.Throughput(); {
		case ta < tb:
			return -1
		case ta > tb:
			return 1
		}
		return 0
	})
	s = runs[(len(runs)-1)/2]
	s.ID, s.Name = r.ID, r.Name()
	for _, run := range r.Runs {
		s.PeakRSS = max(s.PeakRSS, run.PeakRSS)
	}
	return s, true
}

// Problems says which planned runs measured nothing and why, e.g. "run 2
// of 5 failed: W1: boom" or "runs 4,5 of 5 not run", or "" if every planned
// run measured something. Runs with the same reason are listed together.
func (r Row) Problems() string {
	var (
		reasons []string
		runs    = map[string][]string{}
	)
	note := func(i int, why string) {
		if _, ok := runs[why]; !ok {
			reasons = append(reasons, why)
		}
		runs[why] = append(runs[why], fmt.Sprint(i+1))
	}
	for i, run := range r.Runs {
		switch {
		case measured(run):
		case run.Skipped == "":
			note(i, "measured no throughput")
		case strings.HasPrefix(run.Skipped, failedPrefix):
			note(i, run.Skipped)
		default:
			note(i, "skipped: "+run.Skipped)
		}
	}
	for i := len(r.Runs); i < r.Repeats; i++ {
		note(i, "not run")
	}
	var parts []string
	if r.Warmup != "" {
		parts = append(parts, "warm-up run "+r.Warmup)
	}
	for _, why := range reasons {
		parts = append(parts, fmt.Sprintf("%s %s of %d %s", plural(len(runs[why]), "run", "runs"), strings.Join(runs[why], ","), r.Repeats, why))
	}
	return strings.Join(parts, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
