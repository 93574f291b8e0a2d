package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	buildDir  string
)

// labBinary builds the workrouter-lab command (demo, chaos, the embedded
// broker) from this checkout once per test binary, static (CGO_ENABLED=0),
// so that it also runs in workrouter's image (startBrokerImage copies it
// there). The demo and chaos start worker processes of it.
func labBinary() (string, error) {
	buildOnce.Do(func() {
		root, err := filepath.Abs("..")
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "workrouter-it-"); buildErr != nil {
			return
		}
		stops = append(stops, func() { os.RemoveAll(buildDir) })
		binary = filepath.Join(buildDir, "workrouter-lab")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/workrouter-lab")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building workrouter-lab: %w\n%s", err, out)
		}
	})
	return binary, buildErr
}

// workrouterBinary is labBinary, failing t if it cannot be built.
func workrouterBinary(t *testing.T) string {
	t.Helper()
	bin, err := labBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runWorkrouter runs the binary with args and returns its stdout, stderr
// and exit code.
func runWorkrouter(t *testing.T, timeout time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, workrouterBinary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WORKROUTER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("workrouter %v did not finish within %v; stdout:\n%s\nstderr:\n%s", args, timeout, &stdout, &stderr)
	}
	code := 0
	if err != nil {
		code = cmd.ProcessState.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestDemo runs `workrouter-lab demo --brokers` on each cluster: a frozen
// worker process's late write is rejected, and every invariant holds.
func TestDemo(t *testing.T) {
	clean := regexp.MustCompile(`^demo: produced=([0-9]+) applied=([0-9]+) duplicates=0 lost=0 order_violations=0 stale_rejected=[1-9][0-9]*$`)
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			out, stderr, code := runWorkrouter(t, 5*time.Minute, "demo", "--brokers", strings.Join(tg.brokers, ","),
				"--session-timeout", tg.session.String())
			m := clean.FindStringSubmatch(lastLine(out))
			if code != 0 || m == nil || m[1] != m[2] {
				t.Fatalf("demo on %s: exit %d, last line %q\n%s\n%s", tg.name, code, lastLine(out), out, stderr)
			}
		})
	}
}

// TestChaos runs a short seeded chaos profile on each cluster and group
// protocol, with every fault kind that needs no embedded broker.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: 40-second chaos profiles")
	}
	clean := regexp.MustCompile(`^chaos: faults=[1-9][0-9]* kinds=6 commands=[1-9][0-9]* stale_rejected=[1-9][0-9]* dead_letters=[0-9]+ gap_dead_letters=[0-9]+ duplicates_skipped=[1-9][0-9]* v_samples=[1-9][0-9]* violations=0$`)
	for _, tg := range targets(t) {
		for _, p := range tg.protocols() {
			t.Run(tg.protocolName(p), func(t *testing.T) {
				out, stderr, code := runWorkrouter(t, 8*time.Minute, "chaos", "--brokers", strings.Join(tg.brokers, ","),
					"--duration", "40s", "--seed", "1", "--protocol", p.String(), "--session-timeout", tg.session.String())
				if code != 0 || !clean.MatchString(lastLine(out)) {
					t.Fatalf("chaos on %s: exit %d, last line %q\n%s\n%s", tg.protocolName(p), code, lastLine(out), out, stderr)
				}
			})
		}
	}
}
