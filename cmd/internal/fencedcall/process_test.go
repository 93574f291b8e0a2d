package fencedcall

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/cmd/internal/faults"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/eventlog"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/examples/payments"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/sqlstore"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// envWorker, set to 1, makes the test binary run the payments worker
// (workerMain) instead of the tests.
const envWorker = "FENCEDCALL_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) == "1" {
		os.Exit(workerMain(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// workerMain is the payments worker: a group member whose only handler
// charges each command through the payments service. Its sink is a memory
// sink of its own process: it fences nothing across processes, and every
// tenure starts at the log's beginning, so the service (its token check
// and its idempotency keys) is the only thing that keeps a zombie's charge
// out and each command charged once. It writes its events to fd 3 for
// package cluster, and freezes itself before its Nth batch if asked.
func workerMain(args []string) int {
	fl := flag.NewFlagSet("payments-worker", flag.ContinueOnError)
	brokers := fl.String("brokers", "", "brokers")
	group := fl.String("group", "", "group")
	url := fl.String("url", "", "the payments service")
	name := fl.String("name", "", "client ID")
	freezeAt := fl.Int64("freeze-before-batch", 0, "SIGSTOP before the Nth batch")
	session := fl.Duration("session-timeout", 2*time.Second, "session timeout")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	events := eventlog.NewWriter(os.NewFile(3, "events"), func(err error) { logger.Error("events", "err", err) })
	var s sink.Sink[*memory.Tx] = memory.New()
	if *freezeAt > 0 {
		s = faults.FreezeBeforeBatch(s, *freezeAt, func(tok epochs.Token, offsets []int64) {
			r := eventlog.Record{Kind: faults.KindFreezing, Group: tok.Group, Topic: tok.Topic, Partition: tok.Partition,
				Epoch: tok.Epoch, Member: tok.Member, FirstOffset: offsets[0], NextOffset: offsets[len(offsets)-1] + 1, Records: len(offsets)}
			_ = events.Emit(r)
		})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	client := &http.Client{Transport: &fencehttp.Transport{}, Timeout: 10 * time.Second}
	w, err := consumer.New(ctx, consumer.Config[*memory.Tx]{
		Brokers: strings.Split(*brokers, ","), Group: *group, Topic: payments.Topic, Sink: s,
		Handlers:       map[string]consumer.Handler[*memory.Tx]{payments.CommandType: payments.Charge[*memory.Tx](client, *url)},
		SessionTimeout: *session, HeartbeatInterval: 200 * time.Millisecond, RebalanceTimeout: 5 * time.Second,
		RevokeTimeout: 5 * time.Second, MaxBatch: 16, ClientID: *name, Logger: logger,
		Observers: []consumer.Observer{events},
	})
	if err != nil {
		logger.Error("payments worker", "err", err)
		return 1
	}
	select {
	case <-ctx.Done():
		if err := w.Close(); err != nil {
			logger.Error("close", "err", err)
		}
	case <-w.Done():
		logger.Error("payments worker stopped", "err", w.Err())
		return 1
	}
	return 0
}

// syncLog is a worker's log, kept for a failing test's output.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.buf.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// TestZombieChargeRefused: worker a is frozen with SIGSTOP before a batch,
// past its session timeout; worker b takes its partitions over (from the
// log's beginning: its sink is its own memory) and charges every command,
// the replays of a's answered from their first charge; a is resumed and
// its late charge is refused by the service with 409 (counted by the
// service, and seen by a as a fence that stops the partition); more
// commands are charged by b. The service's own rows hold exactly one
// charge per command.
//
// It runs with the service on SQLite and on PostgreSQL.
func TestZombieChargeRefused(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "payments.db")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		testZombieChargeRefused(t, db, sqlstore.SQLite)
	})
	t.Run("postgres", func(t *testing.T) {
		testZombieChargeRefused(t, postgresSchema(t), sqlstore.PostgreSQL)
	})
}

