package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Entry is one workload or baseline of a run.
type Entry struct {
	ID  string
	Run Workload
	// Repeats is how many measured runs Run makes of it (0 means 1).
	Repeats int
	// Group, if not empty, names the ratio group: Run interleaves the
	// runs of the selected entries of one group (see All).
	Group string
	// Warmup, if set and the entry is the first selected one of its
	// group, makes Run start the group with one unreported run of it.
	Warmup bool
}

// runs is e's number of measured runs.
func (e Entry) runs() int { return max(e.Repeats, 1) }

// All returns every workload and baseline in the order they run. Each
// throughput workload and baseline (all but W5, W5-sqlite and W6) runs repeats
// times (FullRepeats or QuickRepeats for the CLI; 1 runs each once, as go
// test -bench does). The workloads and baselines of a ratio are a group
// whose runs Run interleaves, round by round: B1,W1,W1n,B2,B1,W1,W1n,B2,…, then
// B3-sqlite,W2-sqlite,W2n-sqlite,…, W2-sqlite-b1,W2n-sqlite-b1,…,
// B3-pg,W2-pg,W2n-pg,W2u-pg,…, B3-pg-b1,W2-pg-b1,W2n-pg-b1,…,
// B3-pg-b16,W2n-pg-b16,…, B3-redis,W2-redis,…, B3-kafka,W2-kafka,W2-kafka-b4096,…,
// W3,W7,W7-pg,… and B4,W4,B4,W4,…, so that
// warm-up, garbage left by the previous run and background load favour
// neither side of a ratio. W1 is in one group with both of its baselines,
// B1 and B2, and with W1n, its twin without deduplication (no ratio). B0
// has no ratio and runs its repeats back to back. The record count comes
// from the Env.
//
// Every group starts with one unreported warm-up run of its first selected
// member. What we measured (100,000 records, two cores shared with other
// work, load about 2): without the warm-up, the first B4 run of a process
// was slow (its throughput over the median of its later runs: median 0.95,
// down to 0.56), so the first pair's produce_vs_raw was above the median of
// the other four pairs in 9 of 14 runs, by a median of 8% (mean 17%, up
// to 83%), whether or not the consuming groups ran before it. With the
// warm-up (8 runs of B4,W4): median 2%, mean 2%. The consuming group (14
// runs of B1,W1: first pair 0.97 of the others) and the SQLite group (4
// runs at 50,000 records: 0.99) showed no such effect within the noise;
// they get the warm-up too: it costs one run, and in the one full
// (1,000,000-record) run we made, the first run after the pre-load (B0's)
// was 0.70 of the median of B0's later runs.
//
// W5 and W5-sqlite run at half of the end-to-end maximum rate they
// measure first. W6
// needs the embedded broker (Setup without Brokers) and is skipped
// otherwise.
func All(repeats int) []Entry {
	repeats = max(repeats, 1)
	keys := &keysTopic{} // W7's and W7-pg's topic, pre-loaded by the first run
	m := func(id string, w Workload, group string) Entry {
		return Entry{ID: id, Run: w, Repeats: repeats, Group: group, Warmup: group != ""}
	}
	return []Entry{
		m("B0", B0, ""),
		m("B1", B1, "consume"),
		m("W1", W1, "consume"),
		m("W1n", W1n, "consume"),
		m("B2", B2, "consume"),
		m("W3", W3, "keys"),
		m("W7", W7On(keys), "keys"),
		m("W7-pg", W7PostgresOn(keys), "keys"),
		m("B3-sqlite", B3SQLite, "sqlite"),
		m("W2-sqlite", W2SQLite, "sqlite"),
		m("W2n-sqlite", w2SQLite(w2Variants[1]), "sqlite"),
		m("W2-sqlite-b1", w2SQLite(w2Variants[2]), "sqlite-b1"),
		m("W2n-sqlite-b1", w2SQLite(w2Variants[3]), "sqlite-b1"),
		m("B3-pg", B3Postgres, "pg"),
		m("W2-pg", W2Postgres, "pg"),
		m("W2n-pg", w2Postgres(w2Variants[1]), "pg"),
		m("W2u-pg", W2uPostgres, "pg"),
		m("B3-pg-b1", b3Postgres("B3-pg-b1", 1, PostgresBatch1Records), "pg-b1"),
		m("W2-pg-b1", w2Postgres(w2Variants[2]), "pg-b1"),
		m("W2n-pg-b1", w2Postgres(w2Variants[3]), "pg-b1"),
		m("B3-pg-b16", b3Postgres("B3-pg-b16", 16, PostgresBatch16Records), "pg-b16"),
		m("W2n-pg-b16", w2Postgres(w2Variants[4]), "pg-b16"),
		m("B3-redis", B3Redis, "redis"),
		m("W2-redis", W2Redis, "redis"),
		m("B3-kafka", B3Kafka, "kafka"),
		m("W2-kafka", W2Kafka, "kafka"),
		m("W2-kafka-b4096", w2KafkaBatch("W2-kafka-b4096", KafkaSinkBigBatch), "kafka"),
		m("B4", B4, "produce"),
		m("W4", W4, "produce"),
		m("B5", B5, "file"),
		m("W8", W8, "file"),
		m("W9", W9, ""),
		{ID: "W5", Run: W5},
		{ID: "W5-sqlite", Run: W5SQLite},
		{ID: "W6", Run: W6},
	}
}

