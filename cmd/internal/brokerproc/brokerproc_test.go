package brokerproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// TestMain doubles as the harness broker: with EnvHarnessBroker=1 the
// re-executed test binary runs Main with its arguments.
func TestMain(m *testing.M) {
	if os.Getenv(EnvHarnessBroker) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// startTestBroker starts a harness broker from the test binary with a topic
// "t" of two partitions.
func startTestBroker(t *testing.T) *Process {
	t.Helper()
	dir := t.TempDir()
	p, err := Start(context.Background(), cluster.Binary{Argv: []string{os.Args[0]}}, Config{
		DataDir: filepath.Join(dir, "data"), SyncWrites: true, Control: filepath.Join(dir, "c.sock"),
		Topic: "t", Partitions: 2, MinSessionTimeout: 100 * time.Millisecond,
		BrokerConfigs: map[string]string{"group.consumer.heartbeat.interval.ms": "200"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.Stop(10 * time.Second) {
			t.Errorf("the broker did not stop cleanly")
		}
	})
	return p
}

// TestRestartKeepsAcknowledgedRecords: after a SIGKILL, the broker comes
// back on the same address with every record it acknowledged at its
// offset, and a client that produced before the kill produces again.
func TestRestartKeepsAcknowledgedRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startTestBroker(t)
	addr, pid := p.Addr(), p.Pid()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	acked := map[string]int64{} // value → offset
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			v := fmt.Sprintf("v%d", i)
			r, err := cl.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 2), Value: []byte(v)}).First()
			if err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
			acked[v] = r.Offset
		}
	}
	produce(0, 40)
	if err := p.Restart(ctx); !errors.Is(err, ErrRunning) {
		t.Fatalf("Restart of a running broker: %v, want ErrRunning", err)
	}
	if !p.Kill() {
		t.Fatal("the broker did not die of SIGKILL")
	}
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr || p.Pid() == pid {
		t.Fatalf("restarted at %s pid %d; want %s and a new process (was %d)", p.Addr(), p.Pid(), addr, pid)
	}
	produce(40, 50) // the same client, reconnected

	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := map[string]int64{}
	for len(got) < len(acked) && ctx.Err() == nil {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got[string(r.Value)] = r.Offset })
	}
	for v, off := range acked {
		if g, ok := got[v]; !ok || g != off {
			t.Errorf("record %s acknowledged at offset %d; after the restart: %d (found %v)", v, off, g, ok)
		}
	}
}

// TestControlInterceptsGroupRequests: the control channel makes the broker
// process hold back a member's heartbeats and answer its heartbeats with a
// coordinator error, and says how many requests it acted on.
func TestControlInterceptsGroupRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startTestBroker(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Addr()), kgo.ConsumeTopics("t"), kgo.ConsumerGroup("g"),
		kgo.SessionTimeout(3*time.Second), kgo.HeartbeatInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var member string
	for member == "" && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		if gs, err := adm.DescribeGroups(ctx, "g"); err == nil {
			for _, m := range gs["g"].Members {
				member = m.MemberID
			}
		}
	}
	end, err := p.Blackhole(ctx, member)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Blackhole(ctx, member); err == nil {
		t.Error("a second blackhole while one is active was accepted")
	}
	time.Sleep(time.Second)
	if n, err := end(); err != nil || n == 0 {
		t.Fatalf("blackhole held %d heartbeats (%v), want some", n, err)
	}
	if _, err := end(); err == nil {
		t.Error("ending a blackhole twice was accepted")
	}
	end, err = p.Coordinator(ctx, member, CoordRebalancing, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n, err := end(); err != nil || n == 0 {
		t.Fatalf("coordinator fault answered %d requests (%v), want some", n, err)
	}
	if _, err := p.Coordinator(ctx, member, CoordMode(7), time.Second); err == nil {
		t.Error("an unknown coordinator mode was accepted")
	}
}

func TestArgsRoundTrip(t *testing.T) {
	want := Config{Listen: "127.0.0.1:9", DataDir: "/d", SyncWrites: true, Topic: "t", Partitions: 3,
		MinSessionTimeout: time.Second, BrokerConfigs: map[string]string{"a": "1", "b": "x=y"}, Control: "/c", Verbose: true}
	got, err := parseArgs(want.Args())
	if err != nil {
		t.Fatal(err)
	}
	if got.Listen != want.Listen || got.DataDir != want.DataDir || !got.SyncWrites || got.Topic != want.Topic ||
		got.Partitions != 3 || got.MinSessionTimeout != time.Second || got.Control != "/c" || !got.Verbose ||
		len(got.BrokerConfigs) != 2 || got.BrokerConfigs["b"] != "x=y" {
		t.Fatalf("parseArgs(Args()) = %+v, want %+v", got, want)
	}
	for _, bad := range [][]string{{}, {"--data-dir", "/d", "--topic", "t"}, append(want.Args(), "extra"), {"--broker-config", "novalue"}} {
		if _, err := parseArgs(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("parseArgs(%v) = %v, want ErrConfig", bad, err)
		}
	}
	if _, err := Start(context.Background(), cluster.Binary{}, want, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("Start without a binary: %v, want ErrConfig", err)
	}
}

func TestErrorResponse(t *testing.T) {
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	if r := errorResponse(hb, kerr.RebalanceInProgress.Code).(*kmsg.HeartbeatResponse); r.ErrorCode != kerr.RebalanceInProgress.Code || r.GetVersion() != 4 {
		t.Fatalf("heartbeat response %+v", r)
	}
	oc := kmsg.NewPtrOffsetCommitRequest()
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = "t"
	for p := int32(0); p < 2; p++ {
		op := kmsg.NewOffsetCommitRequestTopicPartition()
		op.Partition = p
		ot.Partitions = append(ot.Partitions, op)
	}
	oc.Topics = append(oc.Topics, ot)
	r := errorResponse(oc, kerr.NotCoordinator.Code).(*kmsg.OffsetCommitResponse)
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 2 || r.Topics[0].Partitions[1].ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("offset commit response %+v", r)
	}
	var got []string
	for m := CoordNotCoordinator; m <= CoordNoReply+1; m++ {
		got = append(got, m.String())
	}
	if !slices.Equal(got, []string{"NOT_COORDINATOR", "REBALANCE_IN_PROGRESS", "no reply", "CoordMode(3)"}) {
		t.Fatalf("CoordMode strings %v", got)
	}
}
