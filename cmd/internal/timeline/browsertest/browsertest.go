// Package browsertest opens a timeline report in headless Chromium
// (Debian's chromium package), driven by chromedp, and reads back what the
// page shows: its lanes, marks and summary cells (by their data
// attributes), the console's errors and the resources it fetched. Tests
// compare them with the run's own figures. It is imported by tests only.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Page is what the browser showed.
type Page struct {
	Title string
	// Lanes are the lanes' partitions, in page order.
	Lanes []int
	// Marks counts the SVG marks by their data-kind (stale, fault,
	// dead-letter, claim, tenure).
	Marks map[string]int
	// FaultMarks counts the fault markers by their data-fault.
	FaultMarks map[string]int
	// NetworkFaults counts the fault markers drawn as network faults
	// (data-network) by their data-fault, and FaultFills is the fill of
	// each data-fault's bar (the last one drawn).
	NetworkFaults map[string]int
	FaultFills    map[string]string
	// Legends are the data-legend of the legend's conditional entries.
	Legends []string
	// FaultCounts, Figures and Invariants are the summary table's cells:
	// data-fault-count, data-figure and data-invariant, by key.
	FaultCounts map[string]string
	Figures     map[string]string
	Invariants  map[string]string
	// Verdict is the badge's data-verdict ("ok" or "failed").
	Verdict string
	// Resources are the URLs of the resources the page fetched
	// (performance entries of type resource): none for a page that is
	// self-contained.
	Resources []string
	// SVGHeight is the rendered height of the timeline's SVG in CSS
	// pixels (0 if it did not render).
	SVGHeight float64
	// Console are the console's error and warning messages and the
	// uncaught exceptions, as "type: text".
	Console []string
	// StaleTip is the text the page showed while the mouse hovered the
	// first stale mark ("" if none).
	StaleTip string
	// Processes are the legend's worker processes (data-process), in
	// order, with the colour each is drawn in.
	Processes []Process
	// FaultLabels are the texts drawn beside the fault marks, in order.
	FaultLabels []string
	// Marks on bands: for every refused-write and dead-letter mark, what
	// the page paints at its centre.
	MarkPaint []MarkPaint
}

// Process is one legend entry.
type Process struct {
	Name, Colour string
}

// MarkPaint is what the browser paints at a mark's centre: Kind is the
// mark's data-kind; Topmost whether the mark itself is the element there
// (nothing covers it); Disc the computed fill of the disc under its
// symbol; Band the computed fill of the tenure band under it ("" if
// none); Cover, when it is not topmost, names what is painted over it.
type MarkPaint struct {
	Kind    string
	Topmost bool
	Disc    string
	Band    string
	Cover   string
}

// Chromium, called from the test's goroutine, returns the path of a
// Chromium binary, or skips the test without one, except under CI=true,
// where it fails: CI installs Debian's chromium package (.ci/run).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH under CI=true: .ci/run installs Debian's chromium package")
	}
	t.Skip("no chromium on PATH (apt-get install chromium): the report's browser test is skipped")
	return ""
}

// endMark is logged by Load after its last action: the console reader
// stops there, having read every message before it.
const endMark = "browsertest: end of the page's messages"

// readPage is evaluated in the page.
const readPage = `(() => {
  const all = (sel) => Array.from(document.querySelectorAll(sel));
  const cells = (attr) => Object.fromEntries(all("[" + attr + "]").map(e => [e.getAttribute(attr), e.textContent.trim()]));
  const marks = {};
  for (const e of all("svg [data-kind]")) { const k = e.getAttribute("data-kind"); marks[k] = (marks[k] || 0) + 1; }
  const faults = {};
  for (const e of all("svg [data-kind=fault]")) { const k = e.getAttribute("data-fault"); faults[k] = (faults[k] || 0) + 1; }
  const network = {}, fills = {};
  for (const e of all("svg [data-kind=fault][data-network]")) { const k = e.getAttribute("data-fault"); network[k] = (network[k] || 0) + 1; }
  for (const e of all("svg [data-kind=fault]")) { const r = e.querySelector("rect"); fills[e.getAttribute("data-fault")] = r ? r.getAttribute("fill") : ""; }
  const svg = document.getElementById("timeline");
  const verdict = document.querySelector("[data-verdict]");
  return {
    Title: document.title,
    Lanes: all("svg [data-kind=lane]").map(e => Number(e.getAttribute("data-partition"))),
    Marks: marks, FaultMarks: faults, NetworkFaults: network, FaultFills: fills,
    Legends: all("[data-legend]").map(e => e.getAttribute("data-legend")),
    FaultCounts: cells("data-fault-count"), Figures: cells("data-figure"), Invariants: cells("data-invariant"),
    Verdict: verdict ? verdict.getAttribute("data-verdict") : "",
    Resources: performance.getEntriesByType("resource").map(e => e.name),
    SVGHeight: svg ? svg.getBoundingClientRect().height : 0,
    Processes: all("[data-process]").map(e => ({Name: e.getAttribute("data-process"), Colour: e.getAttribute("data-colour")})),
    FaultLabels: all("svg [data-kind=fault] text").map(e => e.textContent),
  };
})()`