// FullRepeats and QuickRepeats are how many measured runs All makes of
// each throughput workload and baseline (all but W5, W5-sqlite and W6) in a full
// and a --quick run. A consuming run lasts a few hundred milliseconds,
// group join included, where one scheduling hiccup on two cores moves a
// single run's throughput by a tenth or more: the report gives every
// row's median and its min–max, and every ratio's median and the min–max
// of its per-pair ratios.
const (
	FullRepeats  = 5
	QuickRepeats = 3
)

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

// step is one run of a schedule: entry index and round, or the group's
// unreported warm-up run.
type step struct {
	entry, round int
	warmup       bool
}

// schedule returns the order in which Run makes the runs of entries:
// entries in order, except that an entry with a Group brings forward the
// later entries of its group, and the group's runs go round by round (the
// first run of every member, then the second, …), after a warm-up run of
// the group's first member if it has Warmup. A member with fewer Repeats
// drops out of the later rounds.
func schedule(entries []Entry) []step {
	var (
		steps []step
		done  = make([]bool, len(entries))
	)
	for i, e := range entries {
		if done[i] {
			continue
		}
		members := []int{i}
		for j := i + 1; e.Group != "" && j < len(entries); j++ {
			if entries[j].Group == e.Group {
				members = append(members, j)
			}
		}
		if e.Warmup {
			steps = append(steps, step{entry: i, warmup: true})
		}
		rounds := 0
		for _, m := range members {
			done[m] = true
			rounds = max(rounds, entries[m].runs())
		}
		for round := range rounds {
			for _, m := range members {
				if round < entries[m].runs() {
					steps = append(steps, step{entry: m, round: round})
				}
			}
		}
	}
	return steps
}

// Run makes the runs of entries against env in the order of schedule
// (interleaving the runs of a group) and returns one Row per entry, in the
// order of entries. A failing run does not stop the run: it is kept in its
// row (Skipped "failed: …", see Row.Problems), the entry's later runs are
// still made, and Run returns every error joined. An entry that reports
// itself Skipped is not run again (a Skipped warm-up run is its row's
// only run). A failed warm-up run is an error too, noted in Row.Warmup.
// When ctx ends, no further run is made.
// progress, if not nil, gets one line per run as it starts.
func Run(ctx context.Context, env *Env, entries []Entry, progress io.Writer) ([]Row, error) {
	rows := make([]Row, len(entries))
	for i, e := range entries {
		rows[i] = Row{ID: e.ID, Repeats: e.runs()}
	}
	skipped := make([]bool, len(entries))
	var errs []error
	for _, st := range schedule(entries) {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		e := entries[st.entry]
		if skipped[st.entry] {
			continue
		}
		if progress != nil {
			if st.warmup {
				fmt.Fprintf(progress, "bench: running %s (warm-up, not reported)\n", e.ID)
			} else if e.runs() > 1 {
				fmt.Fprintf(progress, "bench: running %s (%d of %d)\n", e.ID, st.round+1, e.runs())
			} else {
				fmt.Fprintf(progress, "bench: running %s\n", e.ID)
			}
		}
		r, err := e.Run(ctx, env)
		if r.ID == "" {
			r.ID = e.ID
		}
		switch {
		case st.warmup && err != nil:
			rows[st.entry].Warmup = failedPrefix + err.Error()
			errs = append(errs, err)
			continue
		case st.warmup && r.Skipped == "":
			continue
		case err != nil:
			r.Skipped = failedPrefix + err.Error()
			errs = append(errs, err)
		case r.Skipped != "":
			skipped[st.entry] = true
		}
		rows[st.entry].Runs = append(rows[st.entry].Runs, r)
	}
	return rows, errors.Join(errs...)
}
