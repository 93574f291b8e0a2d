// Package timeline renders a harness run (workrouter demo, workrouter
// chaos) as one self-contained HTML file: inline SVG, CSS and a few lines
// of JavaScript, nothing fetched, readable from disk. Per partition a lane
// shows its owners' tenures as bands, one colour per worker process (a
// process that rejoins under a new member ID keeps its colour and its one
// legend entry; a replacement started under a used name is "w3 #2"), each
// labelled with its process and epoch on the band or, when too short,
// under the lane; claims as ticks; every refused stale write as a red
// cross at the moment it was refused with the refused token beside it,
// and dead letters as purple diamonds, both on a white disc so that they
// read on any band (no process is drawn in red, purple or grey). The
// faults are grey bars over the lanes, each labelled with its kind and
// victim, in as many rows as they need not to overlap; a network fault
// (a partition: the victim's links cut, slowed or one-way) is hatched
// grey and white, over lanes shaded with hatching, and its label says
// what it did to which links ("partition-broker (broker links cut) w1"),
// so that it reads apart from a pause or a kill; under the lanes,
// the applied rate and the lag over time; above them, the summary table
// with the checker's count of each invariant. Hovering a mark shows its
// event.
//
// It is built from the same typed values the text output uses (the
// harness's Summary or Result, its cluster.Trace of the workers' events and
// of the faults counted, the checker's invariants.Violations), never from
// log text. Marks carry data attributes (data-kind="stale", "fault",
// "dead-letter", "claim", "tenure", "under-label"; data-fault with the
// fault's kind, and data-network with what a network fault did; data-partition on each
// lane; data-process on the legend's entries; the summary's cells
// data-invariant, data-fault-count, data-figure) that tests count in a
// browser.
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
	"strings"
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
	underRow = 13.0 // a row of short tenures' labels under a lane
	faultRow = 18.0
	chartH   = 70.0
	charW    = 5.8 // about the width of a character of the 10px labels
	// labelledRows is how many rows of faults are filled with labelled
	// bars; past them (a long run), a fault goes unlabelled in the first
	// row with room for its bar. underRows is how many rows of labels a
	// lane may have under it; past them a short tenure goes unlabelled.
	// Both are counted on the page.
	labelledRows = 6
	underRows    = 3
)

// The marks' colours. No process is drawn in them (see palette), and the
// marks sit on a white disc, so that they read on any band.
const (
	staleColour = "#c62828" // a refused write: a red cross
	deadColour  = "#6a1b9a" // a dead letter: a purple diamond
	faultColour = "#6e6e6e" // a fault: a grey bar, labelled
	faultShade  = "#9e9e9e" // its shade over the lanes
)

// palette is the processes' colours, in the order processes get them:
// blues, oranges, greens, yellows, teals and browns at three lightnesses,
// ordered so that consecutive processes differ in hue; no red, purple or
// grey (the marks' and faults' colours).
var palette = []string{
	"#5b8fc7", "#f28e2b", "#59a14f", "#f5e15b", "#17becf", "#9d7660",
	"#a0cbe8", "#ffbe7d", "#8cd17d", "#1f5f8b", "#b6992d", "#86bcb6",
	"#00695c", "#d7b5a6", "#2f6b3a", "#bcbd22", "#8c6d1f", "#499894",
}

// textOn is the colour of text on a band of colour c ("#rrggbb"): white
// on the dark ones, near black on the others.
func textOn(c string) string {
	var r, g, b int
	if _, err := fmt.Sscanf(c, "#%02x%02x%02x", &r, &g, &b); err != nil {
		return "#111"
	}
	if 0.2126*float64(r)+0.7152*float64(g)+0.0722*float64(b) < 115 {
		return "#fff"
	}
	return "#111"
}

// colourOf is the colour of the i-th process.
func colourOf(i int) string {
	if i < len(palette) {
		return palette[i]
	}
	// Beyond the palette: hues between orange and blue, away from red
	// and purple, at two lightnesses.
	h := 30 + math.Mod(float64(i-len(palette))*67, 210)
	return hslHex(h, 0.55, 0.58+0.12*float64(i%2))
}