// markPaint scrolls every refused-write and dead-letter mark into view
// and reads what is painted at its centre.
const markPaint = `(() => {
  const out = [];
  for (const m of document.querySelectorAll("svg [data-kind=stale], svg [data-kind=dead-letter]")) {
    const disc = m.querySelector("circle");
    if (!disc) { out.push({Kind: m.getAttribute("data-kind"), Topmost: false, Disc: "", Band: "", Cover: "no disc"}); continue; }
    disc.scrollIntoView({block: "center", inline: "center"});
    const r = disc.getBoundingClientRect();
    const cx = r.x + r.width / 2, cy = r.y + r.height / 2;
    const top = document.elementFromPoint(cx, cy);
    let band = "";
    for (const e of document.elementsFromPoint(cx, cy)) {
      const g = e.closest("[data-kind=tenure]");
      if (g) { band = getComputedStyle(g.querySelector("rect")).fill; break; }
    }
    const owner = top ? top.closest("[data-kind]") : null;
    out.push({Kind: m.getAttribute("data-kind"), Topmost: owner === m,
      Disc: getComputedStyle(disc).fill, Band: band,
      Cover: owner === m ? "" : (top ? top.tagName + (owner ? " of " + owner.getAttribute("data-kind") + ": " + (owner.getAttribute("data-tip") || "") : "") : "nothing")});
  }
  return out;
})()`

// firstStale scrolls the first stale mark into view and returns its
// centre in the viewport, or null.
const firstStale = `(() => {
  const e = document.querySelector("svg [data-kind=stale] path");
  if (!e) return null;
  e.scrollIntoView({block: "center", inline: "center"});
  const r = e.getBoundingClientRect();
  return {X: r.x + r.width / 2, Y: r.y + r.height / 2};
})()`

// Load opens the HTML file at path in headless Chromium and reads the
// page. It fails the test if the browser cannot be driven; call it from
// the test's goroutine (it may call t.Fatal).
func Load(t testing.TB, path string) Page {
	t.Helper()
	bin := Chromium(t)
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-gpu", true), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	tctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()

	var mu sync.Mutex
	var console []string
	done := make(chan struct{})
	msgs := chromedp.Console(ctx) // starts the browser: do not time it out
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Text == endMark {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				mu.Lock()
				console = append(console, fmt.Sprintf("%s: %s", m.Type, m.Text))
				mu.Unlock()
			}
		}
	}()
	if err := chromedp.Do(tctx, chromedp.Navigate("file://"+abs)); err != nil {
		t.Fatalf("chromium: opening %s: %v", abs, err)
	}
	p, err := chromedp.Run(tctx, chromedp.Evaluate[Page](readPage))
	if err != nil {
		t.Fatalf("chromium: reading the page: %v", err)
	}
	if p.MarkPaint, err = chromedp.Run(tctx, chromedp.Evaluate[[]MarkPaint](markPaint)); err != nil {
		t.Fatalf("chromium: reading the marks' paint: %v", err)
	}
	type point struct{ X, Y float64 }
	if pt, err := chromedp.Run(tctx, chromedp.Evaluate[*point](firstStale)); err != nil {
		t.Fatalf("chromium: finding a stale mark: %v", err)
	} else if pt != nil {
		if err := chromedp.Do(tctx, chromedp.MouseEvent(chromedp.MouseMoved, pt.X, pt.Y)); err != nil {
			t.Fatalf("chromium: hovering a stale mark: %v", err)
		}
		if p.StaleTip, err = chromedp.Run(tctx, chromedp.Evaluate[string](`document.getElementById("tip").textContent`)); err != nil {
			t.Fatalf("chromium: reading the tip: %v", err)
		}
	}
	if err := chromedp.Do(tctx, chromedp.Evaluate[chromedp.Void](`console.log(`+"`"+endMark+"`"+`)`)); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	select {
	case <-done:
	case <-tctx.Done():
		t.Fatalf("chromium: the console's messages did not arrive: %v", tctx.Err())
	}
	mu.Lock()
	p.Console = console
	mu.Unlock()
	return p
}

// Sum is the sum of the counts.
func Sum(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// String is a one-line summary of the page for failure messages.
func (p Page) String() string {
	return fmt.Sprintf("title %q, lanes %v, marks %v, fault marks %v, faults %v, figures %v, invariants %v, console [%s]",
		p.Title, p.Lanes, p.Marks, p.FaultMarks, p.FaultCounts, p.Figures, p.Invariants, strings.Join(p.Console, "; "))
}
