// Package timeline renders a harness run (workrouter demo, workrouter
// chaos) as one self-contained HTML file: inline SVG, CSS and a few lines
// of JavaScript, nothing fetched, readable from disk. Per partition a lane
// shows its owners' tenures as bands (worker, member and epoch on the band,
// a colour per member), claims as ticks, every refused stale write as a red
// mark at the moment it was refused with the refused token beside it, and
// dead letters as their own marks; the faults are markers over the lanes
// with their kind; under the lanes, the applied rate and the lag over time;
// above them, the summary table with the checker's count of each
// invariant. Hovering a mark shows its event.
//
// It is built from the same typed values the text output uses (the
// harness's Summary or Result, its cluster.Trace of the workers' events and
// of the faults counted, the checker's invariants.Violations), never from
// log text. Marks carry data attributes (data-kind="stale", "fault",
// "dead-letter", "claim", "tenure"; data-partition on each lane; the
// summary's cells data-invariant, data-fault-count, data-figure) that tests
// count in a browser.
package timeline

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/eventlog"
	"github.com/workrouter/workrouter/internal/invariants"
)

// Report is what the page shows.
type Report struct {
	// Title names the run ("workrouter demo"); Settings describe it (seed,
	// sink, workers…); Final is its final line and OK whether it passed.
	Title    string
	Settings string
	Final    string
	OK       bool
	// Faults counts the faults by kind, in the table's order; a negative
	// count is a kind not requested ("-").
	Faults []Count
	// Figures are the run's other figures (commands produced and applied,
	// stale writes rejected…), in order.
	Figures []Figure
	// Invariants are the checker's counts.
	Invariants invariants.Violations
	// Notes are examples of the violations found.
	Notes []string
	// Trace is the run's typed events and faults.
	Trace cluster.Trace
	// Lines are the run's text timeline, shown folded at the end.
	Lines []string
}

// Count is one kind's count.
type Count struct {
	Kind string
	N    int
}

// Figure is one row of the summary: its key (a data-figure attribute, the
// JSON name where there is one), its label and its value.
type Figure struct {
	Key, Label, Value string
}

// ErrNoTrace is matched by the error Write returns for a report whose
// trace has no time span (the run stopped before it started).
var ErrNoTrace = errors.New("timeline: the run has no trace to draw")

//go:embed report.html.tmpl
var pageText string

// page is parsed once per Write: templates are cheap, and no package
// state is kept.
func page() (*template.Template, error) {
	return template.New("report").Funcs(template.FuncMap{
		"f1": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	}).Parse(pageText)
}

// WriteFile writes the report to path (created or truncated). Like Write,
// it keeps no state and may be called from any goroutine.
func WriteFile(path string, r Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	bw := bufio.NewWriter(f)
	if err := Write(bw, r); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("timeline: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("timeline: writing %s: %w", path, err)
	}
	return nil
}

// Write renders the report as HTML to w; it may be called from any
// goroutine (each call parses its own template).
func Write(w io.Writer, r Report) error {
	if !r.Trace.End.After(r.Trace.Start) {
		return ErrNoTrace
	}
	t, err := page()
	if err != nil {
		return fmt.Errorf("timeline: template: %w", err)
	}
	if err := t.Execute(w, layout(r)); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	return nil
}

// Geometry of the page's SVG, in its user units (pixels at 100%).
const (
	left     = 70.0   // lane labels
	plotW    = 1180.0 // the time axis
	laneH    = 30.0
	laneGap  = 8.0
	faultRow = 18.0
	chartH   = 70.0
)

// view is the template's data: the report and its drawn marks.
type view struct {
	Report
	Width, Height float64
	Axis          []tick
	FaultTop      float64
	FaultMarks    []faultMark
	LanesTop      float64
	Lanes         []lane
	Members       []member
	Rate, Lag     chart
	Stale         int
	DeadLetters   int
	FaultsDrawn   int
	Outside       int // events of a partition beyond the topic's, drawn on no lane
	Duration      string
}

