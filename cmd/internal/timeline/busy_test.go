package timeline

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/cmd/internal/timeline/browsertest"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/eventlog"
)

// busy is a run like a long chaos run's: 12 partitions and 14 worker
// processes (w1…w12, then w3 and w7 again after being killed), most of
// which rejoin under a new member ID, tenures of a few hundred
// milliseconds among long ones, refused writes and dead letters on bands
// of every process, and 12 faults, some of them overlapping and some very
// short.
func busy() Report {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const parts, span = 12, 60000
	type proc struct {
		name     string
		from, to int // ms alive
		members  int // member IDs over its life (rejoins + 1)
	}
	procs := []proc{
		{"w1", 0, span, 3}, {"w2", 0, span, 2}, {"w3", 0, 20000, 2}, {"w4", 0, span, 3},
		{"w5", 0, span, 2}, {"w6", 0, span, 1}, {"w7", 0, 35000, 2}, {"w8", 0, span, 2},
		{"w9", 0, span, 3}, {"w10", 0, span, 2}, {"w11", 0, span, 1}, {"w12", 0, span, 2},
		{"w3", 21000, span, 2}, {"w7", 36000, span, 1},
	}
	var tr cluster.Trace
	tr.Start, tr.End, tr.Topic, tr.Partitions = t0, at(span), "t", parts
	epoch := int32(0)
	for i, p := range procs {
		w := cluster.WorkerTrace{Name: p.name}
		life := p.to - p.from
		for m := range p.members {
			member := fmt.Sprintf("%s-%d-%08x", p.name, i, 0xabc000+m)
			// Each member claims a partition for a share of the
			// process's life; the partitions rotate so that every lane
			// sees many owners. The first member of every other process
			// also holds a 300 ms tenure.
			part := int32((i + m*5) % parts)
			start := p.from + life*m/p.members + 50
			end := p.from + life*(m+1)/p.members - 50
			epoch++
			if m == 0 && i%2 == 0 {
				short := int32((i + 7) % parts)
				w.Records = append(w.Records,
					eventlog.Record{Time: at(start), Kind: consumer.KindClaimed, Partition: short, Epoch: epoch, Member: member},
					eventlog.Record{Time: at(start + 300), Kind: consumer.KindRevoked, Partition: short, Epoch: epoch, Member: member})
				epoch++
			}
			w.Records = append(w.Records, eventlog.Record{Time: at(start), Kind: consumer.KindClaimed, Partition: part, Epoch: epoch, Member: member})
			mid := (start + end) / 2
			switch (i + m) % 3 {
			case 0:
				w.Records = append(w.Records, eventlog.Record{Time: at(mid), Kind: consumer.KindFenced, Op: "apply", Partition: part, Epoch: epoch, Member: member, Err: "stale"})
			case 1:
				w.Records = append(w.Records, eventlog.Record{Time: at(mid + 1500), Kind: consumer.KindDeadLettered, Partition: part, Epoch: epoch, Member: member, Cause: "undecodable"})
			}
			w.Records = append(w.Records, eventlog.Record{Time: at(end), Kind: consumer.KindRevoked, Partition: part, Epoch: epoch, Member: member})
		}
		tr.Workers = append(tr.Workers, w)
	}
	f := func(kind, victim string, from, to int) cluster.FaultSpan {
		return cluster.FaultSpan{Kind: kind, Victim: victim, Start: at(from), End: at(to)}
	}
	tr.Faults = []cluster.FaultSpan{
		f("churn", "c1", 1000, 4000), f("pause", "w2", 2000, 5000), f("heartbeat", "w5", 2100, 2200),
		f("broker-conn", "w9", 2150, 2160), f("kill", "w3", 20000, 20010), f("coordinator", "w4", 20005, 26000),
		f("churn", "c2", 21000, 22500), f("poison", "", 30000, 30020), f("sink-conn", "w11", 30010, 31000),
		f("kill", "w7", 35000, 35005), f("broker-restart", "", 45000, 47000), f("resend", "", 45500, 45600),
	}
	return Report{Title: "busy run", Final: "chaos: ok", OK: true, Trace: tr}
}

