package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeRun records the order of Run's calls: each call appends the entry's
// ID, and "!" for a warm-up run (the call before the group's first
// measured round, seen by the progress line), to calls.
type fakeRun struct {
	calls []string
	// result, if set, decides a call's outcome from the ID and how many
	// times that ID was called before.
	result func(id string, n int) (Result, error)
	seen   map[string]int
}

// entries returns All(repeats) with every workload replaced by a fake
// that records its call.
func (f *fakeRun) entries(repeats int) []Entry {
	f.seen = map[string]int{}
	es := All(repeats)
	for i := range es {
		id := es[i].ID
		es[i].Run = func(context.Context, *Env) (Result, error) {
			n := f.seen[id]
			f.seen[id]++
			f.calls = append(f.calls, id)
			if f.result != nil {
				return f.result(id, n)
			}
			return Result{ID: id, Records: 1000, Elapsed: time.Second}, nil
		}
	}
	return es
}

// run selects only from f's entries and runs them, returning the call
// order with warm-up runs marked "!" (from the progress lines).
func (f *fakeRun) run(t *testing.T, repeats int, only ...string) ([]Row, string, error) {
	t.Helper()
	es, err := Select(f.entries(repeats), only)
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	rows, err := Run(t.Context(), &Env{}, es, &progress)
	var order []string
	for line := range strings.Lines(progress.String()) {
		id, rest, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "bench: running "), " ")
		if strings.Contains(rest, "warm-up") {
			id += "!"
		}
		order = append(order, id)
	}
	if len(order) != len(f.calls) {
		t.Fatalf("%d progress lines for %d calls: %q", len(order), len(f.calls), progress.String())
	}
	return rows, strings.Join(order, ","), err
}

func TestRunInterleaves(t *testing.T) {
	for _, tc := range []struct {
		only []string
		want string
	}{
		{nil, "B0,B0,B0," +
			"B1!,B1,W1,W1n,B2,B1,W1,W1n,B2,B1,W1,W1n,B2," +
			"W3!,W3,W7,W7-pg,W3,W7,W7-pg,W3,W7,W7-pg," +
			"B3-sqlite!,B3-sqlite,W2-sqlite,W2n-sqlite,B3-sqlite,W2-sqlite,W2n-sqlite,B3-sqlite,W2-sqlite,W2n-sqlite," +
			"W2-sqlite-b1!,W2-sqlite-b1,W2n-sqlite-b1,W2-sqlite-b1,W2n-sqlite-b1,W2-sqlite-b1,W2n-sqlite-b1," +
			"B3-pg!,B3-pg,W2-pg,W2n-pg,W2u-pg,B3-pg,W2-pg,W2n-pg,W2u-pg,B3-pg,W2-pg,W2n-pg,W2u-pg," +
			"B3-pg-b1!,B3-pg-b1,W2-pg-b1,W2n-pg-b1,B3-pg-b1,W2-pg-b1,W2n-pg-b1,B3-pg-b1,W2-pg-b1,W2n-pg-b1," +
			"B3-pg-b16!,B3-pg-b16,W2n-pg-b16,B3-pg-b16,W2n-pg-b16,B3-pg-b16,W2n-pg-b16," +
			"B3-redis!,B3-redis,W2-redis,B3-redis,W2-redis,B3-redis,W2-redis," +
			"B3-kafka!,B3-kafka,W2-kafka,W2-kafka-b4096,B3-kafka,W2-kafka,W2-kafka-b4096,B3-kafka,W2-kafka,W2-kafka-b4096," +
			"B4!,B4,W4,B4,W4,B4,W4," +
			"B5!,B5,W8,B5,W8,B5,W8," +
			"W9,W9,W9," +
			"W5,W5-sqlite,W6"},
		{[]string{"W8", "B5", "W9"}, "B5!,B5,W8,B5,W8,B5,W8,W9,W9,W9"},
		{[]string{"W4", "B4"}, "B4!,B4,W4,B4,W4,B4,W4"},
		{[]string{"W1"}, "W1!,W1,W1,W1"},
		{[]string{"W1", "B2", "W4"}, "W1!,W1,B2,W1,B2,W1,B2,W4!,W4,W4,W4"},
		{[]string{"B0", "W6"}, "B0,B0,B0,W6"},
		{[]string{"W7", "W3"}, "W3!,W3,W7,W3,W7,W3,W7"},
		{[]string{"W2-kafka", "B3-kafka"}, "B3-kafka!,B3-kafka,W2-kafka,B3-kafka,W2-kafka,B3-kafka,W2-kafka"},
	} {
		var f fakeRun
		rows, order, err := f.run(t, 3, tc.only...)
		if err != nil {
			t.Fatal(err)
		}
		if order != tc.want {
			t.Errorf("--only %v: ran\n%s\nwant\n%s", tc.only, order, tc.want)
		}
		if got, want := strings.Join(f.calls, ","), strings.ReplaceAll(tc.want, "!", ""); got != want {
			t.Errorf("--only %v: calls %s, want %s", tc.only, got, want)
		}
		// Rows come in the order of the entries, warm-up runs left out.
		for _, row := range rows {
			want := 3
			if row.ID == "W5" || row.ID == "W5-sqlite" || row.ID == "W6" {
				want = 1
			}
			if row.Repeats != want || len(row.Runs) != want || row.Throughput().N != want || row.Problems() != "" {
				t.Errorf("--only %v: row %s: %d runs of %d, problems %q", tc.only, row.ID, len(row.Runs), row.Repeats, row.Problems())
			}
		}
	}
}

