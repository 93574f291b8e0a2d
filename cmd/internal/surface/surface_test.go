package surface

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const repoPath = "github.com/workrouter/workrouter"

var list = flag.Bool("list", false, "log every exported top-level name of the library and where it is used")

// allowlist names, as "package/path.Name" relative to the repository, the
// names that stay exported though only another package of the repository
// uses them, each with its reason.
var allowlist = map[string]string{}

// contributorDocs are the docs that do not count as showing a name to a
// user: they are written for whoever changes the repository.
var contributorDocs = map[string]bool{"design.md": true, "releasing.md": true}

// listed is one package of `go list -json -export -deps -test`.
type listed struct {
	ImportPath string
	Name       string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Export     string
	ImportMap  map[string]string
	ForTest    string
	DepOnly    bool
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// base is the import path of p without its test-variant suffix.
func (p *listed) base() string {
	if i := strings.Index(p.ImportPath, " ["); i >= 0 {
		return p.ImportPath[:i]
	}
	return p.ImportPath
}

// library reports whether ip is a package of the root module outside
// internal/ (the nested modules' import paths are under repoPath too, so
// the caller checks the module as well).
func library(ip string) bool {
	rel, ok := strings.CutPrefix(ip, repoPath)
	if !ok || (rel != "" && rel[0] != '/') {
		return false
	}
	for _, el := range strings.Split(rel, "/") {
		if el == "internal" {
			return false
		}
	}
	return true
}

// use is one place that uses a name, in the kinds of use the rule tells apart.
type use struct {
	kind string // "example", "xtest", "self", "repo"
	pkg  string // the using package, relative to repoPath ("repo" only)
}

// name is an exported top-level name of a library package and what uses it.
type name struct {
	pkg, name string
	obj       types.Object
	examples  int
	xtests    int
	self      int
	repo      map[string]int // using package (relative) -> uses
	docs      []string       // docs that name it
	pkgDoc    bool
	godoc     bool   // the doc comment of another exported declaration names it
	ofType    string // a value of this type of its package, which users see
	api       bool   // shown by another exported name of its package
}

func (n *name) key() string { return strings.TrimPrefix(n.pkg, repoPath+"/") + "." + n.name }

func (n *name) seen() bool {
	return n.examples > 0 || n.xtests > 0 || len(n.docs) > 0 || n.pkgDoc || n.godoc || n.api || n.ofType != ""
}

func goList(t *testing.T, root string) []*listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-export", "-deps", "-test",
		"-json=ImportPath,Name,Dir,GoFiles,CgoFiles,Export,ImportMap,ForTest,DepOnly,Module,Error",
		"./...", "./cmd/...", "./examples/...", "./deploy/...", "./integration/...", "./compare/...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []*listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(listed)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// surface type-checks the repository and returns the exported top-level
// names of its library packages with their uses.
func surface(t *testing.T, root string) (map[string][]*name, map[string]bool) {
	t.Helper()
	pkgs := goList(t, root)
	byID := map[string]*listed{}
	for _, p := range pkgs {
		byID[p.ImportPath] = p
	}
	fset := token.NewFileSet()
	newImporter := func(p *listed) types.Importer {
		return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			id := path
			if m, ok := p.ImportMap[path]; ok {
				id = m
			}
			dep := byID[id]
			if dep == nil || dep.Export == "" {
				return nil, fmt.Errorf("no export data for %s", id)
			}
			return os.Open(dep.Export)
		})
	}
	inRepo := func(p *listed) bool {
		return p.Module != nil && (p.Module.Path == repoPath || strings.HasPrefix(p.Module.Path, repoPath+"/")) && !p.DepOnly
	}

	// The library's exported top-level names, from its export data.
	names := map[string][]*name{}
	byObj := map[string]*name{} // "path.Name"
	libPkgs := map[string]bool{}
	var libDocs []docText
	for _, p := range pkgs {
		if !inRepo(p) || p.Module.Path != repoPath || p.ForTest != "" || strings.HasSuffix(p.ImportPath, ".test") || !library(p.ImportPath) || p.Name == "main" {
			continue
		}
		if p.Error != nil {
			t.Fatalf("%s: %s", p.ImportPath, p.Error.Err)
		}
		libPkgs[p.ImportPath] = true
		tp, err := newImporter(&listed{}).Import(p.ImportPath)
		if err != nil {
			t.Fatalf("import %s: %v", p.ImportPath, err)
		}
		var pkgDoc strings.Builder
		var decls []docText
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil {
				pkgDoc.WriteString(af.Doc.Text())
			}
			decls = append(decls, docTexts(af)...)
		}
		for _, n := range tp.Scope().Names() {
			obj := tp.Scope().Lookup(n)
			if !obj.Exported() {
				continue
			}
			nm := &name{pkg: p.ImportPath, name: n, obj: obj, repo: map[string]int{}}
			word := regexp.MustCompile(`\b` + n + `\b`)
			nm.pkgDoc = word.MatchString(pkgDoc.String())
			for _, d := range decls {
				if !slices.Contains(d.of, n) && word.MatchString(d.text) {
					nm.godoc = true
				}
			}
			names[p.ImportPath] = append(names[p.ImportPath], nm)
			byObj[p.ImportPath+"."+n] = nm
		}
		markAPI(tp, names[p.ImportPath])
		libDocs = append(libDocs, decls...)
	}
	// A library doc comment that names pkg.Name shows it too, and so does
	// its type for a constant or variable of a type users see (one of the
	// values go doc lists under the type).
	for ip, ns := range names {
		pkgName := ip[strings.LastIndex(ip, "/")+1:]
		for _, nm := range ns {
			q := regexp.MustCompile(`\b` + pkgName + `\.` + nm.name + `\b`)
			for _, d := range libDocs {
				if q.MatchString(d.text) {
					nm.godoc = true
					break
				}
			}
		}
	}
	for _, ns := range names {
		for _, nm := range ns {
			if _, ok := nm.obj.(*types.TypeName); ok {
				continue
			}
			named, ok := nm.obj.Type().(*types.Named)
			if !ok || named.Obj().Pkg() == nil || named.Obj().Pkg().Path() != nm.pkg {
				continue
			}
			for _, tn := range ns {
				if tn.name == named.Obj().Name() && tn.seen() {
					nm.ofType = tn.name
				}
			}
		}
	}

	// Which packages to type-check from source: every package of the
	// repository, its test variant standing for it when it has tests.
	hasTestVariant := map[string]bool{}
	for _, p := range pkgs {
		if p.ForTest != "" && p.base() == p.ForTest {
			hasTestVariant[p.ForTest] = true
		}
	}
	checked := 0
	for _, p := range pkgs {
		if !inRepo(p) || strings.HasSuffix(p.ImportPath, ".test") {
			continue
		}
		switch {
		case p.ForTest == "" && hasTestVariant[p.ImportPath]:
			continue
		case p.ForTest != "" && p.base() != p.ForTest && p.base() != p.ForTest+"_test":
			continue // another package recompiled for a test
		}
		if p.Error != nil {
			t.Fatalf("%s: %s", p.ImportPath, p.Error.Err)
		}
		var files []*ast.File
		for _, f := range append(slices.Clone(p.GoFiles), p.CgoFiles...) {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, af)
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: newImporter(p)}
		if _, err := conf.Check(p.base(), fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		checked++
		user := strings.TrimSuffix(p.base(), "_test")
		xtest := p.base() != user
		for _, f := range files {
			examples := exampleRanges(f)
			for id, obj := range info.Uses {
				if id.Pos() < f.Pos() || id.Pos() > f.End() || obj.Pkg() == nil {
					continue
				}
				nm := byObj[obj.Pkg().Path()+"."+obj.Name()]
				if nm == nil || obj.Pkg().Scope().Lookup(obj.Name()) != obj {
					continue
				}
				switch {
				case inRanges(examples, id.Pos()):
					nm.examples++
				case user == nm.pkg && xtest:
					nm.xtests++
				case user == nm.pkg:
					nm.self++
				default:
					nm.repo[strings.TrimPrefix(user, repoPath+"/")]++
				}
			}
		}
	}
	if checked < 50 || len(libPkgs) < 20 {
		t.Fatalf("type-checked %d packages and found %d library packages: the scan is not seeing the repository", checked, len(libPkgs))
	}

	// The docs a user reads.
	docs := []string{filepath.Join(root, "README.md")}
	mds, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, md := range mds {
		if !contributorDocs[filepath.Base(md)] {
			docs = append(docs, md)
		}
	}
	for _, d := range docs {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, d)
		for ip, ns := range names {
			pkgName := ip[strings.LastIndex(ip, "/")+1:]
			for _, nm := range ns {
				if regexp.MustCompile(`\b` + pkgName + `\.` + nm.name + `\b`).Match(b) {
					nm.docs = append(nm.docs, rel)
				}
			}
		}
	}
	return names, libPkgs
}

