package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
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

// deadline bounds a wait that would otherwise hang on failure; passing runs
// finish long before it.
const deadline = 60 * time.Second

// syncBuffer is a bytes.Buffer safe for the exec copier goroutine and the
// test to share; it also reports the first complete line written to it.
type syncBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	firstLine chan string
	sent      bool
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{firstLine: make(chan string, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.buf.Write(p)
	if !s.sent {
		if line, _, ok := strings.Cut(s.buf.String(), "\n"); ok {
			s.sent = true
			s.firstLine <- line
		}
	}
	return n, err
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// proc is a workrouter subprocess.
type proc struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{} // closed when Wait returned
}

// command prepares the test binary to run as workrouter with args, with the
// WORKROUTER_* environment cleared and then set from env ("K=V" entries).
func command(args []string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WORKROUTER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "WORKROUTER_TEST_MAIN=1")
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

func startProc(t *testing.T, args []string, env ...string) *proc {
	t.Helper()
	p := &proc{cmd: command(args, env...), stdout: newSyncBuffer(), stderr: newSyncBuffer(), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", args, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(deadline):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("process did not exit; stderr:\n%s", p.stderr)
		return -1
	}
}

func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func consume(t *testing.T, ctx context.Context, cl *kgo.Client, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records before the deadline: %v", len(got), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	slices.Sort(got)
	return got
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