// TestRunKeepsFailedRepeat checks that a failed repeat is kept in its row
// and said, that the entry's other repeats still run, that an entry
// reporting itself skipped is not run again, and that a failed warm-up is
// reported too.
func TestRunKeepsFailedRepeat(t *testing.T) {
	boom := errors.New("boom")
	f := fakeRun{result: func(id string, n int) (Result, error) {
		switch {
		case id == "W4" && n == 1: // W4's second measured run
			return Result{ID: id}, fmt.Errorf("W4: %w", boom)
		case id == "B3-sqlite" && n == 0: // the warm-up
			return Result{ID: id}, fmt.Errorf("B3-sqlite: %w", boom)
		case id == "B3-pg":
			return Result{ID: id, Name: "pg", Skipped: "no DSN"}, nil
		case id == "W2-pg":
			return Result{ID: id, Name: "pg", Skipped: "no DSN"}, nil
		case id == "B4" && n > 0: // after the warm-up: rounds 0, 1, 2 at 1000, 2000, 3000/s
			return Result{ID: id, Records: 1000 * n, Elapsed: time.Second}, nil
		case id == "W4": // rounds 0 and 2 at 1000 and 3000/s
			return Result{ID: id, Records: 1000 * (n + 1), Elapsed: time.Second}, nil
		}
		return Result{ID: id, Name: "name of " + id, Records: 1000, Elapsed: time.Second}, nil
	}}
	rows, order, err := f.run(t, 3, "B4", "W4", "B3-sqlite", "W2-sqlite", "B3-pg", "W2-pg")
	if !errors.Is(err, boom) {
		t.Fatalf("Run error %v, want boom", err)
	}
	if want := "B3-sqlite!,B3-sqlite,W2-sqlite,B3-sqlite,W2-sqlite,B3-sqlite,W2-sqlite,B3-pg!,W2-pg,B4!,B4,W4,B4,W4,B4,W4"; order != want {
		t.Fatalf("ran\n%s\nwant\n%s", order, want)
	}
	byID := map[string]Row{}
	for _, row := range rows {
		byID[row.ID] = row
	}
	w4 := byID["W4"]
	if len(w4.Runs) != 3 || w4.Throughput().N != 2 || w4.Problems() != "run 2 of 3 failed: W4: boom" {
		t.Errorf("W4 row: %d runs, %d measured, problems %q", len(w4.Runs), w4.Throughput().N, w4.Problems())
	}
	if b3 := byID["B3-sqlite"]; b3.Warmup != "failed: B3-sqlite: boom" || b3.Throughput().N != 3 ||
		b3.Problems() != "warm-up run failed: B3-sqlite: boom" {
		t.Errorf("B3-sqlite row: warm-up %q, problems %q", b3.Warmup, b3.Problems())
	}
	if pg := byID["B3-pg"]; len(pg.Runs) != 1 || pg.Runs[0].Skipped != "no DSN" {
		t.Errorf("B3-pg row: %+v", pg)
	}
	// The pairs are rounds 0 and 2, W4's failed round 1 left out.
	for _, r := range Ratios(rows) {
		if r.Name == "produce_vs_raw" && (len(r.Pairs) != 2 || r.Pairs[0] != 1 || r.Pairs[1] != 1) {
			t.Errorf("produce_vs_raw pairs %v, want [1 1]", r.Pairs)
		}
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rows); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"2/3", "run 2 of 3 failed: W4: boom", "warm-up run failed: B3-sqlite: boom", "skipped: no DSN"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestRunAllRepeatsFailed checks a row none of whose runs measured
// anything, and a run cut short by the context.
func TestRunAllRepeatsFailed(t *testing.T) {
	f := fakeRun{result: func(id string, n int) (Result, error) {
		if id == "B1" && n > 0 {
			return Result{ID: id}, errors.New("B1: down")
		}
		return Result{ID: id, Records: 1000, Elapsed: time.Second}, nil
	}}
	rows, _, err := f.run(t, 2, "B1", "W1")
	if err == nil {
		t.Fatal("no error")
	}
	var buf bytes.Buffer
	if err := WriteReport(&buf, rows, false); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "runs 1,2 of 2 failed: B1: down") || !strings.Contains(out, "router_vs_raw=n/a") {
		t.Errorf("report:\n%s", out)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var g fakeRun
	es, _ := Select(g.entries(3), []string{"B4", "W4"})
	calls := 0
	for i := range es {
		run := es[i].Run
		es[i].Run = func(ctx context.Context, env *Env) (Result, error) {
			if calls++; calls == 3 { // warm-up, B4, W4: then cancelled
				cancel()
			}
			return run(ctx, env)
		}
	}
	rows, err = Run(ctx, &Env{}, es, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error %v", err)
	}
	if p := rows[0].Problems(); p != "runs 2,3 of 3 not run" {
		t.Errorf("B4 problems %q", p)
	}
}
