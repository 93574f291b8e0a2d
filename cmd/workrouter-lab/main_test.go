package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/cmd/internal/cli"
	"github.com/workrouter/workrouter/cmd/internal/clitest"
)

// TestMain doubles as the workrouter-lab binary: with WORKROUTER_TEST_MAIN=1
// the re-executed test binary runs main() with its arguments, so
// process-level tests exercise the real command, signals and exit codes
// included (the demo, chaos and the harness start their workers as
// processes of this same executable).
func TestMain(m *testing.M) {
	if os.Getenv("WORKROUTER_TEST_MAIN") == "1" {
		main()
		os.Exit(0) // main exits itself; this is only a guard
	}
	goleak.VerifyTestMain(m)
}

// startBroker runs `workrouter-lab broker args...` and returns the process, the
// address from its first stdout line, and that line.
func startBroker(t *testing.T, args []string, env ...string) (*clitest.Proc, string, string) {
	t.Helper()
	listeningRE := regexp.MustCompile(`^workrouter broker listening on (\S+) \((.*)\)$`)
	p := clitest.Start(t, append([]string{"broker"}, args...), env...)
	select {
	case line := <-p.Stdout.FirstLine():
		m := listeningRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("first stdout line %q does not match %v", line, listeningRE)
		}
		if _, port, err := net.SplitHostPort(m[1]); err != nil || port == "0" {
			t.Fatalf("first line %q: address %q is not a real host:port", line, m[1])
		}
		return p, m[1], line
	case <-p.Done:
		t.Fatalf("broker exited early (code %d); stderr:\n%s", p.Cmd.ProcessState.ExitCode(), p.Stderr)
	case <-time.After(clitest.Deadline):
		t.Fatalf("no first line from the broker; stderr:\n%s", p.Stderr)
	}
	return nil, "", ""
}

func TestBrokerCommandKeepsStateAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Deadline)
	defer cancel()
	dir := t.TempDir()
	const topic, group = "cmds", "workers"
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--topic", topic, "--partitions", "3"}

	// First run: produce, consume in a group, commit.
	p1, addr, line := startBroker(t, args)
	if want := fmt.Sprintf("(data dir %s; topics cmds:3)", dir); !strings.HasSuffix(line, want) {
		t.Fatalf("first line %q does not end with %q", line, want)
	}
	var want []string
	prod := clitest.NewClient(t, addr, kgo.DefaultProduceTopic(topic))
	for i := range 30 {
		v := fmt.Sprintf("cmd-%03d", i)
		want = append(want, v)
		if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte(v), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	prod.Close()

	member := clitest.NewClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if got := clitest.Consume(t, ctx, member, len(want)); !slices.Equal(got, want) {
		t.Fatalf("group consumed %v, want %v", got, want)
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	adm := kadm.NewClient(clitest.NewClient(t, addr))
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil || committed.Error() != nil {
		t.Fatalf("FetchOffsets: %v / %v", err, committed.Error())
	}
	var total int64
	committed.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != int64(len(want)) {
		t.Fatalf("committed offsets %v sum to %d, want %d", committed, total, len(want))
	}
	member.Close()
	adm.Close()
	p1.Interrupt(t)

	// Second run on the same data dir: everything is still there.
	p2, addr2, line2 := startBroker(t, args)
	if !strings.Contains(line2, "topics cmds:3") {
		t.Fatalf("first line after restart %q lacks cmds:3", line2)
	}
	adm2 := kadm.NewClient(clitest.NewClient(t, addr2))
	after, err := adm2.FetchOffsets(ctx, group)
	if err != nil || after.Error() != nil {
		t.Fatalf("FetchOffsets after restart: %v / %v", err, after.Error())
	}
	committed.Each(func(o kadm.OffsetResponse) {
		a, ok := after.Lookup(o.Topic, o.Partition)
		if !ok || a.At != o.At {
			t.Fatalf("%s/%d after restart: %+v, want offset %d", o.Topic, o.Partition, a, o.At)
		}
	})
	adm2.Close()
	reader := clitest.NewClient(t, addr2, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if got := clitest.Consume(t, ctx, reader, len(want)); !slices.Equal(got, want) {
		t.Fatalf("after restart read %v, want %v", got, want)
	}
	reader.Close()
	p2.Interrupt(t)
}

func TestBrokerCommandRejectsBadInput(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string // in the error line
	}{
		{"listen nonsense", []string{"--listen", "nonsense"}, nil, `listen address "nonsense"`},
		{"partitions zero", []string{"--listen", "127.0.0.1:0", "--partitions", "0"}, nil, "--partitions must be at least 1"},
		{"port in use", []string{"--listen", busy.Addr().String()}, nil, "address already in use"},
		{"unknown flag", []string{"--no-such-flag"}, nil, "unknown flag"},
		{"partitions zero from env", []string{"--listen", "127.0.0.1:0"}, []string{"WORKROUTER_PARTITIONS=0"}, "--partitions must be at least 1"},
		{"bad env value", []string{"--listen", "127.0.0.1:0"}, []string{"WORKROUTER_PARTITIONS=many"}, "WORKROUTER_PARTITIONS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := clitest.Start(t, append([]string{"broker"}, tc.args...), tc.env...)
			code := p.Wait(t)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero; stdout:\n%s", p.Stdout)
			}
			stderr := p.Stderr.String()
			if !strings.HasPrefix(stderr, "workrouter-lab: ") || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("stderr is not one \"workrouter-lab: ...\" line:\n%s", stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr %q does not mention %q", stderr, tc.want)
			}
			if out := p.Stdout.String(); out != "" {
				t.Fatalf("stdout not empty on failure: %q", out)
			}
		})
	}
}

