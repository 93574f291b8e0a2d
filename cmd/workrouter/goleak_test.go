package main

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

// repoPath is the import path of the repository's root module; the other
// four modules (cmd, deploy, examples, integration) live under it at the
// directory of the same name, so a directory's import path is repoPath
// joined with its path from the root.
const repoPath = "github.com/workrouter/workrouter"

// goroutineImports are the import paths (or prefixes ending in "/") whose
// use starts goroutines: pools, servers, clients and child processes.
var goroutineImports = []string{
	"database/sql",
	"net/http",
	"net/http/",
	"os/exec",
	"github.com/jackc/pgx/",
	"github.com/redis/go-redis/",
	"github.com/twmb/franz-go/pkg/kgo",
	"github.com/twmb/franz-go/pkg/kfake",
	"github.com/twmb/franz-go/pkg/kadm",
	"github.com/IBM/sarama",
	"github.com/testcontainers/",
	"github.com/chromedp/",
}

func startsByImport(path string) bool {
	for _, p := range goroutineImports {
		if path == p || strings.HasSuffix(p, "/") && strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// goPackage is what the check needs to know of one directory's Go files.
type goPackage struct {
	dir       string
	starts    bool     // a non-test file starts goroutines directly
	testStart bool     // a test file starts goroutines directly
	imports   []string // repo packages the non-test files import
	testImps  []string // repo packages the test files import
	hasTests  bool
	checked   bool // a test file calls goleak.VerifyTestMain or goleak.Find
}

// startsGoroutines reports whether f starts a goroutine itself: a go
// statement, a call of a method named Go (errgroup, conc and similar), or an
// import whose use starts some.
func startsGoroutines(f *ast.File) bool {
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if startsByImport(p) {
			return true
		}
	}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			found = true
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Go" {
				found = true
			}
		}
		return !found
	})
	return found
}

// checksLeaks reports whether f calls goleak.VerifyTestMain or goleak.Find.
func checksLeaks(f *ast.File) bool {
	name := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "go.uber.org/goleak" {
			name = "goleak"
			if imp.Name != nil {
				name = imp.Name.Name
			}
		}
	}
	if name == "" {
		return false
	}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == name && (sel.Sel.Name == "VerifyTestMain" || sel.Sel.Name == "Find") {
				found = true
			}
		}
		return !found
	})
	return found
}

// scanRepo parses every Go file of the repository's five modules and
// returns its packages by import path.
func scanRepo(t *testing.T, root string) map[string]*goPackage {
	t.Helper()
	pkgs := map[string]*goPackage{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		ip := repoPath
		if rel != "." {
			ip += "/" + filepath.ToSlash(rel)
		}
		p := pkgs[ip]
		if p == nil {
			p = &goPackage{dir: rel}
			pkgs[ip] = p
		}
		isTest := strings.HasSuffix(name, "_test.go")
		var repoImps []string
		for _, imp := range f.Imports {
			if s, _ := strconv.Unquote(imp.Path.Value); s == repoPath || strings.HasPrefix(s, repoPath+"/") {
				repoImps = append(repoImps, s)
			}
		}
		if isTest {
			p.hasTests = true
			p.testStart = p.testStart || startsGoroutines(f)
			p.checked = p.checked || checksLeaks(f)
			p.testImps = append(p.testImps, repoImps...)
		} else {
			p.starts = p.starts || startsGoroutines(f)
			p.imports = append(p.imports, repoImps...)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan %s: %v", root, err)
	}
	return pkgs
}

// goroutinePackages returns the packages that may start goroutines when
// their tests run: their own files or their tests start some, or they
// import, at any depth, a package of the repository that does.
func goroutinePackages(pkgs map[string]*goPackage) map[string]bool {
	memo := map[string]bool{}
	var starts func(ip string, seen map[string]bool) bool
	starts = func(ip string, seen map[string]bool) bool {
		if v, ok := memo[ip]; ok {
			return v
		}
		p := pkgs[ip]
		if p == nil || seen[ip] {
			return false
		}
		seen[ip] = true
		v := p.starts
		for _, imp := range p.imports {
			if v {
				break
			}
			v = starts(imp, seen)
		}
		memo[ip] = v
		return v
	}
	out := map[string]bool{}
	for ip, p := range pkgs {
		v := p.testStart || starts(ip, map[string]bool{})
		for _, imp := range p.testImps {
			if v {
				break
			}
			v = imp != ip && starts(imp, map[string]bool{})
		}
		if v {
			out[ip] = true
		}
	}
	return out
}

// TestGoroutinePackagesCheckLeaks: every package whose tests may start
// goroutines (see goroutinePackages) checks for leaked ones with goleak,
// through goleak.VerifyTestMain or, where TestMain has more to do, goleak.Find
// after m.Run.
func TestGoroutinePackagesCheckLeaks(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("%s is not the repository root: %v", root, err)
	}
	pkgs := scanRepo(t, root)
	goroutines := goroutinePackages(pkgs)
	// The check must see the packages it is about; a scan that found
	// nothing would pass vacuously.
	for _, ip := range []string{repoPath + "/consumer", repoPath + "/sink/postgres", repoPath + "/cmd/workrouter", repoPath + "/integration"} {
		if !goroutines[ip] {
			t.Errorf("%s not recognised as starting goroutines", ip)
		}
	}
	var missing []string
	for ip := range goroutines {
		if p := pkgs[ip]; p.hasTests && !p.checked {
			missing = append(missing, p.dir)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("%d packages start goroutines in their tests but do not check for leaks "+
			"(add TestMain calling goleak.VerifyTestMain, or goleak.Find after m.Run):\n\t%s",
			len(missing), strings.Join(missing, "\n\t"))
	}
}
