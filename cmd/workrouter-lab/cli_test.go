package main

// The helpers of the tests that run the product's commands (produce,
// status, dlq, fences) of this binary, in-process or as processes, beside
// its harness. Their twins for the product's own tests are in
// cmd/internal/cli.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/cli"
)

type (
	statusReport    = admin.StatusReport
	statusPartition = admin.StatusPartition
)

// dlqJSON is a row of `dlq list --json`: the fields these tests read.
type dlqJSON struct {
	ID        int64  `json:"id"`
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       *struct {
		Text   *string `json:"text,omitempty"`
		Base64 *string `json:"base64,omitempty"`
	} `json:"key"`
	Type     string `json:"type"`
	Reason   string `json:"reason"`
	Error    string `json:"error"`
	Attempts int    `json:"attempts"`
	State    string `json:"state"`
}

// startCLITestBroker starts an embedded broker on a free port with the
// given topics and returns its address; it is closed when the test ends.
func startCLITestBroker(t *testing.T, topics map[string]int32) string {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Topics: topics, MinSessionTimeout: time.Second})
	if err != nil {
		t.Fatalf("broker.Start: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b.Addr()
}

// runCLI runs the workrouter-lab command tree in-process with args and stdin,
// and returns what it wrote to stdout and stderr and its error.
func runCLI(t *testing.T, stdin io.Reader, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var stdout, stderr bytes.Buffer
	root := newRootCmd()
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

// freeAddr returns a local address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// refusedAddr returns a loopback address whose port the test holds bound
// but not listening until it ends: a connection to it is refused at once,
// and no listener started meanwhile (another test's broker) can take the
// port, as one can take freeAddr's after it is closed.
func refusedAddr(t *testing.T) string {
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

// endOffsetSum returns the sum of the topic's end offsets: the number of
// records in it when nothing was deleted.
func endOffsetSum(t *testing.T, addr, topic string) int64 {
	t.Helper()
	adm := kadm.NewClient(newClient(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("ListEndOffsets: %v / %v", err, ends.Error())
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// statusJSON runs `status --json` and decodes its output.
func statusJSON(t *testing.T, args ...string) (statusReport, error) {
	t.Helper()
	out, _, err := runCLI(t, nil, append([]string{"status", "--json"}, args...)...)
	// A partition that needs attention makes status exit 2 after printing
	// the report: the report is what the callers check.
	if err != nil && cli.ExitCode(err) != cli.ExitNeedsAttention {
		return statusReport{}, err
	}
	var rep statusReport
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("--json printed %d lines, want one JSON object:\n%s", strings.Count(out, "\n"), out)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, out)
	}
	return rep, nil
}

// settled reports whether rep shows one member owning all partitions,
// every record committed in Kafka and applied in the sink.
func settled(rep statusReport, records int64) bool {
	if len(rep.Members) != 1 || len(rep.Members[0].Partitions) != len(rep.Partitions) || rep.TotalLag != 0 {
		return false
	}
	var committed, applied int64
	for _, p := range rep.Partitions {
		if p.Committed == nil || p.Sink == nil || p.Owner != rep.Members[0].MemberID {
			return false
		}
		committed += *p.Committed
		applied += p.Sink.NextOffset
	}
	return committed == records && applied == records
}

// oneLineFailure runs workrouter-lab with args as a process and asserts
// that it exits non-zero with exactly one "workrouter-lab: …" line on stderr that
// contains every string of want, and nothing on stdout. It returns the
// line.
func oneLineFailure(t *testing.T, args []string, want ...string) string {
	t.Helper()
	p := startProc(t, args)
	code := p.wait(t)
	stderr, stdout := p.stderr.String(), p.stdout.String()
	if code == 0 {
		t.Fatalf("workrouter %s: exit code 0, want non-zero; stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout, stderr)
	}
	if !strings.HasPrefix(stderr, "workrouter-lab: ") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("workrouter %s: stderr is not one \"workrouter-lab: …\" line:\n%s", strings.Join(args, " "), stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("workrouter %s: %q does not contain %q", strings.Join(args, " "), stderr, w)
		}
	}
	if stdout != "" {
		t.Errorf("workrouter %s: stdout not empty on failure: %q", strings.Join(args, " "), stdout)
	}
	return stderr
}