// colourDistance is the Euclidean distance of two "#rrggbb" colours in
// RGB (0 to 441).
func colourDistance(t *testing.T, a, b string) float64 {
	t.Helper()
	rgb := func(s string) [3]float64 {
		var c [3]float64
		if len(s) != 7 || s[0] != '#' {
			t.Fatalf("colour %q is not #rrggbb", s)
		}
		for i := range c {
			v, err := strconv.ParseUint(s[1+2*i:3+2*i], 16, 8)
			if err != nil {
				t.Fatalf("colour %q: %v", s, err)
			}
			c[i] = float64(v)
		}
		return c
	}
	x, y := rgb(a), rgb(b)
	d := 0.0
	for i := range x {
		d += (x[i] - y[i]) * (x[i] - y[i])
	}
	return math.Sqrt(d)
}

// The marks' colours: a refused write is red, a dead letter purple.
const (
	markRed    = staleColour
	markPurple = deadColour
)

// TestBusyRunReadable: with 14 processes that rejoin, a replacement of
// the same name and a dozen faults, the legend has one entry per process
// (the replacement told apart), every process its own colour, none near
// the marks' red or purple nor grey; faults are grey and each labelled
// with its kind and victim, in rows where neither bars nor labels
// overlap; every tenure is labelled with its process and epoch, on its
// band or under the lane.
func TestBusyRunReadable(t *testing.T) {
	r := busy()
	v := layout(r)
	if len(v.Members) != len(r.Trace.Workers) {
		names := make([]string, 0, len(v.Members))
		for _, m := range v.Members {
			names = append(names, m.Name)
		}
		t.Errorf("legend: %d entries for %d processes: %q", len(v.Members), len(r.Trace.Workers), names)
	}
	seen := map[string]string{}
	names := map[string]bool{}
	for _, m := range v.Members {
		if other, ok := seen[m.Colour]; ok {
			t.Errorf("legend: %s and %s share colour %s", other, m.Name, m.Colour)
		}
		seen[m.Colour] = m.Name
		names[m.Name] = true
		for _, mark := range []string{markRed, markPurple} {
			if d := colourDistance(t, m.Colour, mark); d < 90 {
				t.Errorf("legend: %s's colour %s is %.0f from the mark colour %s", m.Name, m.Colour, d, mark)
			}
		}
		if c := m.Colour; c[1:3] == c[3:5] && c[3:5] == c[5:7] {
			t.Errorf("legend: %s is grey (%s), the faults' colour", m.Name, c)
		}
	}
	for _, want := range []string{"w3", "w3 #2", "w7", "w7 #2", "w12"} {
		if !names[want] {
			t.Errorf("legend: no entry %q in %v", want, names)
		}
	}

	// Bands and marks: a mark's colour is never its band's, and every
	// band names its process and epoch.
	for _, ln := range v.Lanes {
		for _, b := range ln.Bands {
			label := labelOf(ln, b)
			if !strings.Contains(label, "e"+strconv.Itoa(int(b.Epoch))) || !strings.HasPrefix(label, "w") {
				t.Errorf("partition %d: the band of epoch %d (%.1f px wide) is labelled %q", ln.Partition, b.Epoch, b.W, label)
			}
			for _, m := range ln.Stale {
				if m.X >= b.X && m.X <= b.X+b.W && colourDistance(t, b.Colour, markRed) < 90 {
					t.Errorf("partition %d: a refused write (red) on a band of colour %s", ln.Partition, b.Colour)
				}
			}
			for _, m := range ln.Dead {
				if m.X >= b.X && m.X <= b.X+b.W && colourDistance(t, b.Colour, markPurple) < 90 {
					t.Errorf("partition %d: a dead letter (purple) on a band of colour %s", ln.Partition, b.Colour)
				}
			}
		}
	}

	// Faults: grey, every one labelled "kind victim", no overlap in a row.
	if len(v.FaultMarks) != len(r.Trace.Faults) {
		t.Fatalf("%d fault marks for %d faults", len(v.FaultMarks), len(r.Trace.Faults))
	}
	for i, fm := range v.FaultMarks {
		f := r.Trace.Faults[i]
		if c := fm.Colour; c[1:3] != c[3:5] || c[3:5] != c[5:7] {
			t.Errorf("fault %s on %s: colour %s, want a grey", f.Kind, f.Victim, c)
		}
		want := strings.TrimSpace(f.Kind + " " + f.Victim)
		if !fm.ShowLabel || fm.Label != want {
			t.Errorf("fault %d: label %q shown %v, want %q", i, fm.Label, fm.ShowLabel, want)
		}
		for j, o := range v.FaultMarks[:i] {
			if o.Y != fm.Y {
				continue
			}
			a0, a1 := fm.extent()
			b0, b1 := o.extent()
			if a0 < b1 && b0 < a1 {
				t.Errorf("faults %d (%s, %.0f–%.0f) and %d (%s, %.0f–%.0f) overlap in their row", i, fm.Label, a0, a1, j, o.Label, b0, b1)
			}
		}
	}
}

