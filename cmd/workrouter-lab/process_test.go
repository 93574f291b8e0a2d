package main

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
)

// The process-level fault tests: real worker processes (the harness's
// worker of this binary, re-executed) against an embedded broker in the test
// process and a durable sink, with real faults — SIGSTOP past the session
// timeout, SIGKILL before and after the sink commit, the database session
// terminated mid-transaction, the sink unreachable for a while. Each test
// asserts that its fault happened, and then the shared checker
// (cluster.Store.Check, internal/invariants) verifies F, L, O, X, V and D
// from the sink's own records. The tests of this file need no interception
// of broker requests: with WORKROUTER_TEST_BROKERS set they run on that
// broker instead (Apache Kafka in CI), each on a topic and group of its
// own, under WORKROUTER_TEST_PROTOCOL's group protocol
// (newProcWorldAnyBroker).

const procPartitions = 4

// procBackend is the sink a process test runs on.
type procBackend struct {
	name  string
	store *cluster.Store
	// workerSpec returns the --sink of the worker named name.
	workerSpec func(name string) string
	// unreachable makes the sink unreachable for the workers until the
	// returned release is called.
	unreachable func(t *testing.T) (release func())
	// admin is a direct PostgreSQL pool (nil on SQLite).
	admin *pgxpool.Pool
}