// postgresSchema returns a database handle on a fresh schema of the test
// server, dropped when the test ends (the test skips without a server).
func postgresSchema(t *testing.T) *sql.DB {
	t.Helper()
	dsn := testpg.DSN(t)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	schema := fmt.Sprintf("fencedcall_%d_%d", os.Getpid(), time.Now().UnixNano())
	if _, err := admin.ExecContext(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", dsn+sep+"search_path="+schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func testZombieChargeRefused(t *testing.T, db *sql.DB, dialect sqlstore.Dialect) {
	const parts = 2
	brk, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{payments.Topic: parts}, MinSessionTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { brk.Close() })

	if err := payments.Setup(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svcLog := &syncLog{}
	svc, err := payments.Service(t.Context(), db, dialect, fencehttp.Config{Registerer: reg, Logger: slog.New(slog.NewTextHandler(svcLog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc)
	t.Cleanup(srv.Close)
	outcome := func(o string) int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == o {
					return int(m.GetCounter().GetValue())
				}
			}
		}
		return 0
	}

	rt, err := router.New(t.Context(), router.Config{Brokers: []string{brk.Addr()}, Topic: payments.Topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	var ids []string
	produce := func(n int) {
		t.Helper()
		for i := range n {
			acct := fmt.Sprintf("acct-%d", (len(ids)+i)%13)
			p, _ := json.Marshal(payments.Request{Account: acct, Cents: int64(100 + i)})
			res, err := rt.Send(t.Context(), router.Command{Key: []byte(acct), Type: payments.CommandType, Payload: p})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
	}
	charged := func() map[string]int {
		got, err := payments.ChargesPerKey(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	allCharged := func() bool {
		got := charged()
		for _, id := range ids {
			if got["id:"+id] == 0 {
				return false
			}
		}
		return true
	}

	bin := cluster.Binary{Argv: []string{os.Args[0]}, Env: []string{envWorker + "=1"}}
	start := func(name string, hooks ...string) *cluster.Worker {
		t.Helper()
		log := &syncLog{}
		args := append([]string{"--brokers", brk.Addr(), "--group", "payers", "--url", srv.URL, "--name", name}, hooks...)
		wk, err := cluster.StartWorker(name, bin, log, args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			wk.Signal(syscall.SIGCONT)
			wk.Stop(15 * time.Second)
			if t.Failed() {
				t.Logf("worker %s log (tail):\n%s", name, log.String())
			}
		})
		return wk
	}
	a := start("a", "--freeze-before-batch=3")
	testwait.For(t, 30*time.Second, "a to claim every partition", func() bool { return len(a.Owned()) == parts })
	b := start("b")
	testwait.For(t, 30*time.Second, "b to claim a partition", func() bool { return len(b.Owned()) > 0 })
	produce(300)

	testwait.For(t, 60*time.Second, "a to freeze before its batch", func() bool { return len(a.Freezes()) > 0 && a.Stopped() })
	fz := a.Freezes()[0]
	testwait.For(t, 60*time.Second, "b to take the frozen partition over and charge every command", func() bool {
		c, ok := b.Owned()[fz.Partition]
		return ok && c.Epoch > fz.Epoch && allCharged()
	})
	if !a.Stopped() {
		t.Fatal("a resumed before the takeover: the pause did not outlast the session")
	}
	fencedBefore := outcome(fencehttp.OutcomeFenced)
	a.Signal(syscall.SIGCONT)
	// a's late batch runs its handler with a's old token: the service
	// refuses it, and a's worker takes the refusal for a fence.
	testwait.For(t, 60*time.Second, "the service to refuse a's late charge", func() bool { return outcome(fencehttp.OutcomeFenced) > fencedBefore })
	testwait.For(t, 60*time.Second, "a to stop (or hold back) the partition on the refusal", func() bool { return a.FencedCount()+a.RefusedCount() > 0 })
	produce(100)
	testwait.For(t, 60*time.Second, "every command charged", allCharged)

	got := charged()
	total := 0
	for _, id := range ids {
		if n := got["id:"+id]; n != 1 {
			t.Errorf("command %s charged %d times, want exactly once", id, n)
		}
	}
	for _, n := range got {
		total += n
	}
	if total != len(ids) {
		t.Errorf("the service holds %d charges for %d commands", total, len(ids))
	}
	if !strings.Contains(svcLog.String(), "stale token refused") {
		t.Errorf("the service logged no refusal:\n%s", svcLog.String())
	}
	t.Logf("commands %d, charges %d, service outcomes: applied %d, replayed %d, fenced %d; a fenced %d and held back %d time(s), frozen at %s/%d epoch %d",
		len(ids), total, outcome(fencehttp.OutcomeApplied), outcome(fencehttp.OutcomeReplayed), outcome(fencehttp.OutcomeFenced),
		a.FencedCount(), a.RefusedCount(), payments.Topic, fz.Partition, fz.Epoch)
}
