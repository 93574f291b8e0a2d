package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
)

// TestMain doubles as the workrouter binary: with WORKROUTER_TEST_MAIN=1 the
// re-executed test binary runs the product's root command with its
// arguments, as cmd/workrouter's main does, so process-level tests
// exercise the real command, signals and exit codes included.
func TestMain(m *testing.M) {
	if os.Getenv("WORKROUTER_TEST_MAIN") == "1" {
		os.Exit(Run(Root()))
	}
	goleak.VerifyTestMain(m)
}

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"listen":              "WORKROUTER_LISTEN",
		"data-dir":            "WORKROUTER_DATA_DIR",
		"min-session-timeout": "WORKROUTER_MIN_SESSION_TIMEOUT",
	} {
		if got := EnvName(flag); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", flag, got, want)
		}
	}
}

func execRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := Root()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestVersionCommand(t *testing.T) {
	out, err := execRoot(t, "version")
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	if !strings.HasPrefix(out, "workrouter ") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("version printed %q; want the module version and %s", out, runtime.Version())
	}
}

// runCLI runs the workrouter command tree in process (clitest.Run).
func runCLI(t *testing.T, stdin io.Reader, args ...string) (string, string, error) {
	t.Helper()
	return clitest.Run(t, Root(), stdin, args...)
}

// oneLineFailure runs workrouter as a process and asserts that it fails
// with one line naming every string of want (clitest.OneLineFailure).
func oneLineFailure(t *testing.T, args []string, want ...string) string {
	t.Helper()
	return clitest.OneLineFailure(t, "workrouter", args, want...)
}
