package deploy

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stage is one stage of the Dockerfile: its FROM line and its
// instructions (continuation lines joined).
type stage struct {
	from  string
	instr []string
}

// parseDockerfile splits the Dockerfile into stages; comments and blank
// lines are dropped.
func parseDockerfile(t *testing.T) []stage { return parseDockerfileAt(t, "Dockerfile") }

// parseDockerfileAt is parseDockerfile of the file name.
func parseDockerfileAt(t *testing.T, name string) []stage {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []stage
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if l, ok := strings.CutSuffix(line, "\\"); ok {
			cur += l + " "
			continue
		}
		line, cur = cur+line, ""
		if from, ok := strings.CutPrefix(line, "FROM "); ok {
			stages = append(stages, stage{from: from})
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %q before the first FROM", line)
		}
		stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

// shellWords splits a RUN command's words, honouring double quotes.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// TestDockerfile checks what can be checked without a container engine
// (there is none here): the final stage is a distroless static image that
// runs the binary as a numeric non-root user; the build stage builds with
// CGO_ENABLED=0 from a context holding every module go.work names; and
// its build command, run here as a plain go build of the same package,
// gives a static binary (no ELF interpreter, no shared library) that runs
// and is the product (no embedded broker).
func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t)
	if len(stages) != 2 {
		t.Fatalf("%d stages, want a build stage and a final one", len(stages))
	}
	build, final := stages[0], stages[1]
	if !strings.HasPrefix(build.from, "golang:") || !strings.HasSuffix(build.from, " AS build") {
		t.Errorf("build stage FROM %q: want golang:… AS build", build.from)
	}
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") || !strings.HasSuffix(final.from, ":nonroot") {
		t.Errorf("final stage FROM %q: want a distroless static nonroot image", final.from)
	}
	if !slices.Contains(build.instr, "ENV CGO_ENABLED=0") {
		t.Errorf("the build stage does not set CGO_ENABLED=0: %v", build.instr)
	}
	if !slices.Contains(build.instr, "COPY . .") {
		t.Errorf("the build stage does not copy the whole context (go.work needs every module): %v", build.instr)
	}
	i := slices.IndexFunc(final.instr, func(s string) bool { return strings.HasPrefix(s, "USER ") })
	if i < 0 || final.instr[i] != "USER 65532:65532" {
		t.Errorf("final stage: want USER 65532:65532 (numeric, non-root), have %v", final.instr)
	}
	if !slices.Contains(final.instr, `ENTRYPOINT ["/workrouter"]`) || !slices.Contains(final.instr, "COPY --from=build /out/workrouter /workrouter") {
		t.Errorf("final stage does not copy and run /workrouter: %v", final.instr)
	}

	// Nothing go.work needs is kept out of the build context.
	ignore, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.ReadFile("../go.work")
	if err != nil {
		t.Fatal(err)
	}
	// The legacy builder reads only the context's .dockerignore: the same
	// patterns.
	legacy, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatalf("no .dockerignore at the repository root for the legacy builder: %v", err)
	}
	if a, b := ignorePatterns(ignore), ignorePatterns(legacy); !slices.Equal(a, b) {
		t.Errorf("Dockerfile.dockerignore's patterns %q and the root .dockerignore's %q differ", a, b)
	}
	for _, pattern := range ignorePatterns(ignore) {
		for _, line := range strings.Split(string(work), "\n") {
			dir := strings.TrimPrefix(strings.TrimSpace(line), "./")
			if dir != "" && !strings.ContainsAny(dir, " ()") && dir != "." {
				if ok, _ := filepath.Match(pattern, dir); ok {
					t.Errorf("Dockerfile.dockerignore pattern %q excludes module %s", pattern, dir)
				}
			}
		}
	}

	if testing.Short() {
		t.Skip("the build itself is skipped with -short")
	}
	j := slices.IndexFunc(build.instr, func(s string) bool { return strings.HasPrefix(s, "RUN go build ") })
	if j < 0 {
		t.Fatalf("no RUN go build in the build stage: %v", build.instr)
	}
	args := shellWords(strings.TrimPrefix(build.instr[j], "RUN "))
	o := slices.Index(args, "-o")
	if o < 0 || o+1 >= len(args) || args[len(args)-1] != "./cmd/workrouter" {
		t.Fatalf("build command %q: want go build … -o PATH ./cmd/workrouter", args)
	}
	bin := filepath.Join(t.TempDir(), "workrouter")
	args[o+1] = bin
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = ".." // the build context: the repository root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary asks for an ELF interpreter: it is not static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (%v): it is not static", libs, err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "workrouter ") {
		t.Fatalf("%s version: %q, %v", bin, out, err)
	}
	// The image runs the product: the lab's commands (the embedded
	// broker, the demo, the harness) are cmd/workrouter-lab's.
	if out, err := exec.Command(bin, "broker").CombinedOutput(); err == nil || !strings.Contains(string(out), `unknown command "broker"`) {
		t.Errorf("%s broker: %q, %v; want an unknown command (the image's binary is the product, not the lab)", bin, out, err)
	}
}

// ignorePatterns returns the patterns of a .dockerignore file, one per
// line, without comments and blank lines.
func ignorePatterns(b []byte) []string {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}