type tick struct {
	X     float64
	Label string
}

type faultMark struct {
	Kind       string
	X, Y, W    float64
	ShadeY     float64
	ShadeH     float64
	Colour     string
	Label      string
	Tip        string
	ShowLabel  bool
	LabelWidth float64
}

type lane struct {
	Partition int32
	Y         float64
	Mid       float64
	Bands     []band
	Claims    []mark
	Stale     []mark
	Dead      []mark
}

type band struct {
	X, W    float64
	Colour  string
	Label   string
	Tip     string
	Member  string
	Epoch   int32
	HasText bool
}

type mark struct {
	X     float64
	Label string
	Tip   string
	Epoch int32
	// LabelLeft puts the label on the mark's left: it would overflow the
	// page on its right.
	LabelLeft bool
}

type member struct {
	Colour, Name, ID string
}

type chart struct {
	Title   string
	Top     float64
	Path    string // an SVG path in the chart's box
	Max     string
	Last    string
	Empty   bool
	Samples int
}

// layout computes every mark's position.
func layout(r Report) view {
	tr := r.Trace
	span := tr.End.Sub(tr.Start)
	x := func(t time.Time) float64 {
		d := t.Sub(tr.Start)
		d = max(0, min(d, span))
		return left + plotW*float64(d)/float64(span)
	}
	v := view{Report: r, Width: left + plotW + 20, Duration: span.Round(100 * time.Millisecond).String()}

	// Axis: a tick every 1, 2, 5, 10… seconds, about 10 of them.
	step := niceStep(span.Seconds() / 10)
	for s := 0.0; s <= span.Seconds()+1e-9; s += step {
		v.Axis = append(v.Axis, tick{X: left + plotW*s/span.Seconds(), Label: strconv.FormatFloat(s, 'f', -1, 64) + "s"})
	}

	// Faults, packed in rows so that they do not overlap.
	var rowEnds []float64
	type placed struct {
		f   cluster.FaultSpan
		row int
	}
	var fs []placed
	for _, f := range tr.Faults {
		x0, x1 := x(f.Start), max(x(f.End), x(f.Start)+4)
		row := -1
		for i, e := range rowEnds {
			if e+4 <= x0 {
				row = i
				break
			}
		}
		if row < 0 {
			if len(rowEnds) < 3 {
				rowEnds = append(rowEnds, 0)
				row = len(rowEnds) - 1
			} else {
				row = len(rowEnds) - 1 // the last row overlaps
			}
		}
		rowEnds[row] = max(rowEnds[row], x1+float64(len(f.Kind))*6)
		fs = append(fs, placed{f, row})
	}
	rows := max(1, len(rowEnds))
	v.FaultTop = 34
	v.LanesTop = v.FaultTop + float64(rows)*faultRow + 10

	parts := tr.Partitions
	for _, w := range tr.Workers {
		for _, rec := range w.Records {
			if rec.Partition >= parts && drawn(rec.Kind) {
				v.Outside++
			}
		}
	}
	lanesH := float64(parts) * (laneH + laneGap)
	for _, p := range fs {
		f := p.f
		x0, x1 := x(f.Start), x(f.End)
		label := f.Kind
		tip := "fault " + f.Kind
		if f.Victim != "" {
			tip += " on " + f.Victim
			label += " " + f.Victim
		}
		tip += fmt.Sprintf(", %s to %s (%s)", since(tr.Start, f.Start), since(tr.Start, f.End), f.End.Sub(f.Start).Round(time.Millisecond))
		if d := f.Detail; d != "" {
			tip += ": " + d
		} else if d := faultText[f.Kind]; d != "" {
			tip += ": " + d
		}
		fm := faultMark{Kind: f.Kind, X: x0, Y: v.FaultTop + float64(p.row)*faultRow, W: max(x1-x0, 4),
			ShadeY: v.LanesTop, ShadeH: lanesH, Colour: faultColour(f.Kind), Label: label, Tip: tip}
		v.FaultMarks = append(v.FaultMarks, fm)
	}
	for i := range v.FaultMarks {
		// A label fits up to the next mark of its row.
		fm := &v.FaultMarks[i]
		room := v.Width - fm.X - fm.W
		for j := i + 1; j < len(v.FaultMarks); j++ {
			if v.FaultMarks[j].Y == fm.Y {
				room = v.FaultMarks[j].X - fm.X - fm.W
				break
			}
		}
		fm.ShowLabel = room >= float64(len(fm.Label))*5.6+6
		if !fm.ShowLabel && room >= float64(len(fm.Kind))*5.6+6 {
			fm.Label, fm.ShowLabel = fm.Kind, true
		}
	}
	v.FaultsDrawn = len(v.FaultMarks)

	// Lanes: tenures from the claims to their revocation, loss or fence
	// (or the next claim of the partition, or the end of the run).
	colours := map[string]string{}
	colourOf := func(memberID, name string) string {
		if c, ok := colours[memberID]; ok {
			return c
		}
		c := hslHex(math.Mod(float64(len(colours))*137.508+200, 360), 0.62, 0.62)
		colours[memberID] = c
		short := memberID
		if len(short) > 6 {
			short = "…" + short[len(short)-5:]
		}
		v.Members = append(v.Members, member{Colour: c, Name: name + " " + short, ID: memberID})
		return c
	}
	type tenure struct {
		worker     string
		member     string
		epoch      int32
		start, end time.Time
		next       int64
		why        string
	}
	byPart := map[int32][]*tenure{}
	v.Lanes = make([]lane, parts)
	for p := range parts {
		y := v.LanesTop + float64(p)*(laneH+laneGap)
		v.Lanes[p] = lane{Partition: p, Y: y, Mid: y + laneH/2}
	}
	onLane := func(p int32) *lane {
		if p < 0 || p >= parts {
			return nil
		}
		return &v.Lanes[p]
	}
	for _, w := range tr.Workers {
		open := map[int32]*tenure{}
		for _, rec := range w.Records {
			ln := onLane(rec.Partition)
			if ln == nil {
				continue
			}
			switch rec.Kind {
			case consumer.KindClaimed:
				t := &tenure{worker: w.Name, member: rec.Member, epoch: rec.Epoch, start: rec.Time, end: tr.End, next: rec.NextOffset, why: "still held at the end of the run"}
				open[rec.Partition] = t
				byPart[rec.Partition] = append(byPart[rec.Partition], t)
				ln.Claims = append(ln.Claims, mark{X: x(rec.Time), Epoch: rec.Epoch,
					Tip: fmt.Sprintf("%s claimed partition %d at epoch %d (member %s), from offset %d, at %s", w.Name, rec.Partition, rec.Epoch, rec.Member, rec.NextOffset, since(tr.Start, rec.Time))})
			case consumer.KindRevoked, consumer.KindLost, consumer.KindFenced:
				if t := open[rec.Partition]; t != nil && t.epoch == rec.Epoch {
					t.end, t.why = rec.Time, rec.Kind+" at "+since(tr.Start, rec.Time)
					delete(open, rec.Partition)
				}
			}
			switch rec.Kind {
			case consumer.KindFenced:
				what := "write"
				if rec.Op != "" {
					what = rec.Op
				}
				label := fmt.Sprintf("e%d %s", rec.Epoch, w.Name)
				ln.Stale = append(ln.Stale, mark{X: x(rec.Time), Epoch: rec.Epoch, Label: label,
					LabelLeft: x(rec.Time)+7+float64(len(label))*6.2 > v.Width,
					Tip: fmt.Sprintf("REFUSED stale %s by %s at %s: token partition %d epoch %d member %s (offset %d, %d records): %s",
						what, w.Name, since(tr.Start, rec.Time), rec.Partition, rec.Epoch, rec.Member, rec.FirstOffset, rec.Records, rec.Err)})
				v.Stale++
			case consumer.KindDeadLettered:
				ln.Dead = append(ln.Dead, mark{X: x(rec.Time), Epoch: rec.Epoch,
					Tip: fmt.Sprintf("dead letter by %s at %s: partition %d offset %d, reason %s after %d attempts: %s",
						w.Name, since(tr.Start, rec.Time), rec.Partition, rec.FirstOffset, rec.Cause, rec.Attempt, rec.Err)})
				v.DeadLetters++
			}
		}
	}
	for p, ts := range byPart {
		sort.SliceStable(ts, func(i, j int) bool { return ts[i].start.Before(ts[j].start) })
		for i, t := range ts {
			end := t.end
			// A zombie believes it holds the partition until it is fenced:
			// the band ends where a newer claim began.
			if i+1 < len(ts) && ts[i+1].start.Before(end) {
				end = ts[i+1].start
			}
			x0, x1 := x(t.start), x(end)
			b := band{X: x0, W: max(x1-x0, 1), Colour: colourOf(t.member, t.worker), Member: t.member, Epoch: t.epoch,
				Tip: fmt.Sprintf("%s (member %s) owned partition %d at epoch %d from %s, resuming at offset %d; %s",
					t.worker, t.member, p, t.epoch, since(tr.Start, t.start), t.next, t.why)}
			switch w := x1 - x0; {
			case w >= float64(len(t.worker)+4)*6.5:
				b.Label, b.HasText = fmt.Sprintf("%s e%d", t.worker, t.epoch), true
			case w >= 22:
				b.Label, b.HasText = fmt.Sprintf("e%d", t.epoch), true
			}
			v.Lanes[p].Bands = append(v.Lanes[p].Bands, b)
		}
	}

	// Charts: applied records per second, and the workers' lag reports.
	top := v.LanesTop + lanesH + 16
	v.Rate = rateChart(tr, x, span, top)
	v.Lag = lagChart(tr, x, top+chartH+34)
	v.Height = v.Lag.Top + chartH + 30
	return v
}

