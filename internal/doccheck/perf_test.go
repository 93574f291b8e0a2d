package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// table is one Markdown table: its header cells and its rows' cells, with
// the line of each row.
type table struct {
	header []string
	rows   [][]string
	lines  []int
}

func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(strings.TrimSuffix(line, "|"), "|")
	// A code span may hold a '|' of a shell pipeline: split outside them.
	var out []string
	var cur strings.Builder
	inCode := false
	for _, r := range line {
		switch {
		case r == '`':
			inCode = !inCode
		case r == '|' && !inCode:
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// tables returns the Markdown tables of a text, outside code blocks.
func tables(text string) []table {
	var out []table
	var cur *table
	inCode := false
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(trimmed, "|") {
			if cur != nil {
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		c := cells(trimmed)
		switch {
		case cur == nil:
			cur = &table{header: c}
		case len(cur.rows) == 0 && len(cur.lines) == 0 && strings.Trim(trimmed, "|-: ") == "":
			cur.lines = append(cur.lines, -1) // the delimiter row
		default:
			cur.rows = append(cur.rows, c)
			cur.lines = append(cur.lines, i+1)
		}
	}
	if cur != nil {
		out = append(out, *cur)
	}
	for i := range out {
		if len(out[i].lines) > 0 && out[i].lines[0] == -1 {
			out[i].lines = out[i].lines[1:]
		}
	}
	return out
}

func column(header []string, name string) int {
	for i, h := range header {
		if strings.EqualFold(h, name) {
			return i
		}
	}
	return -1
}

var (
	// aCommand is a code span holding a command that reproduces a
	// figure: go run, go test, or either behind environment variables
	// or a cd.
	aCommand = regexp.MustCompile("`(?:cd [^`]+ && |[A-Z_]+=\\S+ )*go (?:run|test) [^`]+`")
	// aFigure is a figure cell: a number first (bold allowed), then
	// anything (its unit, its spread).
	aFigure = regexp.MustCompile(`^\**[0-9][0-9.,]*`)
	// aDate is a machine cell's date.
	aDate = regexp.MustCompile(`\b20[0-9]{2}-[0-9]{2}-[0-9]{2}\b`)
	// ratioDef and latencyDef read workrouter-lab bench's targets from its
	// source.
	ratioDef   = regexp.MustCompile(`\{Name: "(\w+)", Num: "([\w-]+)", Den: "([\w-]+)"(?:, Target: ([0-9.]+))?\}`)
	latencyDef = regexp.MustCompile(`\{Name: "(\w+)", Row: "([\w-]+)"(?:, P99: true)?, Target: (?:([0-9]+) \* )?time\.Millisecond\}`)
)

// wantCell is a want as the targets table writes it: "≥ 0.90",
// "< 1 ms" or "none".
var wantCell = regexp.MustCompile(`^(≥|<) ([0-9.]+)( ms)?$`)

// sameWant reports whether a want cell of the table states the code's
// want w (as benchTargets writes it), the numbers compared as numbers.
func sameWant(cell, w string) bool {
	if cell == "none" || w == "none" {
		return cell == w
	}
	a, b := wantCell.FindStringSubmatch(cell), wantCell.FindStringSubmatch(w)
	if a == nil || b == nil || a[1] != b[1] || a[3] != b[3] {
		return false
	}
	x, err1 := strconv.ParseFloat(a[2], 64)
	y, err2 := strconv.ParseFloat(b[2], 64)
	return err1 == nil && err2 == nil && x == y
}

// benchTargets reads the targets of workrouter-lab bench from the file that
// declares them (ratioDefs and latencyDefs, under cmd/): name to want, as
// docs/performance.md writes it ("≥ 0.9", "< 1 ms", "none").
func benchTargets(t *testing.T) (map[string]string, map[string]string) {
	t.Helper()
	var src string
	err := filepath.WalkDir(filepath.Join(repoRoot, "cmd"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(raw), "var ratioDefs = ") {
			src = string(raw)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if src == "" {
		t.Fatal("no file under cmd/ declares ratioDefs, the targets of workrouter-lab bench: where did they go?")
	}
	want, rows := map[string]string{}, map[string]string{}
	for _, m := range ratioDef.FindAllStringSubmatch(src, -1) {
		rows[m[1]] = m[2] + "/" + m[3]
		want[m[1]] = "none"
		if m[4] != "" {
			v, _ := strconv.ParseFloat(m[4], 64)
			want[m[1]] = "≥ " + strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	for _, m := range latencyDef.FindAllStringSubmatch(src, -1) {
		ms := m[3]
		if ms == "" {
			ms = "1"
		}
		rows[m[1]] = m[2]
		want[m[1]] = "< " + ms + " ms"
	}
	if len(want) < 15 {
		t.Fatalf("read %d targets of workrouter-lab bench; has the declaration's shape changed?", len(want))
	}
	return want, rows
}

// TestPerformanceFiguresHaveCommands: docs/performance.md is a reference
// a user can act on. Every table with a "figure" column (a measured
// figure, its spread beside it) has a "runs", a "machine" and a "command"
// column, and every row of it a figure, the runs it comes from, the
// machine with the date, and the command that reproduces it. Every target
// of workrouter-lab bench is a row of the table with a "target" column (its
// name in a code span), with its ratio's rows and the want the code
// declares.
func TestPerformanceFiguresHaveCommands(t *testing.T) {
	requireCheckout(t)
	doc := readDoc(t, "docs/performance.md")
	want, ratioRows := benchTargets(t)
	seen := map[string]bool{}
	figureTables := 0
	for _, tb := range tables(doc) {
		fig := column(tb.header, "figure")
		if fig < 0 {
			continue
		}
		figureTables++
		runs, machine, command := column(tb.header, "runs"), column(tb.header, "machine"), column(tb.header, "command")
		if runs < 0 || machine < 0 || command < 0 {
			t.Errorf("docs/performance.md: the table headed %q has a figure column but not runs, machine and command", strings.Join(tb.header, " | "))
			continue
		}
		target, wantCol, ratioCol := column(tb.header, "target"), column(tb.header, "want"), column(tb.header, "rows")
		for i, row := range tb.rows {
			at := "docs/performance.md:" + strconv.Itoa(tb.lines[i])
			if len(row) != len(tb.header) {
				t.Errorf("%s: %d cells, the header has %d", at, len(row), len(tb.header))
				continue
			}
			if !aFigure.MatchString(row[fig]) {
				t.Errorf("%s: figure %q does not start with a number", at, row[fig])
			}
			if row[runs] == "" {
				t.Errorf("%s: no runs: say what the figure is the median of", at)
			}
			if !aDate.MatchString(row[machine]) {
				t.Errorf("%s: machine %q: name the machine and the date (YYYY-MM-DD) it was measured", at, row[machine])
			}
			if !aCommand.MatchString(row[command]) {
				t.Errorf("%s: command %q: give the go run or go test command that reproduces the figure, in a code span", at, row[command])
			}
			if target < 0 {
				continue
			}
			name := strings.Trim(row[target], "`")
			w, ok := want[name]
			if !ok {
				t.Errorf("%s: %q is not a target of workrouter-lab bench", at, row[target])
				continue
			}
			seen[name] = true
			if wantCol < 0 || !sameWant(row[wantCol], w) {
				t.Errorf("%s: %s wants %q in the code (cmd/internal/bench), the table says otherwise", at, name, w)
			}
			if ratioCol < 0 || !strings.Contains(strings.ReplaceAll(row[ratioCol], " ", ""), ratioRows[name]) {
				t.Errorf("%s: %s is %s in the code, the table's rows column says otherwise", at, name, ratioRows[name])
			}
		}
	}
	if figureTables == 0 {
		t.Errorf("docs/performance.md has no table with a figure column: the figures have no command, runs and machine beside them")
	}
	var missing []string
	for name := range want {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("docs/performance.md: target %s of workrouter-lab bench has no row in the targets table", name)
	}
}