// markAPI marks the names of ns that another exported name of pkg shows:
// a named type in the signature of an exported function or method, the
// type of an exported variable or field, or a type an exported type is
// made of.
func markAPI(pkg *types.Package, ns []*name) {
	byName := map[string]*name{}
	for _, n := range ns {
		byName[n.name] = n
	}
	seen := map[types.Type]bool{}
	var walk func(t types.Type, from string)
	walk = func(t types.Type, from string) {
		if t == nil || seen[t] {
			return
		}
		seen[t] = true
		switch t := t.(type) {
		case *types.Named:
			if t.Obj().Pkg() == pkg {
				if n := byName[t.Obj().Name()]; n != nil && n.name != from {
					n.api = true
				}
			}
			for i := range t.TypeArgs().Len() {
				walk(t.TypeArgs().At(i), from)
			}
		case *types.Alias:
			if t.Obj().Pkg() == pkg {
				if n := byName[t.Obj().Name()]; n != nil && n.name != from {
					n.api = true
				}
			}
		case *types.Pointer:
			walk(t.Elem(), from)
		case *types.Slice:
			walk(t.Elem(), from)
		case *types.Array:
			walk(t.Elem(), from)
		case *types.Map:
			walk(t.Key(), from)
			walk(t.Elem(), from)
		case *types.Chan:
			walk(t.Elem(), from)
		case *types.Signature:
			for v := range t.Params().Variables() {
				walk(v.Type(), from)
			}
			for v := range t.Results().Variables() {
				walk(v.Type(), from)
			}
		case *types.Struct:
			for f := range t.Fields() {
				if f.Exported() || f.Embedded() {
					walk(f.Type(), from)
				}
			}
		case *types.Interface:
			for m := range t.Methods() {
				if m.Exported() {
					walk(m.Type(), from)
				}
			}
			for e := range t.EmbeddedTypes() {
				walk(e, from)
			}
		}
	}
	for _, n := range ns {
		seen = map[types.Type]bool{}
		switch obj := n.obj.(type) {
		case *types.Func:
			walk(obj.Type(), n.name)
		case *types.Var:
			walk(obj.Type(), n.name)
		case *types.TypeName:
			walk(obj.Type().Underlying(), n.name)
			if named, ok := obj.Type().(*types.Named); ok {
				for m := range named.Methods() {
					if m.Exported() {
						walk(m.Type(), n.name)
					}
				}
			}
		}
	}
}