// drawn reports whether a record of kind is drawn on a lane.
func drawn(kind string) bool {
	switch kind {
	case consumer.KindClaimed, consumer.KindFenced, consumer.KindDeadLettered:
		return true
	}
	return false
}

// rateChart sums the applied batches' records in about 120 buckets.
func rateChart(tr cluster.Trace, x func(time.Time) float64, span time.Duration, top float64) chart {
	c := chart{Title: "records applied per second", Top: top}
	bucket := max(50*time.Millisecond, span/60)
	n := int(span/bucket) + 1
	sums := make([]float64, n)
	for _, w := range tr.Workers {
		for _, a := range w.Applied {
			i := int(a.Time.Sub(tr.Start) / bucket)
			if i < 0 || i >= n {
				continue
			}
			sums[i] += float64(a.Applied)
			c.Samples++
		}
	}
	peak := 0.0
	for i := range sums {
		sums[i] /= bucket.Seconds()
		peak = max(peak, sums[i])
	}
	c.Empty = c.Samples == 0
	if c.Empty {
		return c
	}
	path := fmt.Sprintf("M%.1f %.1f", left, top+chartH)
	for i, s := range sums {
		x0 := x(tr.Start.Add(time.Duration(i) * bucket))
		x1 := x(tr.Start.Add(time.Duration(i+1) * bucket))
		y := top + chartH - chartH*s/peak
		path += fmt.Sprintf(" L%.1f %.1f L%.1f %.1f", x0, y, x1, y)
	}
	path += fmt.Sprintf(" L%.1f %.1f Z", left+plotW, top+chartH)
	c.Path, c.Max = path, fmt.Sprintf("%.0f/s", peak)
	return c
}

