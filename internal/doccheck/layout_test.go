package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// repoRoot is the repository's root, seen from this package's directory.
var repoRoot = filepath.Join("..", "..")

// requireCheckout skips a test that reads the nested modules when they
// are not beside the library (the library's module zip, in a module
// cache, holds none of them); under CI=true it fails instead.
func requireCheckout(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(repoRoot, "cmd", "go.mod")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cmd/go.mod: %v: the test needs the repository's checkout", err)
		}
		t.Skipf("cmd/go.mod: %v: not a checkout of the repository, so no nested module to check", err)
	}
}

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// section returns the lines of a Markdown text from the heading whose
// text is heading (any level) to the next heading of the same or a higher
// level, code blocks included, or nil.
func section(text, heading string) []string {
	lines := strings.Split(text, "\n")
	level := 0
	var out []string
	inCode := false
	for _, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
		}
		if !inCode && strings.HasPrefix(line, "#") {
			n := len(line) - len(strings.TrimLeft(line, "#"))
			text := strings.TrimSpace(line[n:])
			if level > 0 && n <= level {
				return out
			}
			if level == 0 && text == heading {
				level = n
				continue
			}
		}
		if level > 0 {
			out = append(out, line)
		}
	}
	return out
}

// goPackages returns every directory of the repository that holds a Go
// file, as go list ./... ./cmd/... ./examples/... ./deploy/...
// ./integration/... finds them in workspace mode: slash-separated,
// relative to the root, without testdata, node_modules, hidden or
// underscore directories and the scratch directory tmp/.
func goPackages(t *testing.T) map[string]bool {
	t.Helper()
	pkgs := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || rel == "tmp") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			pkgs[filepath.ToSlash(filepath.Dir(rel))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// treeLine is one entry of a layout tree: the drawing characters, then a
// directory name ending in '/', then anything (a comment).
var treeLine = regexp.MustCompile(`^([│├└─ ]*)(\S+/)(?:\s|$)`)

// layoutTree parses the code block of docs/design.md's Layout section:
// one directory per line, drawn as tree(1) draws it (four characters per
// level: "├── ", "└── ", "│   " or spaces), the first line the root.
// It returns each listed directory, slash-separated and relative to the
// root, with the line it is on.
func layoutTree(t *testing.T) map[string]string {
	t.Helper()
	sec := section(readDoc(t, "docs/design.md"), "Layout")
	var block []string
	in := false
	for _, line := range sec {
		if strings.HasPrefix(line, "```") {
			if in {
				break
			}
			in = true
			continue
		}
		if in {
			block = append(block, line)
		}
	}
	if len(block) == 0 {
		t.Fatal("docs/design.md: no code block in the Layout section")
	}
	listed := map[string]string{}
	var stack []string
	for _, line := range block[1:] { // the first line is the root
		m := treeLine.FindStringSubmatch(line)
		if m == nil {
			continue // a file (go.work), or a comment line
		}
		width := len([]rune(m[1]))
		if width%4 != 0 || width == 0 {
			t.Errorf("docs/design.md layout: %q: the drawing is not four characters a level", line)
			continue
		}
		depth := width / 4
		if depth > len(stack)+1 {
			t.Errorf("docs/design.md layout: %q: nested deeper than its parent", line)
			continue
		}
		stack = append(stack[:depth-1], strings.TrimSuffix(m[2], "/"))
		listed[strings.Join(stack, "/")] = line
	}
	return listed
}

// TestDesignLayoutMatchesPackages: the layout tree of docs/design.md
// lists every package of the five modules, and every directory it lists
// exists and holds a package or is the parent of one.
func TestDesignLayoutMatchesPackages(t *testing.T) {
	requireCheckout(t)
	listed := layoutTree(t)
	pkgs := goPackages(t)
	if len(pkgs) < 50 {
		t.Fatalf("found %d packages; the walk missed the tree", len(pkgs))
	}
	var missing []string
	for p := range pkgs {
		if _, ok := listed[p]; !ok {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	for _, p := range missing {
		t.Errorf("package %s is not in the layout tree of docs/design.md#layout: add it", p)
	}
	for dir, line := range listed {
		holds := pkgs[dir]
		for p := range pkgs {
			holds = holds || strings.HasPrefix(p, dir+"/")
		}
		if !holds {
			t.Errorf("docs/design.md#layout lists %s (%q), which holds no package", dir, strings.TrimSpace(line))
		}
	}
}
