package envelope_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/workrouter/workrouter"

// TestConsumerDoesNotImportRouter: the consumer decodes with this package
// and never reaches into the producer's, directly or through another
// package of the module (the non-test files of every package it imports).
func TestConsumerDoesNotImportRouter(t *testing.T) {
	seen := map[string][]string{} // package → the import path that led to it
	var visit func(pkg string, via []string)
	visit = func(pkg string, via []string) {
		if _, ok := seen[pkg]; ok {
			return
		}
		via = append(via[:len(via):len(via)], pkg)
		seen[pkg] = via
		if pkg == module+"/router" {
			t.Errorf("consumer imports router: %s", strings.Join(via, " → "))
			return
		}
		dir := filepath.Join("..", filepath.FromSlash(strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")))
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("package %s: %v", pkg, err)
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, err := strconv.Unquote(imp.Path.Value)
				if err != nil {
					t.Fatal(err)
				}
				if path == module || strings.HasPrefix(path, module+"/") {
					visit(path, via)
				}
			}
		}
	}
	visit(module+"/consumer", nil)
	if _, ok := seen[module+"/envelope"]; !ok {
		t.Errorf("consumer does not import envelope; it imports %d packages of the module", len(seen)-1)
	}
}