func TestBrokerCommandReadsEnvironment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Deadline)
	defer cancel()
	p, addr, line := startBroker(t, []string{"--listen", "127.0.0.1:0"},
		"WORKROUTER_PARTITIONS=4", "WORKROUTER_TOPIC=alpha,beta")
	if !strings.HasSuffix(line, "(in memory; topics alpha:4,beta:4)") {
		t.Fatalf("first line %q: want topics alpha:4,beta:4 from the environment", line)
	}
	adm := kadm.NewClient(clitest.NewClient(t, addr))
	details, err := adm.ListTopics(ctx, "alpha", "beta")
	if err != nil || details.Error() != nil {
		t.Fatalf("ListTopics: %v / %v", err, details.Error())
	}
	for _, name := range []string{"alpha", "beta"} {
		if n := len(details[name].Partitions); n != 4 {
			t.Fatalf("topic %s has %d partitions, want 4", name, n)
		}
	}
	adm.Close()
	p.Interrupt(t)
}

func TestApplyEnv(t *testing.T) {
	env := map[string]string{
		"WORKROUTER_PARTITIONS":          "4",
		"WORKROUTER_LISTEN":              "10.0.0.1:1",
		"WORKROUTER_TOPIC":               "a,b",
		"WORKROUTER_MIN_SESSION_TIMEOUT": "1500ms",
		"WORKROUTER_DATA_DIR":            "",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	cmd := newBrokerCmd()
	fs := cmd.Flags()
	if err := fs.Parse([]string{"--listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	if err := cli.ApplyEnv(fs, lookup); err != nil {
		t.Fatalf("applyEnv: %v", err)
	}
	check := func(name, want string) {
		t.Helper()
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
	check("partitions", "4")
	check("listen", "127.0.0.1:0") // the command line wins
	check("topic", "[a,b]")
	check("min-session-timeout", "1.5s")
	check("data-dir", "") // empty means unset

	env["WORKROUTER_PARTITIONS"] = "x"
	cmd = newBrokerCmd()
	if err := cli.ApplyEnv(cmd.Flags(), lookup); err == nil || !strings.Contains(err.Error(), "WORKROUTER_PARTITIONS") {
		t.Fatalf("applyEnv with a bad value: %v, want an error naming WORKROUTER_PARTITIONS", err)
	}
}

func TestBrokerHelpShowsExampleAndEnv(t *testing.T) {
	out, _, err := runCLI(t, nil, "broker", "--help")
	if err != nil {
		t.Fatalf("broker --help: %v", err)
	}
	for _, want := range []string{"Examples:", "workrouter-lab broker --listen 127.0.0.1:0", "WORKROUTER_DATA_DIR", "WORKROUTER_PARTITIONS"} {
		if !strings.Contains(out, want) {
			t.Errorf("broker --help lacks %q:\n%s", want, out)
		}
	}
}

// runCLI runs the workrouter-lab command tree in process (clitest.Run).
func runCLI(t *testing.T, stdin io.Reader, args ...string) (string, string, error) {
	t.Helper()
	return clitest.Run(t, newRootCmd(), stdin, args...)
}

// oneLineFailure runs workrouter-lab as a process and asserts that it
// fails with one line naming every string of want (clitest.OneLineFailure).
func oneLineFailure(t *testing.T, args []string, want ...string) string {
	t.Helper()
	return clitest.OneLineFailure(t, "workrouter-lab", args, want...)
}
