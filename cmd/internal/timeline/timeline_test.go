package timeline

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/cmd/internal/timeline/browsertest"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/eventlog"
	"github.com/workrouter/workrouter/internal/invariants"
)

// synthetic is a run of 3 partitions: w1 claims 0 and 1, w2 claims 2;
// w1 freezes, w2 takes partition 1 over at a newer epoch, w1's late write
// at the old epoch is refused, a poison record on partition 2 is
// dead-lettered, and at the very end a claim of w1 on partition 0 is
// refused; two faults (a pause of w1, a broker restart).
func synthetic() Report {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rec := func(ms int, kind string, p, epoch int32, member string) eventlog.Record {
		return eventlog.Record{Time: at(ms), Kind: kind, Group: "g", Topic: "t", Partition: p, Epoch: epoch, Member: member}
	}
	fenced := rec(6000, consumer.KindFenced, 1, 2, "w1-<m1>")
	fenced.Op, fenced.FirstOffset, fenced.Records, fenced.Err = "apply", 120, 7, "epochs: stale token"
	late := rec(9990, consumer.KindFenced, 0, 1, "w1-<m1>")
	late.Op = "claim"
	dead := rec(4000, consumer.KindDeadLettered, 2, 1, "w2-m2")
	dead.FirstOffset, dead.Cause = 77, "undecodable"
	lag := func(ms int, l map[int32]int64) eventlog.Record {
		r := rec(ms, consumer.KindLag, -1, 0, "")
		r.Offsets = l
		return r
	}
	applied := func(ms int, p int32, n int) eventlog.Record {
		r := rec(ms, consumer.KindApplied, p, 1, "")
		r.Applied = n
		return r
	}
	return Report{Title: "test run", Final: "test: ok", OK: true,
		Faults:     []Count{{"pause", 1}, {"broker-restart", 1}, {"kill", -1}},
		Figures:    []Figure{{"stale_rejected", "stale writes rejected", "2"}},
		Invariants: invariants.Violations{F: 1, L: 2, O: 3, X: 4, V: 5, D: 6},
		Trace: cluster.Trace{Start: t0, End: at(10000), Topic: "t", Partitions: 3,
			Workers: []cluster.WorkerTrace{
				{Name: "w1", Records: []eventlog.Record{
					rec(100, consumer.KindClaimed, 0, 1, "w1-<m1>"), rec(100, consumer.KindClaimed, 1, 2, "w1-<m1>"),
					lag(1000, map[int32]int64{0: 5, 1: 7}), fenced, late,
				}, Applied: []eventlog.Record{applied(500, 0, 10), applied(700, 1, 20)}},
				{Name: "w2", Records: []eventlog.Record{
					rec(150, consumer.KindClaimed, 2, 1, "w2-m2"), dead,
					rec(5000, consumer.KindClaimed, 1, 3, "w2-m2"), lag(5500, map[int32]int64{1: 0, 2: 3}),
				}, Applied: []eventlog.Record{applied(5200, 1, 30)}},
			},
			Faults: []cluster.FaultSpan{
				{Kind: "pause", Victim: "w1", Start: at(2000), End: at(6500), Detail: "SIGSTOP, then SIGCONT"},
				{Kind: "broker-restart", Start: at(8000), End: at(8600)},
			}},
		Lines: []string{"  0.00s  started"}}
}

