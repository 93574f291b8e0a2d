package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Entry is one workload or baseline of a run.
type Entry struct {
	ID  string
	Run Workload
}

// All returns every workload and baseline in the order they run, each
// throughput workload wrapped in MedianOf(repeats) (FullRepeats or
// QuickRepeats for the CLI; 1 runs each once, as go test -bench does). The
// record count comes from the Env.
//
// W5 runs at half of the end-to-end maximum rate it measures first. W6
// needs the embedded broker (Setup without Brokers) and is skipped
// otherwise.
func All(repeats int) []Entry {
	m := func(w Workload) Workload { return MedianOf(repeats, w) }
	return []Entry{
		{"B0", m(B0)},
		{"B1", m(B1)},
		{"W1", m(W1)},
		{"B2", m(B2)},
		{"W3", W3},
		{"B3-sqlite", m(B3SQLite)},
		{"W2-sqlite", m(W2SQLite)},
		{"B3-pg", m(B3Postgres)},
		{"W2-pg", m(W2Postgres)},
		{"B4", m(B4)},
		{"W4", m(W4)},
		{"W5", W5},
		{"W5-sqlite", W5SQLite},
		{"W6", W6},
	}
}

// FullRepeats and QuickRepeats are how many times All runs each throughput
// workload and baseline (all but W3, W5 and W6) in a full and a --quick
// run; the reported run is the median by throughput. A consuming run lasts
// a few hundred milliseconds, group join included, where one scheduling
// hiccup on two cores moves a single run's throughput by a tenth or more.
const (
	FullRepeats  = 3
	QuickRepeats = 5
)

// MedianOf returns a Workload that runs w n times and returns the run of
// median throughput, with "median of n" added to its Extra. It stops at the
// first error or Skipped run and returns that one.
func MedianOf(n int, w Workload) Workload {
	if n <= 1 {
		return w
	}
	return func(ctx context.Context, env *Env) (Result, error) {
		runs := make([]Result, 0, n)
		for range n {
			r, err := w(ctx, env)
			if err != nil || r.Skipped != "" {
				return r, err
			}
			runs = append(runs, r)
		}
		slices.SortFunc(runs, func(a, b Result) int { return cmp.Compare(a.Throughput(), b.Throughput()) })
		r := runs[n/2]
		r.Extra = strings.TrimSpace(r.Extra + fmt.Sprintf(" median of %d", n))
		return r, nil
	}
}

// W6 is W6Process when env can start worker processes, else W6TakeoverOn
// the embedded broker's cluster. Both are Skipped without the embedded
// broker (a real broker's minimum session timeout is above
// W6SessionTimeout).
func W6(ctx context.Context, env *Env) (Result, error) {
	if len(env.Worker.Argv) > 0 {
		return W6Process(ctx, env)
	}
	return W6TakeoverOn(Cluster(env))(ctx, env)
}

// Select returns the entries whose IDs are in only (case-insensitive), in
// the order of entries; all of them if only is empty. An unknown ID is an
// error.
func Select(entries []Entry, only []string) ([]Entry, error) {
	if len(only) == 0 {
		return entries, nil
	}
	want := map[string]bool{}
	for _, id := range only {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		found := false
		for _, e := range entries {
			if normID(e.ID) == normID(id) {
				found = true
			}
		}
		if !found {
			ids := make([]string, len(entries))
			for i, e := range entries {
				ids[i] = e.ID
			}
			return nil, fmt.Errorf("bench: unknown workload %q (known: %s)", id, strings.Join(ids, ","))
		}
		want[normID(id)] = true
	}
	var out []Entry
	for _, e := range entries {
		if want[normID(e.ID)] {
			out = append(out, e)
		}
	}
	return out, nil
}

// Run runs entries in order against env. A failing workload does not stop
// the run: its row says why it failed, and Run returns every error joined.
// progress, if not nil, gets one line per workload as it starts.
func Run(ctx context.Context, env *Env, entries []Entry, progress io.Writer) ([]Result, error) {
	var (
		results []Result
		errs    []error
	)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if progress != nil {
			fmt.Fprintf(progress, "bench: running %s\n", e.ID)
		}
		r, err := e.Run(ctx, env)
		if r.ID == "" {
			r.ID = e.ID
		}
		if err != nil {
			r.Skipped = "failed: " + err.Error()
			errs = append(errs, err)
		}
		results = append(results, r)
	}
	return results, errors.Join(errs...)
}
