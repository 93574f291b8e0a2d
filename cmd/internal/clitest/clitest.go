// Package clitest is what the tests of the workrouter and workrouter-lab
// commands share: the test binary re-executed as the command (Start, Proc),
// the command tree run in process (Run), an embedded broker (StartBroker),
// Kafka clients and addresses that refuse connections.
//
// A test binary that uses Start must run its command when the environment
// holds WORKROUTER_TEST_MAIN=1 (see Reexecuted), from its TestMain.
package clitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/broker"
)

// Deadline bounds a wait that would otherwise hang on failure; passing runs
// finish long before it.
const Deadline = 60 * time.Second

// Reexecuted reports whether this process is the test binary re-executed
// by Start to run as the command.
func Reexecuted() bool { return os.Getenv("WORKROUTER_TEST_MAIN") == "1" }

// SyncBuffer is a bytes.Buffer safe for an exec copier goroutine and the
// test to share; it also reports the first complete line written to it.
type SyncBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	firstLine chan string
	sent      bool
}

// NewSyncBuffer returns an empty SyncBuffer.
func NewSyncBuffer() *SyncBuffer { return &SyncBuffer{firstLine: make(chan string, 1)} }

// Write appends p; the first complete line is sent on FirstLine.
func (s *SyncBuffer) Write(p []byte) (int, error) {
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

// FirstLine receives the first complete line written, once.
func (s *SyncBuffer) FirstLine() <-chan string { return s.firstLine }

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// Proc is the test binary running as the command in a subprocess.
type Proc struct {
	Cmd    *exec.Cmd
	Stdout *SyncBuffer
	Stderr *SyncBuffer
	Done   chan struct{} // closed when Wait returned
}

// Command prepares the test binary to run as the command with args, with
// the WORKROUTER_* environment cleared and then set from env ("K=V").
func Command(args []string, env ...string) *exec.Cmd {
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

// Start starts the command with args (see Command); the process is killed
// when the test ends if it is still running.
func Start(t *testing.T, args []string, env ...string) *Proc {
	t.Helper()
	p := &Proc{Cmd: Command(args, env...), Stdout: NewSyncBuffer(), Stderr: NewSyncBuffer(), Done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Stdout, p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", args, err)
	}
	go func() {
		p.Cmd.Wait()
		close(p.Done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.Done:
		default:
			p.Cmd.Process.Kill()
			<-p.Done
		}
	})
	return p
}

// Wait waits for the process to exit and returns its exit code; it fails
// the test if the process has not exited within Deadline.
func (p *Proc) Wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.Done:
		return p.Cmd.ProcessState.ExitCode()
	case <-time.After(Deadline):
		p.Cmd.Process.Kill()
		<-p.Done
		t.Fatalf("process did not exit; stderr:\n%s", p.Stderr)
		return -1
	}
}

// Interrupt sends SIGINT and fails the test unless the process then exits
// with code 0.
func (p *Proc) Interrupt(t *testing.T) {
	t.Helper()
	if err := p.Cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("SIGINT: %v", err)
	}
	if code := p.Wait(t); code != 0 {
		t.Fatalf("exit code after SIGINT = %d, want 0; stderr:\n%s", code, p.Stderr)
	}
}

// OneLineFailure runs the command with args as a process and fails the
// test unless it exits non-zero with exactly one "prog: …" line on stderr
// containing every string of want, and nothing on stdout. It returns the
// line.
func OneLineFailure(t *testing.T, prog string, args []string, want ...string) string {
	t.Helper()
	p := Start(t, args)
	code := p.Wait(t)
	stderr, stdout := p.Stderr.String(), p.Stdout.String()
	cmdline := prog + " " + strings.Join(args, " ")
	if code == 0 {
		t.Fatalf("%s: exit code 0, want non-zero; stdout:\n%s\nstderr:\n%s", cmdline, stdout, stderr)
	}
	if !strings.HasPrefix(stderr, prog+": ") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("%s: stderr is not one \"%s: …\" line:\n%s", cmdline, prog, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("%s: %q does not contain %q", cmdline, stderr, w)
		}
	}
	if stdout != "" {
		t.Errorf("%s: stdout not empty on failure: %q", cmdline, stdout)
	}
	return stderr
}

// Run runs the command tree root in process with args and stdin (none if
// nil), and returns what it wrote to stdout and stderr and its error.
func Run(t *testing.T, root *cobra.Command, stdin io.Reader, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Deadline)
	defer cancel()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	root.SetIn(stdin)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return stdout.String(), stderr.String(), err
}

// StartBroker starts an embedded broker on a free port with the given
// topics and returns its address; it is closed when the test ends.
func StartBroker(t *testing.T, topics map[string]int32) string {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Topics: topics, MinSessionTimeout: time.Second})
	if err != nil {
		t.Fatalf("broker.Start: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b.Addr()
}

// NewClient returns a client seeded with addr, closed when the test ends.
func NewClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Consume polls cl until it has n records and returns their values, sorted.
func Consume(t *testing.T, ctx context.Context, cl *kgo.Client, n int) []string {
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

// EndOffsetSum returns the sum of the topic's end offsets: the number of
// records in it when nothing was deleted.
func EndOffsetSum(t *testing.T, addr, topic string) int64 {
	t.Helper()
	adm := kadm.NewClient(NewClient(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), Deadline)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("ListEndOffsets: %v / %v", err, ends.Error())
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// FreeAddr returns a local address nothing listens on (until something
// else takes its port: see RefusedAddr).
func FreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// RefusedAddr returns a loopback address whose port the test holds bound
// but not listening until it ends: a connection to it is refused at once,
// and no listener started meanwhile (another test's broker) can take the
// port, as one can take FreeAddr's after it is closed.
func RefusedAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
