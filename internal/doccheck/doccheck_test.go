// Package doccheck holds the checks that the docs state what the code
// has: the library's doc comments state contracts, defaults and
// trade-offs, not figures measured on one machine (those go to
// docs/performance.md, each beside the command that reproduces it, which
// TestPerformanceFiguresHaveCommands checks); docs/design.md's layout tree
// lists the packages that exist; CONTRIBUTING.md lists the library's
// direct requirements.
package doccheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// measured matches what reads as a measurement in prose: a throughput,
// a time in microseconds or nanoseconds, a ratio "0.56 of raw", a
// percentage more or less, a benchmark's result.
var measured = regexp.MustCompile(`[0-9][0-9.,–-]* ?(records|commands|sends|lines)/s\b` +
	`|[0-9][0-9.]* ?(µs|ns)\b` +
	`|\b[0-9]\.[0-9]+ of (raw|the|a|its)\b` +
	`|[0-9]+(\.[0-9]+)?% (more|less|faster|slower)\b` +
	`|Benchmark[A-Z]\w*: [0-9]`)

// TestNoMeasuredFigureInDocComments walks the library (the root module
// without its tests, cmd/, examples/, integration/ and deploy/) and fails
// naming each comment line that holds a measured figure.
func TestNoMeasuredFigureInDocComments(t *testing.T) {
	root := filepath.Join("..", "..")
	skip := map[string]bool{"cmd": true, "examples": true, "integration": true, "deploy": true, "node_modules": true, "testdata": true, ".git": true}
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[d.Name()] && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		files++
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				for i, line := range strings.Split(c.Text, "\n") {
					if m := measured.FindString(line); m != "" {
						pos := fset.Position(c.Pos())
						t.Errorf("%s:%d: a measured figure in a comment (%q): state the contract, and put the figure in docs/performance.md with its command", pos.Filename, pos.Line+i, m)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d library files; the walk missed the tree", files)
	}
}