// lagChart sums, after each lag report, the latest lag of every partition
// (whichever worker reported it last).
func lagChart(tr cluster.Trace, x func(time.Time) float64, top float64) chart {
	c := chart{Title: "lag (records not yet applied, sum over partitions, from the workers' lag events)", Top: top}
	var reps []eventlog.Record
	for _, w := range tr.Workers {
		for _, r := range w.Records {
			if r.Kind == consumer.KindLag {
				reps = append(reps, r)
			}
		}
	}
	slices.SortStableFunc(reps, func(a, b eventlog.Record) int { return a.Time.Compare(b.Time) })
	c.Samples = len(reps)
	c.Empty = len(reps) == 0
	if c.Empty {
		return c
	}
	latest := map[int32]int64{}
	type pt struct {
		x   float64
		sum int64
	}
	var pts []pt
	var peak int64
	for _, r := range reps {
		for p, l := range r.Offsets {
			latest[p] = l
		}
		var sum int64
		for _, l := range latest {
			sum += l
		}
		pts = append(pts, pt{x(r.Time), sum})
		peak = max(peak, sum)
	}
	scale := float64(max(peak, 1))
	path := ""
	for i, p := range pts {
		y := top + chartH - chartH*float64(p.sum)/scale
		if i == 0 {
			path = fmt.Sprintf("M%.1f %.1f", p.x, y)
		} else {
			path += fmt.Sprintf(" H%.1f V%.1f", p.x, y)
		}
	}
	c.Path, c.Max = path, strconv.FormatInt(peak, 10)
	c.Last = fmt.Sprintf("%d at %s", pts[len(pts)-1].sum, since(tr.Start, reps[len(reps)-1].Time))
	return c
}