// labelOf is the band's label as drawn: on the band, or under its lane
// ("" if neither).
func labelOf(ln lane, b band) string {
	if b.HasText {
		return b.Label
	}
	for _, u := range ln.Under {
		if u.Tip == b.Tip {
			return u.Text
		}
	}
	return ""
}

// TestBusyReportInBrowser opens the busy run's report in headless
// Chromium: one legend entry per process, each in its own colour; every
// fault labelled with its kind and victim; every refused write and dead
// letter painted on top, on a white disc, whatever band it sits on.
func TestBusyReportInBrowser(t *testing.T) {
	r := busy()
	path := filepath.Join(t.TempDir(), "busy.html")
	if err := WriteFile(path, r); err != nil {
		t.Fatal(err)
	}
	p := browsertest.Load(t, path)
	if len(p.Console) > 0 || len(p.Resources) > 0 || len(p.Lanes) != 12 {
		t.Fatalf("page: %s", p)
	}
	if len(p.Processes) != 14 {
		t.Errorf("legend: %d processes, want 14: %v", len(p.Processes), p.Processes)
	}
	colours := map[string]string{}
	for _, pr := range p.Processes {
		if other, ok := colours[pr.Colour]; ok {
			t.Errorf("legend: %s and %s are both %s", other, pr.Name, pr.Colour)
		}
		colours[pr.Colour] = pr.Name
	}
	if n := len(p.Processes); n < 14 || p.Processes[12].Name != "w3 #2" || p.Processes[13].Name != "w7 #2" {
		t.Errorf("legend: the replacements are not told apart: %v", p.Processes)
	}
	var want []string
	for _, f := range r.Trace.Faults {
		want = append(want, strings.TrimSpace(f.Kind+" "+f.Victim))
	}
	if !slices.Equal(p.FaultLabels, want) {
		t.Errorf("fault labels %q, want %q", p.FaultLabels, want)
	}
	if p.Marks["stale"]+p.Marks["dead-letter"] != len(p.MarkPaint) || len(p.MarkPaint) < 15 {
		t.Fatalf("%d marks painted of %d stale and %d dead letters", len(p.MarkPaint), p.Marks["stale"], p.Marks["dead-letter"])
	}
	onBand := 0
	for i, m := range p.MarkPaint {
		if !m.Topmost || m.Disc != "rgb(255, 255, 255)" {
			t.Errorf("mark %d (%s): topmost %v (covered by %s), disc %q: not readable on its band %q", i, m.Kind, m.Topmost, m.Cover, m.Disc, m.Band)
		}
		if m.Band != "" {
			onBand++
		}
	}
	if onBand < 10 {
		t.Errorf("only %d of the %d marks sit on a band: the check proves little", onBand, len(p.MarkPaint))
	}
}

