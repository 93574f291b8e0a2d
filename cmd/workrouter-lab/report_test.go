package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/cmd/internal/timeline/browsertest"
)

// checkReport opens the report at path in headless Chromium and compares
// what it shows with the run's own JSON figures: no console error and
// nothing fetched, one lane per partition, as many red marks as stale
// writes rejected, as many fault markers as faults counted (per kind
// too, and the fault table's cells), and each invariant's count as the
// checker's.
func checkReport(t *testing.T, path string, partitions, staleRejected int, faults map[string]int, inv map[string]int) browsertest.Page {
	t.Helper()
	p := browsertest.Load(t, path)
	if len(p.Console) > 0 {
		t.Errorf("the page logged errors: %q", p.Console)
	}
	if len(p.Resources) > 0 {
		t.Errorf("the page fetched %q: it must be self-contained", p.Resources)
	}
	if p.SVGHeight < 300 {
		t.Errorf("the timeline rendered %.0f px high", p.SVGHeight)
	}
	if len(p.Lanes) != partitions {
		t.Errorf("%d lanes, want one per partition (%d): %s", len(p.Lanes), partitions, p)
	}
	for i, part := range p.Lanes {
		if part != i {
			t.Errorf("lane %d is partition %d", i, part)
		}
	}
	if p.Marks["stale"] != staleRejected || p.Figures["stale_rejected"] != strconv.Itoa(staleRejected) {
		t.Errorf("%d red marks and %q in the table, want the run's stale_rejected %d", p.Marks["stale"], p.Figures["stale_rejected"], staleRejected)
	}
	total := 0
	for k, n := range faults {
		total += n
		if p.FaultMarks[k] != n || p.FaultCounts[k] != strconv.Itoa(n) {
			t.Errorf("fault %s: %d markers and %q in the table, want %d", k, p.FaultMarks[k], p.FaultCounts[k], n)
		}
	}
	if p.Marks["fault"] != total || p.Figures["faults_drawn"] != strconv.Itoa(total) {
		t.Errorf("%d fault markers (table: %q), want the %d faults counted", p.Marks["fault"], p.Figures["faults_drawn"], total)
	}
	for _, k := range []string{"F", "L", "O", "X", "V", "D"} {
		if p.Invariants[k] != strconv.Itoa(inv[k]) {
			t.Errorf("invariant %s shows %q, the checker counted %d", k, p.Invariants[k], inv[k])
		}
	}
	if staleRejected > 0 && !strings.Contains(p.StaleTip, "REFUSED stale") {
		t.Errorf("hovering a red mark showed %q, want its event", p.StaleTip)
	}
	if p.Marks["tenure"] < partitions || p.Marks["claim"] < partitions {
		t.Errorf("%d tenures and %d claims drawn for %d partitions", p.Marks["tenure"], p.Marks["claim"], partitions)
	}
	return p
}

// TestDemoReportInBrowser: `workrouter-lab demo --report FILE` writes a page
// that shows the run as its JSON summary counts it.
func TestDemoReportInBrowser(t *testing.T) {
	browsertest.Chromium(t)
	path := filepath.Join(t.TempDir(), "demo.html")
	p := clitest.Start(t, []string{"demo", "--commands", "1200", "--accounts", "100", "--json", "--report", path})
	if code := p.Wait(t); code != 0 {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", code, p.Stdout, p.Stderr)
	}
	var sum struct {
		StaleRejected int            `json:"stale_rejected"`
		Faults        map[string]int `json:"faults"`
		Invariants    map[string]int `json:"invariants"`
	}
	if err := json.Unmarshal([]byte(p.Stdout.String()), &sum); err != nil {
		t.Fatalf("--json output: %v\n%s", err, p.Stdout)
	}
	if sum.StaleRejected < 1 || sum.Faults["pause"] != 1 || len(sum.Invariants) != 6 {
		t.Fatalf("summary %+v: want a stale write rejected, one pause and the six invariants", sum)
	}
	if !strings.Contains(p.Stderr.String(), "report written to "+path) {
		t.Errorf("stderr %q does not say where the report is", p.Stderr)
	}
	page := checkReport(t, path, 6, sum.StaleRejected, sum.Faults, sum.Invariants)
	if page.Verdict != "ok" {
		t.Errorf("verdict %q for a passing demo", page.Verdict)
	}
}

// TestChaosReportInBrowser: a short chaos run (25 s, every kind) with
// --report; the page shows the run as its JSON result counts it.
func TestChaosReportInBrowser(t *testing.T) {
	browsertest.Chromium(t)
	path := filepath.Join(t.TempDir(), "chaos.html")
	code, out := runChaos(t, 4*time.Minute, "--duration", "25s", "--seed", "1", "--json", "--report", path)
	var res struct {
		Faults        map[string]int `json:"faults"`
		StaleRejected int            `json:"stale_rejected"`
		Violations    map[string]int `json:"violations"`
		DeadLetters   map[string]int `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("chaos exited %d; --json output: %v\n%s", code, err, out)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("chaos exited %d and wrote no report: %v", code, err)
	}
	total := 0
	for _, n := range res.Faults {
		total += n
	}
	if total == 0 || len(res.Violations) != 6 {
		t.Fatalf("result: faults %v, violations %v", res.Faults, res.Violations)
	}
	page := checkReport(t, path, 6, res.StaleRejected, res.Faults, res.Violations)
	// The run's own verdict (exit 0) is the page's.
	if want := map[bool]string{true: "ok", false: "failed"}[code == 0]; page.Verdict != want {
		t.Errorf("verdict %q, chaos exited %d", page.Verdict, code)
	}
	dead := 0
	for _, n := range res.DeadLetters {
		dead += n
	}
	if page.Figures["dead_letters"] != strconv.Itoa(dead) {
		t.Errorf("the table shows %q dead letters, the sink holds %d", page.Figures["dead_letters"], dead)
	}
}
