package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// sendCommands sends n commands with keys k-0…k-(n-1) of type "touch".
func sendCommands(t *testing.T, addr, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Deadline)
	defer cancel()
	rt, err := router.New(ctx, router.Config{Brokers: []string{addr}, Topic: topic})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	defer rt.Close()
	for i := range n {
		if _, err := rt.Send(ctx, router.Command{Key: []byte(fmt.Sprintf("k-%d", i)), Type: "touch"}); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

// sendTwice sends one command twice with the same ID, as an application
// that retries a send whose first attempt landed.
func sendTwice(t *testing.T, addr, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Deadline)
	defer cancel()
	rt, err := router.New(ctx, router.Config{Brokers: []string{addr}, Topic: topic})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	defer rt.Close()
	for range 2 {
		if _, err := rt.Send(ctx, router.Command{Key: []byte("k-twice"), Type: "touch", ID: "sent-twice"}); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

// statusJSON runs `status --json` and decodes its output.
func statusJSON(t *testing.T, args ...string) (statusReport, error) {
	t.Helper()
	out, _, err := runCLI(t, nil, append([]string{"status", "--json"}, args...)...)
	// A partition that needs attention makes status exit 2 after printing
	// the report: the report is what the callers check.
	var ee *exitError
	if err != nil && (!errors.As(err, &ee) || ee.code != ExitNeedsAttention) {
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

// TestStatusWithWorkerAndSink runs a real consumer.Worker on the SQLite
// sink, for both group protocols, and checks that status shows its
// membership, zero lag, the sink's holder and checkpoint, and the one
// command sent twice (one ID) as a duplicate the sink skipped.
func TestStatusWithWorkerAndSink(t *testing.T) {
	for _, tc := range []struct {
		protocol consumer.Protocol
		want     string
	}{
		{consumer.Cooperative, "classic"},
		{consumer.KIP848, "consumer"},
	} {
		t.Run(tc.protocol.String(), func(t *testing.T) {
			const topic, group, records = "jobs", "job-workers", 30
			addr := clitest.StartBroker(t, map[string]int32{topic: 3})
			sendCommands(t, addr, topic, records-2)
			sendTwice(t, addr, topic)

			ctx, cancel := context.WithTimeout(context.Background(), clitest.Deadline)
			defer cancel()
			dbPath := filepath.Join(t.TempDir(), "sink.db")
			s, err := sqlite.Open(ctx, sqlite.Config{Path: dbPath})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			w, err := consumer.New(ctx, consumer.Config[*sqlite.Tx]{
				Brokers: []string{addr}, Group: group, Topic: topic, Sink: s, Protocol: tc.protocol,
				ClientID:          "status-test-worker",
				SessionTimeout:    6 * time.Second,
				HeartbeatInterval: 200 * time.Millisecond,
				Handlers: map[string]consumer.Handler[*sqlite.Tx]{
					"touch": func(context.Context, *sqlite.Tx, consumer.Command) error { return nil },
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()

			args := []string{"--brokers", addr, "--group", group, "--topic", topic, "--sink", "sqlite:" + dbPath}
			var rep statusReport
			for {
				rep, err = statusJSON(t, args...)
				if err == nil && settled(rep, records) {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("status never showed one member owning every partition with lag 0: %+v (last error %v)", rep, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			member, _ := w.Member()
			if rep.Protocol != tc.want || rep.Members[0].MemberID != member || rep.Members[0].ClientID != "status-test-worker" {
				t.Fatalf("protocol %q member %+v, want %q and member %q", rep.Protocol, rep.Members[0], tc.want, member)
			}
			var dups int64
			for _, p := range rep.Partitions {
				dups += p.Sink.Duplicates
				if p.Sink.HolderMember != member || p.Sink.HolderEpoch == nil || p.Sink.NextOffset != *p.Committed {
					t.Fatalf("partition %d: sink %+v, committed %d; want holder %q and NextOffset = committed",
						p.Partition, p.Sink, *p.Committed, member)
				}
			}

			if dups != 1 {
				t.Fatalf("status shows %d duplicates skipped, want 1 (the command sent twice)", dups)
			}

			// The table shows the same.
			out, _, err := runCLI(t, nil, append([]string{"status"}, args...)...)
			if err != nil {
				t.Fatalf("status: %v", err)
			}
			for _, want := range []string{
				"group " + group + " (" + tc.want, "1 member, total lag 0", "sink sqlite:" + dbPath,
				"MEMBER", "status-test-worker", "0,1,2",
				"PARTITION", "OWNER", "COMMITTED", "LAG", "SINK NEXT", "HOLDER EPOCH", "HOLDER MEMBER", "DUPLICATES SKIPPED",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("status table lacks %q:\n%s", want, out)
				}
			}
		})
	}
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

// TestStatusShowsLag uses a plain kgo group consumer that commits what it
// has read, then more records are produced: status shows the lag.
func TestStatusShowsLag(t *testing.T) {
	const topic, group = "lagged", "readers"
	addr := clitest.StartBroker(t, map[string]int32{topic: 2})
	sendCommands(t, addr, topic, 10)
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Deadline)
	defer cancel()
	member := clitest.NewClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group), kgo.ClientID("lag-reader"),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	clitest.Consume(t, ctx, member, 10)
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	sendCommands(t, addr, topic, 7)

	var rep statusReport
	for {
		var err error
		rep, err = statusJSON(t, "--brokers", addr, "--group", group, "--topic", topic)
		if err == nil && len(rep.Members) == 1 && len(rep.Members[0].Partitions) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("status never showed the member owning both partitions: %+v (%v)", rep, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rep.TotalLag != 7 || rep.Members[0].ClientID != "lag-reader" || rep.Protocol != "classic" {
		t.Fatalf("status %+v: want total lag 7 for member lag-reader", rep)
	}
	var committed, end int64
	for _, p := range rep.Partitions {
		if p.Committed == nil || p.Sink != nil || p.Lag != p.EndOffset-*p.Committed {
			t.Fatalf("partition %+v: want a commit, no sink and lag = end - committed", p)
		}
		committed += *p.Committed
		end += p.EndOffset
	}
	if committed != 10 || end != 17 {
		t.Fatalf("committed %d end %d, want 10 and 17", committed, end)
	}

	// Once the member has left, the group still exists (it has commits):
	// no members, the same lag.
	member.Close()
	for {
		var err error
		rep, err = statusJSON(t, "--brokers", addr, "--group", group, "--topic", topic)
		if err == nil && len(rep.Members) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("status never showed the group without members: %+v (%v)", rep, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rep.State != "Empty" || rep.TotalLag != 7 || rep.Partitions[0].Owner != "" {
		t.Fatalf("status of the empty group: %+v", rep)
	}
}

func TestStatusErrors(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"here": 1})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing group", []string{"--brokers", addr, "--topic", "here", "--group", "nobody"}, `group "nobody" does not exist`},
		{"missing topic", []string{"--brokers", addr, "--topic", "gone", "--group", "g"}, `topic "gone" does not exist`},
		{"no group flag", []string{"--brokers", addr, "--topic", "here"}, "--group is required"},
		{"no topic flag", []string{"--brokers", addr, "--group", "g"}, "--topic is required"},
		{"bad sink", []string{"--brokers", addr, "--topic", "here", "--group", "g", "--sink", "mongodb://x"}, `unknown sink kind "mongodb"`},
		{"unreachable", []string{"--brokers", clitest.FreeAddr(t), "--topic", "here", "--group", "g", "--timeout", "2s"}, "cannot reach the brokers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCLI(t, nil, append([]string{"status"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("status %v: %v, want an error containing %q", tc.args, err, tc.want)
			}
			if out != "" {
				t.Fatalf("stdout not empty on failure: %q", out)
			}
		})
	}
}

func TestStatusMissingGroupExitCode(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"here": 1})
	p := clitest.Start(t, []string{"status", "--topic", "here", "--group", "nobody"}, "WORKROUTER_BROKERS="+addr)
	if code := p.Wait(t); code == 0 {
		t.Fatalf("exit code 0 for a missing group; stdout %q", p.Stdout)
	}
	if stderr := p.Stderr.String(); stderr != "workrouter: group \"nobody\" does not exist (no members and no committed offsets)\n" {
		t.Fatalf("stderr %q", stderr)
	}
}