// since formats t as seconds since the run's start.
func since(start, t time.Time) string {
	return strconv.FormatFloat(t.Sub(start).Seconds(), 'f', 2, 64) + "s"
}

// niceStep rounds s up to 1, 2 or 5 times a power of ten.
func niceStep(s float64) float64 {
	if s <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(s)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= s {
			return m * p
		}
	}
	return 10 * p
}

// faultText describes each kind of fault (package chaos's documentation).
var faultText = map[string]string{
	"pause":          "SIGSTOP past the session timeout, then SIGCONT",
	"kill":           "SIGKILL, then a new process in its place",
	"heartbeat":      "its heartbeats held back at the broker for 1.5x the session timeout",
	"broker-conn":    "its broker connections closed or stalled",
	"sink-conn":      "its sink connection terminated or its transaction cancelled mid-way",
	"coordinator":    "its heartbeats and commits answered NOT_COORDINATOR, REBALANCE_IN_PROGRESS or not at all",
	"poison":         "poison records written between the good commands",
	"broker-restart": "the broker process SIGKILLed and started again on its data dir",
	"resend":         "acknowledged commands sent again with their command IDs",
	"churn":          "an extra member joined and left",
}

// faultColour is each kind's colour.
func faultColour(kind string) string {
	switch kind {
	case "pause":
		return "#e8a33d"
	case "kill":
		return "#7a3b2e"
	case "heartbeat":
		return "#d4658f"
	case "broker-conn":
		return "#5b8def"
	case "sink-conn":
		return "#2f9e8f"
	case "coordinator":
		return "#8d6cd1"
	case "poison":
		return "#6b8e23"
	case "broker-restart":
		return "#444444"
	case "resend":
		return "#b5892f"
	case "churn":
		return "#9aa0a6"
	}
	return "#888888"
}

// hslHex converts a colour from HSL (h in degrees, s and l in [0, 1]) to
// "#rrggbb".
func hslHex(h, s, l float64) string {
	c := (1 - math.Abs(2*l-1)) * s
	hp := h / 60
	x := c * (1 - math.Abs(math.Mod(hp, 2)-1))
	var r, g, b float64
	switch {
	case hp < 1:
		r, g = c, x
	case hp < 2:
		r, g = x, c
	case hp < 3:
		g, b = c, x
	case hp < 4:
		g, b = x, c
	case hp < 5:
		r, b = x, c
	default:
		r, b = c, x
	}
	m := l - c/2
	to := func(v float64) int { return int(math.Round((v + m) * 255)) }
	return fmt.Sprintf("#%02x%02x%02x", to(r), to(g), to(b))
}
