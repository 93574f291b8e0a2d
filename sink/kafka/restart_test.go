package kafka_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/kafkacluster"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
)

// brokerEnv, set to "<data dir>|<port>", makes the test binary a kfake
// broker process (TestBrokerRestart's): one broker on 127.0.0.1:<port>
// keeping its state in the data dir, every batch synced, as the lab's harness broker does
// (cmd/internal/brokerproc). It prints "READY" when it serves, and runs
// until it is killed.
const brokerEnv = "WR_KAFKASINK_BROKER"

func childBroker() int {
	dir, port, ok := strings.Cut(os.Getenv(brokerEnv), "|")
	p, err := strconv.Atoi(port)
	if !ok || err != nil {
		fmt.Fprintln(os.Stderr, "broker: bad", brokerEnv)
		return 2
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(p), kfake.DataDir(dir), kfake.SyncWrites(),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "broker:", err)
		return 1
	}
	defer c.Close()
	fmt.Println("READY")
	select {}
}

// brokerProc is a kfake broker in a process of its own, with a data dir,
// that a test kills with SIGKILL and starts again on the same address.
type brokerProc struct {
	dir, addr string
	port      int
	cmd       *exec.Cmd
	done      chan struct{}
	kills     int // SIGKILLs the process died of
}

func startBrokerProc(t *testing.T) *brokerProc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	bp := &brokerProc{dir: filepath.Join(t.TempDir(), "data"), port: port, addr: "127.0.0.1:" + strconv.Itoa(port)}
	bp.start(t)
	t.Cleanup(func() { bp.kill(t) })
	return bp
}

func (bp *brokerProc) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), brokerEnv+"="+bp.dir+"|"+strconv.Itoa(bp.port))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "READY" {
				ready <- true
			}
		}
		ready <- false
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the broker process exited before it was ready")
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the broker process was not ready within 60s")
	}
	bp.cmd, bp.done = cmd, done
}

// kill kills the broker process with SIGKILL and waits for its end.
func (bp *brokerProc) kill(t *testing.T) {
	t.Helper()
	if bp.cmd == nil {
		return
	}
	_ = bp.cmd.Process.Signal(syscall.SIGKILL)
	<-bp.done
	if ws, ok := bp.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		bp.kills++
	}
	bp.cmd = nil
}

// restart is the fault: SIGKILL, then the same broker on the same address
// and data dir.
func (bp *brokerProc) restart(t *testing.T) {
	t.Helper()
	before := bp.kills
	bp.kill(t)
	if bp.kills != before+1 {
		t.Fatal("the broker process did not die of the SIGKILL")
	}
	bp.start(t)
	t.Logf("broker restarted (SIGKILL %d) on %s", bp.kills, bp.addr)
}

// TestBrokerRestart: issue 43. The broker (kfake in a process of its own,
// with a data dir, as the lab's chaos harness runs it) is killed with
// SIGKILL and started again on the same address: between two
// transactions, inside a transaction before its offset commit, and before
// its EndTxn. kfake forgets a transaction open at the kill (it bumps the
// producer's epoch), so the sink's producer fails with an epoch error and
// then, at its EndTxn, INVALID_TXN_STATE, after which franz-go holds its
// producer ID fatal (KIP-890): the sink must replace that producer, not
// put it back in its pool (red without: every later Apply fails with
// "producer ID has a fatal, unrecoverable error", a stall), and the
// failed Apply is a sink failure, not a fence, so it is retried. After
// the restart every input has exactly one output visible to a
// read_committed consumer, and the sink keeps applying.
func TestBrokerRestart(t *testing.T) {
	cuts := []string{"between-transactions", "before-offset-commit", "before-end-txn"}
	t.Run("kfake", func(t *testing.T) {
		for _, at := range cuts {
			t.Run(at, func(t *testing.T) {
				bp := startBrokerProc(t)
				b := &broker{name: "kfake-process", addrs: []string{bp.addr}, sfx: suffix()}
				testBrokerRestart(t, b, at, true, bp.restart)
			})
		}
	})
	// One private Apache Kafka node (internal/kafkacluster), killed with
	// SIGKILL and started again on the same data: Kafka keeps an open
	// transaction across the restart, so the sink may go on without a
	// replacement; each input's output must still be visible once.
	t.Run("kafka", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a Kafka node (a JVM)")
		}
		kc := kafkacluster.Testing(t, kafkacluster.Config{Nodes: 1})
		node := kc.Nodes()[0]
		restart := func(t *testing.T) {
			t.Helper()
			if err := node.Kill(); err != nil {
				t.Fatalf("kill the Kafka node: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := node.Start(ctx); err != nil {
				t.Fatalf("start the Kafka node again: %v", err)
			}
			t.Logf("Kafka node %d killed (SIGKILL) and started again", node.ID)
		}
		for _, at := range cuts {
			t.Run(at, func(t *testing.T) {
				b := &broker{name: "kafka-node", addrs: kc.Brokers(), sfx: suffix()}
				testBrokerRestart(t, b, at, false, restart)
			})
		}
	})
}