// view is the template's data: the report and its drawn marks.
type view struct {
	Report
	Width, Height float64
	Axis          []tick
	FaultTop      float64
	FaultMarks    []faultMark
	LanesTop      float64
	LanesH        float64
	Lanes         []lane
	Members       []member // one per worker process, for the legend
	Rate, Lag     chart
	Stale         int
	DeadLetters   int
	FaultsDrawn   int
	Outside       int // events of a partition beyond the topic's, drawn on no lane
	NetworkFaults int // faults drawn hatched (networkFaults), for the legend
	Duration      string
	// FaultsUnlabelled and TenuresUnlabelled count the faults and the
	// short tenures left without a label for lack of room (a long run).
	FaultsUnlabelled, TenuresUnlabelled int
	// the marks' colours, for the template
	StaleColour, DeadColour, FaultColour, FaultShade string
}

type tick struct {
	X     float64
	Label string
}

type faultMark struct {
	Kind string
	// Network is what a network fault did to its victim's links ("broker
	// links cut"); "" for every other fault. A network fault is drawn
	// hatched.
	Network string
	X, Y, W float64
	ShadeY  float64
	ShadeH  float64
	Colour  string
	Label   string
	Tip     string
	// ShowLabel: the fault is labelled with its kind and victim, in a
	// row where the label overlaps nothing (every fault is, unless a long
	// run fills labelledRows). LabelLeft puts the label on the bar's
	// left: it would overflow the page on its right.
	ShowLabel bool
	LabelLeft bool
}

// extent is where the bar and its label lie on the x axis.
func (fm faultMark) extent() (float64, float64) {
	w := textWidth(fm.Label) + 3
	if fm.LabelLeft {
		return fm.X - w, fm.X + fm.W
	}
	return fm.X, fm.X + fm.W + w
}

// textWidth estimates the width of a 10px label.
func textWidth(s string) float64 { return float64(len([]rune(s))) * charW }

type lane struct {
	Partition int32
	Y         float64
	Mid       float64
	Bands     []band
	Under     []underLabel
	Claims    []mark
	Stale     []mark
	Dead      []mark
	rows      int // rows of labels under the lane
}

type band struct {
	X, W    float64
	Colour  string
	Text    string // the label's colour on the band
	Label   string // its process and epoch ("w3 #2 e7")
	Tip     string
	Member  string
	Epoch   int32
	HasText bool // the label fits on the band; else it is under the lane
}