// docText is the doc comment of a declaration go doc shows, with the
// top-level names it documents.
type docText struct {
	of   []string
	text string
}

// docTexts returns the doc comments of f's exported declarations, their
// methods, fields and interface methods included.
func docTexts(f *ast.File) []docText {
	var out []docText
	add := func(g *ast.CommentGroup, of ...string) {
		if g != nil {
			out = append(out, docText{of: of, text: g.Text()})
		}
	}
	members := func(typ ast.Expr, of string) {
		switch typ := typ.(type) {
		case *ast.StructType:
			for _, fl := range typ.Fields.List {
				add(fl.Doc, of)
				add(fl.Comment, of)
			}
		case *ast.InterfaceType:
			for _, fl := range typ.Methods.List {
				add(fl.Doc, of)
			}
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			of := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) > 0 {
				rt := d.Recv.List[0].Type
				if st, ok := rt.(*ast.StarExpr); ok {
					rt = st.X
				}
				if ix, ok := rt.(*ast.IndexExpr); ok {
					rt = ix.X
				}
				id, ok := rt.(*ast.Ident)
				if !ok || !id.IsExported() {
					continue
				}
				of = id.Name
			}
			add(d.Doc, of)
		case *ast.GenDecl:
			var group []string
			for _, sp := range d.Specs {
				switch sp := sp.(type) {
				case *ast.TypeSpec:
					if sp.Name.IsExported() {
						group = append(group, sp.Name.Name)
						add(sp.Doc, sp.Name.Name)
						add(sp.Comment, sp.Name.Name)
						members(sp.Type, sp.Name.Name)
					}
				case *ast.ValueSpec:
					var of []string
					for _, n := range sp.Names {
						if n.IsExported() {
							of = append(of, n.Name)
						}
					}
					if len(of) > 0 {
						group = append(group, of...)
						add(sp.Doc, of...)
						add(sp.Comment, of...)
					}
				}
			}
			if len(group) > 0 {
				add(d.Doc, group...)
			}
		}
	}
	return out
}