// TestLayout: the zombie's tenure ends where the newer claim began, the
// marks sit on their partitions' lanes, and the lag chart sums the latest
// report of each partition.
func TestLayout(t *testing.T) {
	v := layout(synthetic())
	if len(v.Lanes) != 3 || v.Stale != 2 || v.DeadLetters != 1 || v.FaultsDrawn != 2 || v.Outside != 0 {
		t.Fatalf("lanes %d, stale %d, dead %d, faults %d, outside %d", len(v.Lanes), v.Stale, v.DeadLetters, v.FaultsDrawn, v.Outside)
	}
	l1 := v.Lanes[1]
	if len(l1.Bands) != 2 || len(l1.Claims) != 2 || len(l1.Stale) != 1 {
		t.Fatalf("lane 1: %+v", l1)
	}
	zombie, owner := l1.Bands[0], l1.Bands[1]
	if zombie.Epoch != 2 || owner.Epoch != 3 || zombie.X+zombie.W > owner.X+0.01 {
		t.Errorf("lane 1: the zombie's band (epoch %d, %.1f+%.1f) overlaps the new owner's (epoch %d at %.1f)", zombie.Epoch, zombie.X, zombie.W, owner.Epoch, owner.X)
	}
	if want := left + plotW*0.6; l1.Stale[0].X != want || l1.Stale[0].Label != "e2 w1" || l1.Stale[0].LabelLeft {
		t.Errorf("stale mark at %.1f %q (left %v), want %.1f \"e2 w1\" on its right", l1.Stale[0].X, l1.Stale[0].Label, l1.Stale[0].LabelLeft, want)
	}
	if l0 := v.Lanes[0]; len(l0.Stale) != 1 || !l0.Stale[0].LabelLeft {
		t.Errorf("lane 0: the refused claim at the end: %+v, want its label on its left", l0.Stale)
	}
	if len(v.Lanes[2].Dead) != 1 || len(v.Lanes[0].Dead)+len(v.Lanes[1].Dead) != 0 {
		t.Errorf("dead letters: %d %d %d", len(v.Lanes[0].Dead), len(v.Lanes[1].Dead), len(v.Lanes[2].Dead))
	}
	if v.Lag.Max != "12" || v.Lag.Last != "8 at 5.50s" || v.Lag.Samples != 2 {
		t.Errorf("lag: max %q last %q samples %d, want 12, 8 at 5.50s, 2", v.Lag.Max, v.Lag.Last, v.Lag.Samples)
	}
	if v.Rate.Samples != 3 || v.Rate.Empty {
		t.Errorf("rate: %d samples", v.Rate.Samples)
	}
}

// TestReportInBrowser opens the synthetic report in headless Chromium:
// no console error, nothing fetched, one lane per partition, the marks'
// counts and the summary's cells as the report holds them, and hovering
// the stale mark shows its refused token.
func TestReportInBrowser(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.html")
	if err := WriteFile(path, synthetic()); err != nil {
		t.Fatal(err)
	}
	p := browsertest.Load(t, path)
	if len(p.Console) > 0 || len(p.Resources) > 0 || p.SVGHeight < 300 {
		t.Fatalf("console %q, resources %q, svg height %.0f", p.Console, p.Resources, p.SVGHeight)
	}
	if got := strconv.Itoa(len(p.Lanes)); got != "3" || p.Marks["stale"] != 2 || p.Marks["dead-letter"] != 1 || p.Marks["claim"] != 4 || p.Marks["tenure"] != 4 {
		t.Errorf("page: %s", p)
	}
	if p.FaultMarks["pause"] != 1 || p.FaultMarks["broker-restart"] != 1 || browsertest.Sum(p.FaultMarks) != 2 {
		t.Errorf("fault marks %v", p.FaultMarks)
	}
	if p.FaultCounts["pause"] != "1" || p.FaultCounts["kill"] != "-" || p.Figures["faults_drawn"] != "2" || p.Figures["stale_rejected"] != "2" {
		t.Errorf("summary: faults %v figures %v", p.FaultCounts, p.Figures)
	}
	for i, k := range []string{"F", "L", "O", "X", "V", "D"} {
		if p.Invariants[k] != strconv.Itoa(i+1) {
			t.Errorf("invariant %s shows %q, want %d: %v", k, p.Invariants[k], i+1, p.Invariants)
		}
	}
	if len(p.Invariants) != 6 || p.Verdict != "ok" {
		t.Errorf("invariants %v, verdict %q", p.Invariants, p.Verdict)
	}
	// The first stale mark in the page is lane 0's: the refused claim.
	if !strings.Contains(p.StaleTip, "REFUSED stale claim by w1 at 9.99s") || !strings.Contains(p.StaleTip, "epoch 1 member w1-<m1>") {
		t.Errorf("hovering the stale mark showed %q", p.StaleTip)
	}
}

// TestWriteEscapesAndRefusesEmpty: event text is escaped (a member ID
// with markup is text), and a trace without a time span is refused.
func TestWriteEscapesAndRefusesEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, synthetic()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<m1>") || !strings.Contains(b.String(), "w1-&lt;m1&gt;") {
		t.Errorf("the member ID is not escaped")
	}
	if strings.Count(b.String(), `dx="-10" text-anchor="end"`) != 1 {
		t.Errorf("the refused claim at the end has no label on its left")
	}
	if err := Write(&b, Report{}); !errors.Is(err, ErrNoTrace) {
		t.Errorf("Write of an empty report: %v, want ErrNoTrace", err)
	}
	if err := WriteFile(filepath.Join(t.TempDir(), "no", "such", "dir.html"), synthetic()); err == nil || errors.Is(err, os.ErrExist) {
		t.Errorf("WriteFile into a missing directory: %v", err)
	}
}