func procSQLite(t *testing.T) *procBackend {
	t.Helper()
	dir := t.TempDir()
	st, err := cluster.OpenStore(t.Context(), cluster.StoreConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	path := filepath.Join(dir, "ledger.db")
	return &procBackend{name: "sqlite", store: st, workerSpec: st.WorkerSpec,
		unreachable: func(t *testing.T) func() {
			// An exclusive writer holds the database: every worker's
			// transaction fails with SQLITE_BUSY until it lets go.
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := db.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.ExecContext(t.Context(), "BEGIN EXCLUSIVE"); err != nil {
				t.Fatal(err)
			}
			return func() {
				conn.ExecContext(context.Background(), "ROLLBACK")
				conn.Close()
				db.Close()
			}
		}}
}

func procPostgres(t *testing.T) *procBackend {
	t.Helper()
	dsn := testpg.DSN(t)
	st, err := cluster.OpenStore(t.Context(), cluster.StoreConfig{PostgresDSN: dsn, SchemaPrefix: "wr_proc"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	admin, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	// The workers reach PostgreSQL through a proxy the test can take down.
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	return &procBackend{name: "postgres", store: st, admin: admin,
		workerSpec: func(name string) string { return withHost(st.WorkerSpec(name), px.addr()) },
		unreachable: func(t *testing.T) func() {
			px.down()
			return px.up
		}}
}

// withHost replaces the host:port of a postgres:// URL.
func withHost(dsn, hostport string) string {
	at := strings.Index(dsn, "@")
	slash := strings.Index(dsn[at:], "/")
	return dsn[:at+1] + hostport + dsn[at+slash:]
}

// eachBackend runs f as a subtest on SQLite and on PostgreSQL.
func eachBackend(t *testing.T, f func(t *testing.T, b *procBackend)) {
	t.Run("sqlite", func(t *testing.T) { f(t, procSQLite(t)) })
	t.Run("postgres", func(t *testing.T) { f(t, procPostgres(t)) })
}

// procWorld is one process test's broker, producer and workers.
type procWorld struct {
	t *testing.T
	b *procBackend
	// brk is the embedded broker (kfake) the world started; nil on an
	// external broker (newProcWorldOn).
	brk *broker.Broker
	// addrs are the broker's addresses (brk's, or the external
	// broker's), and protocol the workers' --protocol ("": the
	// worker's default, cooperative).
	addrs    []string
	protocol string
	topic    string
	group    string
	prod     *cluster.Producer
	// poison are records the test wrote that must each be dead-lettered
	// once (and nothing else): the checker's D.
	poison []cluster.PoisonRecord
	// keyConcurrency is the --key-concurrency of the workers start
	// starts (0: the worker's default, one lane).
	keyConcurrency int
}

func newProcWorld(t *testing.T, b *procBackend) *procWorld {
	t.Helper()
	brk, err := broker.Start(broker.Config{
		Listen:            "127.0.0.1:0",
		Topics:            map[string]int32{ledger.Topic: procPartitions},
		MinSessionTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { brk.Close() })
	rt, err := router.New(t.Context(), router.Config{Brokers: []string{brk.Addr()}, Topic: ledger.Topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return &procWorld{t: t, b: b, brk: brk, addrs: []string{brk.Addr()}, topic: ledger.Topic, group: "workers",
		prod: cluster.NewProducer(rt, 7, 40)}
}

// newProcWorldAnyBroker is newProcWorld on the external broker named by
// WORKROUTER_TEST_BROKERS (Apache Kafka in CI's real-Kafka step), its
// workers on WORKROUTER_TEST_PROTOCOL's group protocol, and newProcWorld
// (the embedded broker) when that is unset. For the process tests that
// need no interception of broker requests.
func newProcWorldAnyBroker(t *testing.T, b *procBackend) *procWorld {
	t.Helper()
	env := os.Getenv("WORKROUTER_TEST_BROKERS")
	if env == "" {
		return newProcWorld(t, b)
	}
	return newProcWorldOn(t, b, strings.Split(env, ","), testProtocol(t))
}

// testProtocol returns the workers' --protocol that WORKROUTER_TEST_PROTOCOL
// names: cooperative (also when unset) or kip848; any other value fails
// the test.
func testProtocol(t *testing.T) string {
	t.Helper()
	switch p := os.Getenv("WORKROUTER_TEST_PROTOCOL"); p {
	case "", "cooperative":
		return "cooperative"
	case "kip848":
		return p
	default:
		t.Fatalf("WORKROUTER_TEST_PROTOCOL=%s: want cooperative or kip848", p)
		return ""
	}
}

// procInvalidName matches what a Kafka topic name may not hold.
var procInvalidName = regexp.MustCompile(`[^a-zA-Z0-9._-]`)

// newProcWorldOn is a process test's world on an external broker at
// addrs, its workers on protocol: a topic and a group of the test's own
// (named after the test and the time, so that tests sharing the broker
// never meet), both deleted when the test ends.
func newProcWorldOn(t *testing.T, b *procBackend, addrs []string, protocol string) *procWorld {
	t.Helper()
	name := fmt.Sprintf("wr-proc-%s-%d", strings.ToLower(procInvalidName.ReplaceAllString(t.Name(), "-")), time.Now().UnixNano())
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, procPartitions, -1, nil, name); err != nil {
		t.Fatalf("create topic %s on %v: %v", name, addrs, err)
	}
	// CreateTopics answers once the controller has the topic; the
	// broker's metadata serves it a moment later, and until then a
	// produce may be refused (UNKNOWN_TOPIC_OR_PARTITION).
	testwait.For(t, 30*time.Second, "the broker's metadata to serve the new topic", func() bool {
		md, err := adm.Metadata(ctx, name)
		if err != nil || md.Topics[name].Err != nil || len(md.Topics[name].Partitions) != procPartitions {
			return false
		}
		for _, p := range md.Topics[name].Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
		return true
	})
	// Registered before any worker starts, so it runs after every
	// worker has stopped (cleanups run last first).
	t.Cleanup(func() {
		adm, err := kadm.NewOptClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			return
		}
		defer adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adm.DeleteGroup(ctx, name)
		adm.DeleteTopics(ctx, name)
	})
	rt, err := router.New(t.Context(), router.Config{Brokers: addrs, Topic: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return &procWorld{t: t, b: b, addrs: addrs, protocol: protocol, topic: name, group: name,
		prod: cluster.NewProducer(rt, 7, 40)}
}

// produce sends n more ledger commands and waits for their acknowledgement.
func (w *procWorld) produce(n int) {
	w.t.Helper()
	if err := w.prod.Send(context.Background(), n); err != nil {
		w.t.Fatal(err)
	}
}

// testBinary starts this test binary as workrouter (see TestMain).
func testBinary() cluster.Binary {
	return cluster.Binary{Argv: []string{os.Args[0]}, Env: []string{"WORKROUTER_TEST_MAIN=1"}}
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
	return l.buf.String()
}

// start starts a worker named name with the given fault hooks.
func (w *procWorld) start(name string, hooks ...string) *cluster.Worker {
	w.t.Helper()
	opts := cluster.WorkerOptions{Brokers: w.addrs, Protocol: w.protocol, Topic: w.topic, Group: w.group,
		SinkSpec: w.b.workerSpec(name), Name: name, SessionTimeout: 2 * time.Second, MaxBatch: 64,
		RebalanceTimeout: 5 * time.Second, Hooks: hooks, KeyConcurrency: w.keyConcurrency}
	log := &syncLog{}
	wk, err := cluster.StartWorker(name, testBinary(), log, opts.Args()...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		wk.Stop(15 * time.Second)
		if w.t.Failed() {
			w.t.Logf("worker %s log (head):\n%s\nworker %s log (tail):\n%s", name, head(log.String(), 6000), name, tail(log.String(), 6000))
		}
	})
	return wk
}

func head(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// applied returns how many postings the sink holds.
func (w *procWorld) applied() int {
	n, err := w.b.store.Count(context.Background(), `SELECT count(*) FROM ledger_postings`)
	if err != nil {
		return -1
	}
	return n
}

func (w *procWorld) waitAllApplied(d time.Duration) {
	w.t.Helper()
	want := w.prod.AckedCount()
	testwait.For(w.t, d, fmt.Sprintf("all %d commands applied", want), func() bool { return w.applied() >= want })
}

// committed returns Kafka's committed offset per partition (-1 if none).
func (w *procWorld) committed() map[int32]int64 {
	w.t.Helper()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(w.addrs...))
	if err != nil {
		w.t.Fatal(err)
	}
	defer adm.Close()
	out := map[int32]int64{}
	for p := int32(0); p < procPartitions; p++ {
		out[p] = -1
	}
	offs, err := adm.FetchOffsets(context.Background(), w.group)
	if err != nil {
		w.t.Fatal(err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == w.topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

// checkpoints returns the sink's NextOffset per partition.
func (w *procWorld) checkpoints() map[int32]int64 {
	w.t.Helper()
	fs, err := w.b.store.Fences(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[int32]int64{}
	for _, f := range fs {
		if f.Scope.Group == w.group && f.Scope.Topic == w.topic {
			out[f.Scope.Partition] = f.NextOffset
		}
	}
	return out
}

// check waits for lag zero and verifies every invariant from the sink's
// own records with the shared checker.
func (w *procWorld) check() {
	w.t.Helper()
	w.checkAcked(w.prod.Acked())
}

// postingsOf counts the postings of partition part written under epoch by
// member at or after offset from.
func (w *procWorld) postingsOf(part, epoch int32, member string, from int64) int {
	w.t.Helper()
	n, err := w.b.store.Count(context.Background(),
		`SELECT count(*) FROM ledger_postings WHERE part = $1 AND epoch = $2 AND member = $3 AND off >= $4`, part, epoch, member, from)
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// TestPausedWorkerRejected (hazard 4): a worker is frozen with SIGSTOP past
// its session timeout, right before a batch; the other worker claims its
// partitions and applies; after SIGCONT the frozen worker's batch is
// rejected, and every invariant holds.
func TestPausedWorkerRejected(t *testing.T) {
	eachBackend(t, pausedWorkerRejected)
}

// pausedWorkerRejected is TestPausedWorkerRejected on b (also run on Redis,
// process_redis_test.go).
func pausedWorkerRejected(t *testing.T, b *procBackend) {
	{
		w := newProcWorldAnyBroker(t, b)
		a := w.start("a", "--freeze-before-batch=3")
		testwait.For(t, 30*time.Second, "a to claim every partition", func() bool { return len(a.Owned()) == procPartitions })
		bw := w.start("b")
		testwait.For(t, 30*time.Second, "b to claim partitions", func() bool { return len(bw.Owned()) > 0 })
		w.produce(2000)

		testwait.For(t, 60*time.Second, "a to freeze before its batch", func() bool { return len(a.Freezes()) > 0 && a.Stopped() })
		fz := a.Freezes()[0]
		// The new owner claims a's partition at a higher epoch and applies
		// there, while a is still frozen.
		testwait.For(t, 60*time.Second, "b to take over the partition and apply", func() bool {
			c, ok := bw.Owned()[fz.Partition]
			return ok && c.Epoch > fz.Epoch && w.postingsOf(fz.Partition, c.Epoch, c.Member, 0) > 0
		})
		if !a.Stopped() {
			t.Fatal("a resumed before the takeover: the pause did not outlast the session")
		}
		a.Signal(syscall.SIGCONT)
		// The resumed worker's batch is either rejected or (with a broken
		// fence) lands; the checker below tells which.
		testwait.For(t, 60*time.Second, "a's late batch to be decided", func() bool {
			if a.FencedCount() > 0 {
				return true
			}
			for _, r := range a.Applied() {
				if r.Partition == fz.Partition && r.Epoch == fz.Epoch && r.FirstOffset == fz.First {
					return true
				}
			}
			return false
		})
		w.produce(500)
		w.waitAllApplied(120 * time.Second)
		w.check()
		if a.FencedCount() < 1 {
			t.Fatal("no stale write of the paused worker was rejected")
		}
		if n := w.postingsOf(fz.Partition, fz.Epoch, fz.Member, fz.First); n > 0 {
			t.Fatalf("the paused worker's batch landed: %d postings at epoch %d from offset %d", n, fz.Epoch, fz.First)
		}
	}
}

// TestPausedWorkerWithLanesRejected (hazard 4 with lanes): a worker
// applying with 8 lanes per partition (--key-concurrency 8) is frozen with
// SIGSTOP past its session timeout before one lane's batch, with the other
// lanes' batches waiting behind it (the freeze waits for the lanes' calls
// in flight to finish and keeps the others out); the other worker, with
// lanes too, claims its partitions — the gapped checkpoint, with what the
// frozen worker's lanes had applied ahead — and moves on; after SIGCONT
// every late write of the frozen worker's lanes is rejected, none of the
// frozen batch lands, and every invariant holds, O per account in the
// postings' application order.
func TestPausedWorkerWithLanesRejected(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorldAnyBroker(t, b)
		w.keyConcurrency = 8
		a := w.start("a", "--freeze-before-batch=12")
		testwait.For(t, 30*time.Second, "a to claim every partition", func() bool { return len(a.Owned()) == procPartitions })
		bw := w.start("b")
		testwait.For(t, 30*time.Second, "b to claim partitions", func() bool { return len(bw.Owned()) > 0 })
		w.produce(2000)

		testwait.For(t, 60*time.Second, "a to freeze before a lane's batch", func() bool { return len(a.Freezes()) > 0 && a.Stopped() })
		fz := a.Freezes()[0]
		// a applied in lanes, as the sink recorded it: two of its
		// postings of one partition were applied (inserted) out of their
		// offsets' order, which one lane per partition never does.
		if inv := w.appliedOutOfOffsetOrder(a.Member()); inv == 0 {
			t.Fatal("every partition's postings by a are in offset order: a did not apply in lanes")
		}
		testwait.For(t, 60*time.Second, "b to take over the partition and apply", func() bool {
			c, ok := bw.Owned()[fz.Partition]
			return ok && c.Epoch > fz.Epoch && w.postingsOf(fz.Partition, c.Epoch, c.Member, 0) > 0
		})
		if !a.Stopped() {
			t.Fatal("a resumed before the takeover: the pause did not outlast the session")
		}
		a.Signal(syscall.SIGCONT)
		testwait.For(t, 60*time.Second, "a's late lane batches to be decided", func() bool {
			if a.FencedCount() > 0 {
				return true
			}
			for _, r := range a.Applied() {
				if r.Partition == fz.Partition && r.Epoch == fz.Epoch && r.FirstOffset == fz.First {
					return true
				}
			}
			return false
		})
		w.produce(500)
		w.waitAllApplied(120 * time.Second)
		w.check()
		if a.FencedCount() < 1 {
			t.Fatal("no stale write of the paused worker's lanes was rejected")
		}
		hs, err := b.store.History(t.Context(), cluster.Scope(w.group, w.topic, fz.Partition))
		if err != nil {
			t.Fatal(err)
		}
		last := hs[len(hs)-1]
		t.Logf("after SIGCONT %d of a's claims and applies were fenced; partition %d was last claimed by %s from %d with %d done spans above it",
			a.FencedCount(), fz.Partition, last.Token, last.NextOffset, len(last.Done))
		// Other lanes may have applied past fz.First before the freeze;
		// the frozen batch's own first and last offsets must not be a's.
		n, err := b.store.Count(t.Context(), `SELECT count(*) FROM ledger_postings WHERE part = $1 AND epoch = $2 AND member = $3 AND off IN ($4, $5)`,
			fz.Partition, fz.Epoch, fz.Member, fz.First, fz.Last)
		if err != nil || n != 0 {
			t.Fatalf("the frozen lane batch landed: %d of its postings at epoch %d (%v)", n, fz.Epoch, err)
		}
	})
}

// appliedOutOfOffsetOrder counts the partitions where two of member's
// postings were applied (Posting.Order, the rows' insert order) out of
// their offsets' order.
func (w *procWorld) appliedOutOfOffsetOrder(member string) int {
	w.t.Helper()
	ps, err := w.b.store.Postings(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	maxOff := map[int32]int64{} // the highest offset applied so far, in insert order
	out := map[int32]bool{}
	slices.SortFunc(ps, func(a, b cluster.Posting) int { return cmp.Compare(a.Order, b.Order) })
	for _, p := range ps {
		if p.Member != member {
			continue
		}
		if m, ok := maxOff[p.Partition]; ok && p.Offset < m {
			out[p.Partition] = true
		}
		maxOff[p.Partition] = max(maxOff[p.Partition], p.Offset)
	}
	return len(out)
}

// TestKilledBeforeSinkCommit (hazard 6): SIGKILL while the batch's
// transaction is open; nothing of it is visible, and the restarted worker
// applies every command exactly once.
func TestKilledBeforeSinkCommit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorldAnyBroker(t, b)
		w.produce(1000)
		a := w.start("a", "--hang-before-commit=3")
		testwait.For(t, 60*time.Second, "a to hang inside its batch", func() bool { return len(a.Hangs()) > 0 })
		h := a.Hangs()[0]
		a.Kill()
		n, err := b.store.Count(t.Context(), `SELECT count(*) FROM ledger_postings WHERE part = $1 AND off >= $2 AND off <= $3`,
			h.Partition, h.First, h.Last)
		if err != nil || n != 0 {
			t.Fatalf("%d effects of the killed, uncommitted batch are visible (%v)", n, err)
		}
		if n := w.applied(); n >= w.prod.AckedCount() {
			t.Fatalf("everything was applied before the kill (%d): the kill did not interrupt work", n)
		}
		w.start("a2")
		w.waitAllApplied(120 * time.Second)
		w.check()
	})
}

// TestKilledAfterSinkCommit (hazard 6): SIGKILL after the sink committed a
// batch but before Kafka's offset commit; the restarted worker resumes from
// the sink's checkpoint, so nothing is applied twice.
func TestKilledAfterSinkCommit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorldAnyBroker(t, b)
		w.produce(1000)
		a := w.start("a", "--hang-after-commit=3")
		testwait.For(t, 60*time.Second, "a to hang after its sink commit", func() bool { return len(a.Hangs()) > 0 })
		h := a.Hangs()[0]
		// The window is real: the sink has the batch, Kafka does not.
		if next := w.checkpoints()[h.Partition]; next != h.Last+1 {
			t.Fatalf("sink checkpoint of partition %d is %d, want %d", h.Partition, next, h.Last+1)
		}
		if c := w.committed()[h.Partition]; c > h.Last {
			t.Fatalf("Kafka already has offset %d committed for partition %d: no window", c, h.Partition)
		}
		a.Kill()
		w.start("a2")
		w.waitAllApplied(120 * time.Second)
		w.check()
	})
}

// TestConnectionTerminatedMidTransaction: the worker's PostgreSQL session
// is terminated inside a batch; the worker retries and the effect lands
// exactly once.
func TestConnectionTerminatedMidTransaction(t *testing.T) {
	b := procPostgres(t)
	w := newProcWorldAnyBroker(t, b)
	w.produce(600)
	gate := filepath.Join(t.TempDir(), "gate")
	a := w.start("a", "--gate-batch=3", "--gate-file="+gate)
	testwait.For(t, 60*time.Second, "a to stop inside its batch", func() bool { return len(a.Hangs()) > 0 })
	pid := a.Hangs()[0].PID
	if pid == 0 {
		t.Fatalf("no backend pid in %+v", a.Hangs()[0])
	}
	stalls := a.Count(consumer.KindStalled)
	var terminated bool
	if err := b.admin.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, pid).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, terminated, err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "a to report the failed batch", func() bool { return a.Count(consumer.KindStalled) > stalls })
	w.waitAllApplied(120 * time.Second)
	w.check()
}

// TestSinkUnreachable: the sink is unreachable for a while; the worker
// backs off, skips nothing, commits no Kafka offset past unapplied
// records, and resumes when the sink returns.
func TestSinkUnreachable(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorldAnyBroker(t, b)
		a := w.start("a", "--sqlite-busy-timeout=100ms")
		testwait.For(t, 30*time.Second, "a to claim every partition", func() bool { return len(a.Owned()) == procPartitions })
		w.produce(400)
		w.waitAllApplied(60 * time.Second)
		stalls := a.Count(consumer.KindStalled)

		release := b.unreachable(t)
		w.produce(400)
		until := time.Now().Add(3 * time.Second)
		for time.Now().Before(until) {
			committed, next := w.committed(), w.checkpoints()
			for p, c := range committed {
				if c > next[p] {
					release()
					t.Fatalf("partition %d: Kafka offset %d committed past the sink's checkpoint %d", p, c, next[p])
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if a.Count(consumer.KindStalled) <= stalls {
			release()
			t.Fatal("the worker never saw the sink down: the fault did not happen")
		}
		release()
		w.waitAllApplied(120 * time.Second)
		w.check()
	})
}
