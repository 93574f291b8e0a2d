package surface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// prefixExceptions are the packages whose sentinels start with another
// prefix than their package's name, with the reason.
var prefixExceptions = map[string]string{
	// "kafka: …" would read as an error of Kafka itself.
	"sink/kafka": "kafka sink",
	// Its sentinel is admin.ErrGroupNotFound.
	"internal/observe": "admin",
}

// TestSentinelsPrefixed: every error sentinel of the root module (a
// package-level errors.New, in every package but the tests) says which
// package it comes from, its message starting with the package's name and
// a colon, and a sentinel for an invalid configuration is named ErrConfig.
func TestSentinelsPrefixed(t *testing.T) {
	root := repoRoot(t)
	nested := map[string]bool{"cmd": true, "examples": true, "deploy": true, "integration": true, "compare": true}
	fset := token.NewFileSet()
	var bad []string
	sentinels := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if path != root && (nested[rel] || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		prefix := f.Name.Name
		if p, ok := prefixExceptions[dir]; ok {
			prefix = p
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, sp := range gd.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if strings.HasPrefix(n.Name, "Err") && strings.Contains(n.Name, "Config") && n.Name != "ErrConfig" {
						bad = append(bad, dir+"."+n.Name+": an invalid configuration's sentinel is named ErrConfig")
					}
					if i >= len(vs.Values) {
						continue
					}
					call, ok := vs.Values[i].(*ast.CallExpr)
					if !ok || len(call.Args) != 1 {
						continue
					}
					sel, ok := call.Fun.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "New" {
						continue
					}
					if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "errors" {
						continue
					}
					lit, ok := call.Args[0].(*ast.BasicLit)
					if !ok {
						continue
					}
					msg, _ := strconv.Unquote(lit.Value)
					sentinels++
					if !strings.HasPrefix(msg, prefix+": ") {
						bad = append(bad, dir+"."+n.Name+": "+strconv.Quote(msg)+" does not start with "+strconv.Quote(prefix+": "))
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sentinels < 50 {
		t.Fatalf("found %d sentinels: the scan is not seeing the library", sentinels)
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Errorf("%d of the root module's %d error sentinels break the vocabulary:\n\t%s", len(bad), sentinels, strings.Join(bad, "\n\t"))
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("%s is not the repository root: %v", root, err)
	}
	return root
}