// underLabel is the label of a band too narrow for it, in a row under its
// lane: a swatch of the band's colour and the band's label, from the
// band's start (or ending at the band's end, near the page's right edge).
type underLabel struct {
	Y                     float64 // its row's top
	SwatchX, SwatchY      float64
	TextX                 float64
	TextEnd               bool    // the text ends at TextX (near the right edge)
	LineX, LineY1, LineY2 float64 // a tick from the band down to the label
	Text                  string
	Colour                string
	Tip                   string
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

// member is one worker process in the legend: its colour, its name (the
// harness's, with "#2", "#3"… for a process started under a name already
// used, such as a killed worker's replacement) and the member IDs it had
// in the group (one per join).
type member struct {
	Colour, Name, IDs string
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
	v := view{Report: r, Width: left + plotW + 20, Duration: span.Round(100 * time.Millisecond).String(),
		StaleColour: staleColour, DeadColour: deadColour, FaultColour: faultColour, FaultShade: faultShade}

	// Axis: a tick every 1, 2, 5, 10… seconds, about 10 of them.
	step := niceStep(span.Seconds() / 10)
	for s := 0.0; s <= span.Seconds()+1e-9; s += step {
		v.Axis = append(v.Axis, tick{X: left + plotW*s/span.Seconds(), Label: strconv.FormatFloat(s, 'f', -1, 64) + "s"})
	}

	// Processes: one legend entry and one colour each, whatever member
	// IDs they joined under. A name used again (a replacement) is told
	// apart by its rank.
	procName := make([]string, len(tr.Workers))
	rank := map[string]int{}
	for i, w := range tr.Workers {
		rank[w.Name]++
		procName[i] = w.Name
		if rank[w.Name] > 1 {
			procName[i] = fmt.Sprintf("%s #%d", w.Name, rank[w.Name])
		}
		var ids []string
		for _, rec := range w.Records {
			if rec.Member != "" && !slices.Contains(ids, rec.Member) {
				ids = append(ids, rec.Member)
			}
		}
		v.Members = append(v.Members, member{Colour: colourOf(i), Name: procName[i], IDs: strings.Join(ids, ", ")})
	}

	// Faults: grey bars labelled with their kind and victim, packed in
	// rows so that no bar or label overlaps another.
	var rowEnds []float64
	for _, f := range tr.Faults {
		x0, x1 := x(f.Start), max(x(f.End), x(f.Start)+3)
		label := f.Kind
		tip := "fault " + f.Kind
		network := networkFaults[f.Kind]
		if network != "" {
			label += " (" + network + ")"
			tip = "network fault " + f.Kind + " (" + network + ")"
			v.NetworkFaults++
		}
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
		fm := faultMark{Kind: f.Kind, Network: network, X: x0, W: x1 - x0, Colour: faultColour, Label: label, Tip: tip, ShowLabel: true}
		if _, e1 := fm.extent(); e1 > v.Width-2 {
			fm.LabelLeft = true
		}
		// The first row where the bar and its label fit, among the
		// first labelledRows (a new one while there are fewer); past
		// them, unlabelled (counted; the tooltip has it all), the first
		// row where the bar alone fits, or a new one.
		e0, e1 := fm.extent()
		row := firstFit(rowEnds[:min(len(rowEnds), labelledRows)], e0, 6)
		if row < 0 && len(rowEnds) >= labelledRows {
			fm.ShowLabel, fm.LabelLeft = false, false
			e1 = fm.X + fm.W
			v.FaultsUnlabelled++
			row = firstFit(rowEnds, fm.X, 2)
		}
		if row < 0 {
			rowEnds = append(rowEnds, 0)
			row = len(rowEnds) - 1
		}
		rowEnds[row] = e1
		fm.Y = float64(row)
		v.FaultMarks = append(v.FaultMarks, fm)
	}
	v.FaultTop = 34
	v.LanesTop = v.FaultTop + float64(max(1, len(rowEnds)))*faultRow + 10
	for i := range v.FaultMarks {
		v.FaultMarks[i].Y = v.FaultTop + v.FaultMarks[i].Y*faultRow
	}
	v.FaultsDrawn = len(v.FaultMarks)

	parts := tr.Partitions
	for _, w := range tr.Workers {
		for _, rec := range w.Records {
			if rec.Partition >= parts && drawn(rec.Kind) {
				v.Outside++
			}
		}
	}

	// Lanes: tenures from the claims to their revocation, loss or fence
	// (or the next claim of the partition, or the end of the run).
	type tenure struct {
		proc       int
		member     string
		epoch      int32
		start, end time.Time
		next       int64
		why        string
	}
	byPart := map[int32][]*tenure{}
	v.Lanes = make([]lane, parts)
	for p := range parts {
		v.Lanes[p] = lane{Partition: p}
	}
	onLane := func(p int32) *lane {
		if p < 0 || p >= parts {
			return nil
		}
		return &v.Lanes[p]
	}
	for i, w := range tr.Workers {
		name := procName[i]
		open := map[int32]*tenure{}
		for _, rec := range w.Records {
			ln := onLane(rec.Partition)
			if ln == nil {
				continue
			}
			switch rec.Kind {
			case consumer.KindClaimed:
				t := &tenure{proc: i, member: rec.Member, epoch: rec.Epoch, start: rec.Time, end: tr.End, next: rec.NextOffset, why: "still held at the end of the run"}
				open[rec.Partition] = t
				byPart[rec.Partition] = append(byPart[rec.Partition], t)
				ln.Claims = append(ln.Claims, mark{X: x(rec.Time), Epoch: rec.Epoch,
					Tip: fmt.Sprintf("%s claimed partition %d at epoch %d (member %s), from offset %d, at %s", name, rec.Partition, rec.Epoch, rec.Member, rec.NextOffset, since(tr.Start, rec.Time))})
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
				label := fmt.Sprintf("e%d %s", rec.Epoch, name)
				ln.Stale = append(ln.Stale, mark{X: x(rec.Time), Epoch: rec.Epoch, Label: label,
					LabelLeft: x(rec.Time)+10+textWidth(label) > v.Width,
					Tip: fmt.Sprintf("REFUSED stale %s by %s at %s: token partition %d epoch %d member %s (offset %d, %d records): %s",
						what, name, since(tr.Start, rec.Time), rec.Partition, rec.Epoch, rec.Member, rec.FirstOffset, rec.Records, rec.Err)})
				v.Stale++
			case consumer.KindDeadLettered:
				ln.Dead = append(ln.Dead, mark{X: x(rec.Time), Epoch: rec.Epoch,
					Tip: fmt.Sprintf("dead letter by %s at %s: partition %d offset %d, reason %s after %d attempts: %s",
						name, since(tr.Start, rec.Time), rec.Partition, rec.FirstOffset, rec.Cause, rec.Attempt, rec.Err)})
				v.DeadLetters++
			}
		}
	}
	for p := range parts {
		ts := byPart[p]
		ln := &v.Lanes[p]
		sort.SliceStable(ts, func(i, j int) bool { return ts[i].start.Before(ts[j].start) })
		var rowEnds []float64
		for i, t := range ts {
			end := t.end
			// A zombie believes it holds the partition until it is fenced:
			// the band ends where a newer claim began.
			if i+1 < len(ts) && ts[i+1].start.Before(end) {
				end = ts[i+1].start
			}
			x0, x1 := x(t.start), x(end)
			name := procName[t.proc]
			b := band{X: x0, W: max(x1-x0, 1), Colour: colourOf(t.proc), Text: textOn(colourOf(t.proc)), Member: t.member, Epoch: t.epoch,
				Label: fmt.Sprintf("%s e%d", name, t.epoch),
				Tip: fmt.Sprintf("%s (member %s) owned partition %d at epoch %d from %s, resuming at offset %d; %s",
					name, t.member, p, t.epoch, since(tr.Start, t.start), t.next, t.why)}
			b.HasText = b.W >= textWidth(b.Label)+6
			ln.Bands = append(ln.Bands, b)
			if b.HasText {
				continue
			}
			// Under the lane, in the first row where it fits.
			u := underLabel{LineX: b.X + b.W/2, Text: b.Label, Colour: b.Colour, Tip: b.Tip}
			w := textWidth(u.Text) + 10
			e0, e1 := u.LineX-3.5, u.LineX-3.5+w
			u.SwatchX, u.TextX = e0, e0+10
			if e1 > left+plotW+18 {
				// near the right edge: the text ends at the swatch
				e0, e1 = u.LineX+3.5-w, u.LineX+3.5
				u.SwatchX, u.TextX, u.TextEnd = e1-7, e1-9, true
			}
			row := firstFit(rowEnds, e0, 4)
			if row < 0 && len(rowEnds) < underRows {
				rowEnds = append(rowEnds, 0)
				row = len(rowEnds) - 1
			}
			if row < 0 {
				// No room: the band keeps its tooltip, and the page
				// says how many went unlabelled.
				v.TenuresUnlabelled++
				continue
			}
			rowEnds[row] = e1
			u.Y = float64(row)
			ln.Under = append(ln.Under, u)
		}
		ln.rows = len(rowEnds)
	}
	y := v.LanesTop
	for p := range v.Lanes {
		ln := &v.Lanes[p]
		ln.Y, ln.Mid = y, y+laneH/2
		for i := range ln.Under {
			u := &ln.Under[i]
			u.Y = y + laneH + 1 + u.Y*underRow
			u.SwatchY, u.LineY1, u.LineY2 = u.Y+2, y+laneH, u.Y+2
		}
		y += laneH + float64(ln.rows)*underRow + laneGap
	}
	v.LanesH = y - laneGap - v.LanesTop
	for i := range v.FaultMarks {
		v.FaultMarks[i].ShadeY, v.FaultMarks[i].ShadeH = v.LanesTop, v.LanesH
	}

	// Charts: applied records per second, and the workers' lag reports.
	top := y + 16
	v.Rate = rateChart(tr, x, span, top)
	v.Lag = lagChart(tr, x, top+chartH+34)
	v.Height = v.Lag.Top + chartH + 30
	return v
}

// firstFit is the first row whose end, plus gap, is at or before x; -1
// if none.
func firstFit(rowEnds []float64, x, gap float64) int {
	for i, e := range rowEnds {
		if e+gap <= x {
			return i
		}
	}
	return -1
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

// networkFaults says, for each kind of network fault (chaos's network
// kinds; the demo's --fault partition is a partition-broker), what it
// does to its victim's links: the fault's label says it, and it is drawn
// hatched.
var networkFaults = map[string]string{
	"partition-broker": "broker links cut",
	"partition-sink":   "sink link cut",
	"one-way":          "sink replies dropped",
	"slow-link":        "broker links slowed",
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
	// The network kinds: the victim keeps running.
	"partition-broker": "its links to every broker cut both ways while it held a batch, then healed",
	"partition-sink":   "its link to its sink cut both ways, then healed",
	"one-way":          "the replies on its sink link dropped (its requests still reach the sink), then healed",
	"slow-link":        "its broker links delayed above its heartbeat interval, then healed",
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
