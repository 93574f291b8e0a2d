package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/cmd/internal/bench"
	"github.com/workrouter/workrouter/cmd/internal/clitest"
)

// TestBenchCommand runs a tiny `workrouter-lab bench --quick` and checks the
// report: interleaved repeats with their spread, quick verdicts, the final
// line, and that W6 froze a real worker process.
func TestBenchCommand(t *testing.T) {
	p := clitest.Start(t, []string{"bench", "--quick", "--records", "2000", "--only", "W1,B1,W4,B4,B5,W8,W9,W6"})
	if code := p.Wait(t); code != 0 {
		t.Fatalf("bench exited %d\nstdout:\n%s\nstderr:\n%s", code, p.Stdout, p.Stderr)
	}
	out := p.Stdout.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	re := regexp.MustCompile(`^bench: router_vs_raw=[0-9]+\.[0-9]{2} fenced_vs_unfenced_pg=n/a fenced_vs_unfenced_sqlite=n/a dedupe_on_vs_off_pg=n/a dedupe_on_vs_off_sqlite=n/a dedupe_on_vs_off_pg_b1=n/a dedupe_on_vs_off_sqlite_b1=n/a fence_vs_unfenced_pg_b1=n/a fence_vs_unfenced_pg_b16=n/a fence_vs_unfenced_pg_b256=n/a worker_vs_raw_pg=n/a fence_in_worker_pg=n/a produce_vs_raw=[0-9]+\.[0-9]{2} produce_file_vs_kcat=([0-9]+\.[0-9]{2}|n/a) router_vs_sarama=n/a fenced_vs_unfenced_redis=n/a kafka_sink_vs_gts=n/a kafka_sink_vs_gts_b4096=n/a keys_vs_serial=n/a keys_vs_serial_pg=n/a router_vs_raw_cpu=[0-9]+\.[0-9]{2} router_vs_sarama_cpu=n/a kafka_sink_vs_gts_cpu=n/a send_p50=[0-9]+\.[0-9]{3}ms send_p99=[0-9]+\.[0-9]{3}ms$`)
	if !re.MatchString(last) {
		t.Fatalf("final line %q does not match %v\n%s", last, re, out)
	}
	for _, want := range []string{"records/s", "min–max", "CPU µs/rec", "SIGSTOP of a worker process", "takeover=",
		fmt.Sprintf("%d interleaved runs per throughput row", bench.QuickRepeats), "--quick: the ratios are indicative only and decide no target"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	n := bench.QuickRepeats
	for _, re := range []string{
		fmt.Sprintf(`(?m)^B1 .* %d/%d +[0-9.]+ +[0-9]+ +[0-9]+–[0-9]+ `, n, n),
		`(?m)^W6 .* 1/1 +[0-9.]+ +[0-9]+ +- `,
		fmt.Sprintf(`(?m)^target router_vs_raw=[0-9.]+ \[[0-9.]+–[0-9.]+ over %d pairs\] \(W1/B1, want >= 0\.95\): indicative \(--quick decides no target\)$`, n),
		fmt.Sprintf(`(?m)^target produce_vs_raw=[0-9.]+ \[[0-9.]+–[0-9.]+ over %d pairs\] \(W4/B4, want >= 0\.95\): indicative \(--quick decides no target\)$`, n),
		// W8 runs this binary's produce --file as a process; B5 runs kcat, or says it is not installed.
		fmt.Sprintf(`(?m)^W8 .* %d/%d +[0-9.]+ +[0-9]+ `, n, n),
		`(?m)^B5 .*(kcat -P .* [0-9]+/[0-9]+ +[0-9.]+ +[0-9]+ |skipped: kcat is not installed)`,
		fmt.Sprintf(`(?m)^W9 .* %d/%d .*p50=[0-9.]+[µm]s p99=[0-9.]+[µm]s `, n, n),
		fmt.Sprintf(`(?m)^target send_p50=[0-9.]+ms \[[0-9.]+–[0-9.]+ms over %d runs\] \(W9, want < 1ms\): indicative \(--quick decides no target\)$`, n),
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("report lacks %s:\n%s", re, out)
		}
	}
	// The runs alternate, each group after one warm-up run.
	var order []string
	for line := range strings.Lines(p.Stderr.String()) {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "bench: running "); ok {
			order = append(order, id)
		}
	}
	want := []string{"B1 (warm-up, not reported)", fmt.Sprintf("B1 (1 of %d)", n), fmt.Sprintf("W1 (1 of %d)", n),
		fmt.Sprintf("B1 (2 of %d)", n), fmt.Sprintf("W1 (2 of %d)", n)}
	if len(order) < len(want) || !slices.Equal(order[:len(want)], want) {
		t.Errorf("runs in order %q, want them to start %q", order, want)
	}
}

// TestBenchCommandJSON checks that --json carries every run and each
// ratio's per-pair spread and verdict, and that --repeats sets the runs.
func TestBenchCommandJSON(t *testing.T) {
	p := clitest.Start(t, []string{"bench", "--records", "2000", "--repeats", "3", "--only", "B4,W4", "--json"})
	if code := p.Wait(t); code != 0 {
		t.Fatalf("bench exited %d\nstdout:\n%s\nstderr:\n%s", code, p.Stdout, p.Stderr)
	}
	var doc benchJSON
	if err := json.Unmarshal([]byte(p.Stdout.String()), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, p.Stdout)
	}
	if doc.Quick || doc.Repeats != 3 || len(doc.Results) != 2 {
		t.Fatalf("quick %v, repeats %d, %d results", doc.Quick, doc.Repeats, len(doc.Results))
	}
	for _, r := range doc.Results {
		if r.Repeats != 3 || r.Measured != 3 || len(r.Runs) != 3 || r.Records != 2000 ||
			r.RecordsPerSMin > r.RecordsPerS || r.RecordsPerS > r.RecordsPerSMax || r.Problems != "" {
			t.Errorf("result %+v", r)
		}
		for _, run := range r.Runs {
			if run.Records != 2000 || run.RecordsPerS <= 0 {
				t.Errorf("%s run %+v", r.ID, run)
			}
		}
	}
	for _, tg := range doc.Targets {
		if tg.Name != "produce_vs_raw" {
			if tg.Ratio != nil || doc.Ratios[tg.Name] != nil || tg.Verdict != "n/a (not measured)" {
				t.Errorf("target %+v", tg)
			}
			continue
		}
		if tg.Ratio == nil || len(tg.Pairs) != 3 || tg.PairMin == nil || *tg.PairMin > *tg.PairMax ||
			tg.Target != 0.95 || tg.Met != (*tg.Ratio >= 0.95) || !strings.HasPrefix(tg.Verdict, map[bool]string{true: "met (", false: "MISSED ("}[tg.Met]) {
			t.Errorf("target %+v", tg)
		}
	}
}

func TestBenchCommandRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--only", "X9"},
		{"bench", "--records", "-5", "--only", "W1"},
		{"bench", "--repeats", "-1", "--only", "W1"},
		{"bench", "extra-arg"},
	} {
		p := clitest.Start(t, args)
		if code := p.Wait(t); code == 0 {
			t.Errorf("%v exited 0", args)
		}
		if errLine := strings.TrimSpace(p.Stderr.String()); !strings.HasPrefix(errLine, "workrouter-lab: ") {
			t.Errorf("%v: stderr %q", args, errLine)
		}
	}
}