// long is a 10-minute run with a fault every 1.5 s on average and
// hundreds of short tenures on each of 6 partitions: more than a page has
// room to label.
func long() Report {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const span = 600000
	rng := rand.New(rand.NewPCG(1, 2))
	var tr cluster.Trace
	tr.Start, tr.End, tr.Topic, tr.Partitions = t0, at(span), "t", 6
	for i := range 15 {
		tr.Workers = append(tr.Workers, cluster.WorkerTrace{Name: fmt.Sprintf("w%d", i%12+1)})
	}
	epoch := int32(0)
	for p := range int32(6) {
		ms := 0
		for ms < span {
			d := 200 + rng.IntN(3000)
			if rng.IntN(3) == 0 {
				d = 5000 + rng.IntN(20000)
			}
			w := rng.IntN(15)
			epoch++
			m := fmt.Sprintf("m%d", rng.IntN(3))
			tr.Workers[w].Records = append(tr.Workers[w].Records,
				eventlog.Record{Time: at(ms), Kind: consumer.KindClaimed, Partition: p, Epoch: epoch, Member: m},
				eventlog.Record{Time: at(ms + d), Kind: consumer.KindRevoked, Partition: p, Epoch: epoch, Member: m})
			ms += d + 100
		}
	}
	kinds := []string{"pause", "kill", "heartbeat", "churn", "broker-conn", "coordinator", "poison", "sink-conn"}
	ms := 0
	for ms < span-3000 {
		d := 10 + rng.IntN(3000)
		tr.Faults = append(tr.Faults, cluster.FaultSpan{Kind: kinds[rng.IntN(len(kinds))], Victim: fmt.Sprintf("w%d", rng.IntN(12)+1), Start: at(ms), End: at(ms + d)})
		ms += 500 + rng.IntN(2000)
	}
	return Report{Title: "long", OK: true, Trace: tr}
}

// TestLongRunLabelsBounded: in a run with more faults and short tenures
// than room, the labelled fault rows and the rows of labels under a lane
// stay bounded, no bar overlaps another in its row, and the page counts
// every fault and tenure it left unlabelled.
func TestLongRunLabelsBounded(t *testing.T) {
	v := layout(long())
	unlabelled := 0
	for i, fm := range v.FaultMarks {
		row := int((fm.Y - v.FaultTop) / faultRow)
		if fm.ShowLabel && row >= labelledRows {
			t.Errorf("fault %d labelled in row %d", i, row)
		}
		if !fm.ShowLabel {
			unlabelled++
		}
		for j, o := range v.FaultMarks[:i] {
			if o.Y == fm.Y && fm.X < o.X+o.W && o.X < fm.X+fm.W {
				t.Errorf("faults %d and %d overlap in row %d", j, i, row)
			}
		}
	}
	if unlabelled == 0 || unlabelled != v.FaultsUnlabelled {
		t.Errorf("%d faults unlabelled, the page says %d", unlabelled, v.FaultsUnlabelled)
	}
	bare := 0
	for _, ln := range v.Lanes {
		for _, b := range ln.Bands {
			if labelOf(ln, b) == "" {
				bare++
			}
		}
		for _, u := range ln.Under {
			if row := (u.Y - ln.Y - laneH - 1) / underRow; row >= underRows {
				t.Errorf("partition %d: a label in row %.0f under the lane", ln.Partition, row)
			}
		}
	}
	if bare == 0 || bare != v.TenuresUnlabelled {
		t.Errorf("%d tenures unlabelled, the page says %d", bare, v.TenuresUnlabelled)
	}
}
