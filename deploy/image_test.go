package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dockerCLI runs the docker CLI and returns its trimmed standard output.
func dockerCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && errb.Len() > 0 {
		t.Logf("docker %s: %s", strings.Join(args, " "), strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), err
}

// runtimeInstr returns the instructions among instr that set what a
// container runs: USER, ENTRYPOINT, CMD and EXPOSE.
func runtimeInstr(instr []string) []string {
	var out []string
	for _, s := range instr {
		for _, k := range []string{"USER ", "ENTRYPOINT ", "CMD ", "EXPOSE "} {
			if strings.HasPrefix(s, k) {
				out = append(out, s)
			}
		}
	}
	return out
}

// TestLocalImage builds the image CI can build without a registry
// (Dockerfile.local: a prebuilt static binary on a FROM scratch base
// carrying the host's CA certificates and distroless's nonroot user) and
// checks that it runs as deploy/Dockerfile's does: the same USER,
// ENTRYPOINT, CMD and EXPOSE lines in both files, and in the built image
// (docker inspect) the entrypoint /workrouter and the user 65532, which
// `workrouter version` runs as. Without a healthy container engine it
// skips with a message, except under CI=true, where it fails.
func TestLocalImage(t *testing.T) {
	users := parseDockerfile(t)
	local := parseDockerfileAt(t, "Dockerfile.local")
	if len(local) != 1 || local[0].from != "scratch" {
		t.Fatalf("Dockerfile.local: want one stage FROM scratch, have %d (%v)", len(local), local)
	}
	if a, b := runtimeInstr(users[len(users)-1].instr), runtimeInstr(local[0].instr); !slices.Equal(a, b) {
		t.Fatalf("Dockerfile and Dockerfile.local run differently:\n  %v\n  %v", a, b)
	}
	if testing.Short() {
		t.Skip("the build is skipped with -short")
	}
	if v, err := dockerCLI(t, "version", "--format", "{{.Server.Version}}"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no healthy container engine (.ci/run starts dockerd): %v", err)
		}
		t.Skipf("no healthy container engine (docker version: %q, %v): the image is not built", v, err)
	}
	dir := t.TempDir()
	if out, err := exec.CommandContext(t.Context(), "bash", "local-context.sh", dir).CombinedOutput(); err != nil {
		t.Fatalf("local-context.sh: %v\n%s", err, out)
	}
	tag := "workrouter:deploy-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := dockerCLI(t, "build", "-q", "-f", "Dockerfile.local", "-t", tag, dir); err != nil {
		t.Fatalf("docker build -f deploy/Dockerfile.local: %v", err)
	}
	t.Cleanup(func() { dockerCLI(t, "rmi", "-f", tag) })
	got, err := dockerCLI(t, "inspect", "-f", "{{json .Config.Entrypoint}} {{.Config.User}} {{json .Config.Cmd}}", tag)
	if err != nil || got != `["/workrouter"] 65532:65532 ["--help"]` {
		t.Fatalf("docker inspect %s: %q, %v; want entrypoint /workrouter, user 65532:65532, cmd --help", tag, got, err)
	}
	out, err := dockerCLI(t, "run", "--rm", "--network", "host", tag, "version")
	if err != nil || !strings.HasPrefix(out, "workrouter ") {
		t.Fatalf("workrouter version in the image: %q, %v", out, err)
	}
}