// testBrokerRestart applies inputs 0 to 7 one batch each, with the
// broker restarted at the cut at input 4, retrying each failed Apply (a
// sink failure, never a fence). wantReplaced: the broker loses the
// transaction (kfake), so a cut inside one must replace the producer.
func testBrokerRestart(t *testing.T, b *broker, at string, wantReplaced bool, restart func(*testing.T)) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	tp := b.sinkTopics(t)
	in := b.topic(t, "in", 1, nil)
	// The first attempt at the faulted input produces to a topic of its
	// own, and the retries to the output topic: so the lost transaction's
	// record is the last of its partition, as a batch whose retry writes
	// elsewhere (or never comes) leaves it, and a reader waiting for that
	// partition's last offset needs its ABORT marker.
	first := b.topic(t, "first-attempt", 1, nil)
	var logs syncBuffer
	s := b.newSink(t, tp, func(c *kafka.Config) {
		c.ClientFenceOnly, c.Producers, c.TransactionTimeout = true, 1, 5*time.Second
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	tok := epochs.Token{Group: "wr-kafkasink-restart-" + b.sfx, Topic: in, Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	const inputs, faultAt = 8, 4
	var hookOnce sync.Once
	hook := func() { hookOnce.Do(func() { restart(t) }) }
	switch at {
	case "before-offset-commit":
		kafka.SetTestBeforeOffsetCommit(func() {})
		defer kafka.SetTestBeforeOffsetCommit(nil)
	case "before-end-txn":
		kafka.SetTestBeforeEndTxn(func() {})
		defer kafka.SetTestBeforeEndTxn(nil)
	}
	failures := 0
	for off := int64(0); off < inputs; off++ {
		if off == faultAt {
			switch at {
			case "between-transactions":
				restart(t)
			case "before-offset-commit":
				kafka.SetTestBeforeOffsetCommit(hook)
			case "before-end-txn":
				kafka.SetTestBeforeEndTxn(hook)
			}
		}
		for attempt := 1; ; attempt++ {
			to := tp.out
			if off == faultAt && attempt == 1 {
				to = first
			}
			res, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{off}}, produceEffect(to, []int64{off}, "out"))
			if err == nil {
				if res.NextOffset != off+1 {
					t.Fatalf("Apply of input %d: %+v", off, res)
				}
				break
			}
			if errors.Is(err, sink.ErrFenced) || !s.IsSinkFailure(err) {
				t.Fatalf("Apply of input %d after the broker restart: %v; want a sink failure that is not sink.ErrFenced", off, err)
			}
			failures++
			t.Logf("Apply of input %d, attempt %d: %v", off, attempt, err)
			if attempt == 10 || ctx.Err() != nil {
				t.Fatalf("input %d never applied after the broker restart (%d attempts; stats %+v): last error %v", off, attempt, s.Stats(), err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	st := s.Stats()
	t.Logf("%s: %d failed Applies; stats %+v", at, failures, st)
	if wantReplaced && at != "between-transactions" && (st.ProducersReplaced < 1 || st.AbortMarkers < 1) {
		t.Fatalf("stats %+v: no producer replaced, the fault did not hit a transaction", st)
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	// A reader that reads up to the last offset below the end (as the
	// lab's checker does) must get there (before any sentinel is written): a lost transaction without an
	// ABORT marker is never returned by a read_committed fetch, and such
	// a reader waits forever.
	for _, topic := range []string{first, tp.out, tp.checkpoint} {
		if err := readToEnd(rctx, b, topic, 15*time.Second); err != nil {
			t.Fatalf("stats %+v: %v", st, err)
		}
	}
	got := map[int64]int{}
	var recs []*kgo.Record
	for _, topic := range []string{tp.out, first} {
		r, err := b.tryReadCommittedCtx(rctx, topic)
		if err != nil {
			t.Fatalf("read_committed read of the outputs after the restart: %v", err)
		}
		recs = append(recs, r...)
	}
	for _, r := range recs {
		off, _ := strconv.ParseInt(string(r.Key), 10, 64)
		got[off]++
	}
	for off := int64(0); off < inputs; off++ {
		if got[off] != 1 {
			t.Fatalf("input %d has %d outputs visible to read_committed, want 1 (all: %v)", off, got[off], got)
		}
	}
	if st.ProducersReplaced > 0 && !strings.Contains(logs.String(), "kafka sink: transactional producer replaced") {
		t.Fatalf("no Warn line for the %d replacements", st.ProducersReplaced)
	}
}

// readToEnd reads partition 0 of topic with read_committed (control
// records kept) until the record at the last offset below the end the
// partition had at the call arrives, or fails after idle without one.
func readToEnd(ctx context.Context, b *broker, topic string, idle time.Duration) error {
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(b.addrs...))
	if err != nil {
		return err
	}
	defer adm.Close()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	end, _ := ends.Lookup(topic, 0)
	if end.Offset <= 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		return err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, idle)
	defer cancel()
	last := int64(-1)
	for last < end.Offset-1 {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			return fmt.Errorf("read_committed read of %s stuck at offset %d, below its last offset %d (a transaction without a marker?)", topic, last, end.Offset-1)
		}
		fs.EachRecord(func(r *kgo.Record) { last = max(last, r.Offset) })
	}
	return nil
}