// exampleRanges returns the extents of f's Example functions.
func exampleRanges(f *ast.File) [][2]token.Pos {
	var out [][2]token.Pos
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Example") {
			out = append(out, [2]token.Pos{fd.Pos(), fd.End()})
		}
	}
	return out
}

func inRanges(rs [][2]token.Pos, p token.Pos) bool {
	for _, r := range rs {
		if r[0] <= p && p <= r[1] {
			return true
		}
	}
	return false
}

// TestSurface: no exported top-level name of a library package is used by
// another package of the repository while no user sees it (see the
// package doc); it also counts the exported names per package.
func TestSurface(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the six modules; skipped with -short")
	}
	root := repoRoot(t)
	names, libPkgs := surface(t, root)
	paths := make([]string, 0, len(libPkgs))
	for ip := range libPkgs {
		paths = append(paths, ip)
	}
	slices.Sort(paths)
	var offenders []string
	total := 0
	for _, ip := range paths {
		ns := names[ip]
		total += len(ns)
		rel := strings.TrimPrefix(strings.TrimPrefix(ip, repoPath), "/")
		if rel == "" {
			rel = "."
		}
		t.Logf("%-28s %3d exported top-level names", rel, len(ns))
		for _, n := range ns {
			users := make([]string, 0, len(n.repo))
			for u := range n.repo {
				users = append(users, u)
			}
			slices.Sort(users)
			if *list {
				t.Logf("\t%-32s examples=%d xtests=%d self=%d docs=%v pkgdoc=%v godoc=%v api=%v type=%s repo=%v",
					n.name, n.examples, n.xtests, n.self, n.docs, n.pkgDoc, n.godoc, n.api, n.ofType, users)
			}
			if len(users) == 0 || n.seen() {
				continue
			}
			if reason, ok := allowlist[n.key()]; ok && reason != "" {
				continue
			}
			offenders = append(offenders, fmt.Sprintf("%s (used by %s)", n.key(), strings.Join(users, ", ")))
		}
	}
	t.Logf("%d library packages, %d exported top-level names", len(paths), total)
	for k := range allowlist {
		i := strings.LastIndex(k, ".")
		ip := repoPath + "/" + k[:i]
		found := false
		for _, n := range names[ip] {
			if n.name == k[i+1:] {
				found = true
			}
		}
		if !found {
			t.Errorf("allowlist names %s, which is not an exported name of the library: drop it", k)
		}
	}
	if len(offenders) > 0 {
		t.Errorf("%d exported names of the library are used by another package of this repository and by nothing a user sees "+
			"(no Example, no external test of their package, no pkg.Name in README.md or docs/*.md, not in the package doc, "+
			"no other exported name showing them): move them under internal/ or unexport them, show them to users, "+
			"or allowlist them in cmd/internal/surface with a reason:\n\t%s",
			len(offenders), strings.Join(offenders, "\n\t"))
	}
}
