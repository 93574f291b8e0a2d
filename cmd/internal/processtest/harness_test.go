package processtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/faults"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/postgres"
	"github.com/workrouter/workrouter/sink/sqlite"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

const partitions = 4

// ---- the sink under test, seen from the test process ----

type row struct {
	key    string
	seq    int
	part   int32
	off    int64
	epoch  int32
	member string
}

type claim struct {
	epoch int32
	next  int64
}

// store reads a backend's own records: the effects rows, the fence rows and
// the history of accepted claims.
type store interface {
	rows(ctx context.Context) ([]row, error)
	fences(ctx context.Context) ([]sink.Fence, error)
	claims(ctx context.Context, scope epochs.Scope) ([]claim, error)
}

type backend struct {
	name   string
	spec   string // the child's WR_SINK
	schema string
	st     store
	// lock makes the sink unreachable until the returned release is called.
	unreachable func(t *testing.T) (release func())
	// db is the PostgreSQL pool (nil for SQLite).
	pool *pgxpool.Pool
}

type sqliteStore struct{ s *sqlite.Sink }

func (q sqliteStore) rows(ctx context.Context) ([]row, error) {
	rs, err := q.s.DB().QueryContext(ctx, `SELECT k, seq, part, off, epoch, member FROM effects`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.key, &r.seq, &r.part, &r.off, &r.epoch, &r.member); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}
func (q sqliteStore) fences(ctx context.Context) ([]sink.Fence, error) { return q.s.Fences(ctx) }
func (q sqliteStore) claims(ctx context.Context, scope epochs.Scope) ([]claim, error) {
	return historyClaims(ctx, q.s, scope)
}

// historyClaims returns the accepted claims in h's history of scope, in order.
func historyClaims(ctx context.Context, h sink.Historian, scope epochs.Scope) ([]claim, error) {
	hs, err := h.History(ctx, scope)
	var out []claim
	for _, e := range hs {
		if e.Kind == sink.HistoryClaim {
			out = append(out, claim{e.Token.Epoch, e.NextOffset})
		}
	}
	return out, err
}

type pgStore struct{ s *postgres.Sink }

func (q pgStore) rows(ctx context.Context) ([]row, error) {
	rs, err := q.s.Pool().Query(ctx, `SELECT k, seq, part, off, epoch, member FROM effects`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.key, &x.seq, &x.part, &x.off, &x.epoch, &x.member)
		return x, err
	})
}
func (q pgStore) fences(ctx context.Context) ([]sink.Fence, error) { return q.s.Fences(ctx) }
func (q pgStore) claims(ctx context.Context, scope epochs.Scope) ([]claim, error) {
	return historyClaims(ctx, q.s, scope)
}

func newSQLite(t *testing.T) *backend {
	path := filepath.Join(t.TempDir(), "sink.db")
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.DB().ExecContext(ctx, sqliteEffectsDDL); err != nil {
		t.Fatal(err)
	}
	return &backend{name: "sqlite", spec: "sqlite:" + path, st: sqliteStore{s},
		unreachable: func(t *testing.T) func() {
			// An exclusive writer holds the database: every worker's
			// transaction fails with SQLITE_BUSY until it lets go.
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
				t.Fatal(err)
			}
			return func() {
				conn.ExecContext(ctx, "ROLLBACK")
				conn.Close()
				db.Close()
			}
		}}
}

func postgresDSN(t *testing.T) string {
	return testpg.DSN(t)
}

func newPostgres(t *testing.T) *backend {
	base := postgresDSN(t)
	ctx := context.Background()
	schema := "wr_proc_" + randHex(6)
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		admin.Close()
	})
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+schema+`.effects(k text NOT NULL, seq int NOT NULL, part int NOT NULL, off bigint NOT NULL, epoch int NOT NULL, member text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	dsn := withSearchPath(base, schema)
	s, err := postgres.Open(ctx, postgres.Config{DSN: dsn, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	b := &backend{name: "postgres", spec: dsn, schema: schema, st: pgStore{s}, pool: admin}
	// The sink unreachable: workers reach PostgreSQL through a proxy that
	// the test can take down.
	px := newProxy(t, hostPort(t, base))
	b.spec = withHost(dsn, px.addr())
	b.unreachable = func(t *testing.T) func() {
		px.down()
		return px.up
	}
	return b
}

func withSearchPath(dsn, schema string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema
}

func hostPort(t *testing.T, dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

func withHost(dsn, hostport string) string {
	// postgres://user@host:port/db?… → replace host:port.
	at := strings.Index(dsn, "@")
	slash := strings.Index(dsn[at:], "/")
	return dsn[:at+1] + hostport + dsn[at+slash:]
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// eachBackend runs f as a subtest on SQLite and on PostgreSQL.
func eachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("sqlite", func(t *testing.T) { f(t, newSQLite(t)) })
	t.Run("postgres", func(t *testing.T) { f(t, newPostgres(t)) })
}

// ---- the world: broker, producer, workers ----

type world struct {
	t        *testing.T
	b        *backend
	brk      *broker.Broker
	topic    string
	group    string
	rt       *router.Router
	produced map[string]int
	keys     []string
	total    int
}

func newWorld(t *testing.T, b *backend) *world {
	brk, err := broker.Start(broker.Config{
		Listen:            "127.0.0.1:0",
		Topics:            map[string]int32{"cmds": partitions},
		MinSessionTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { brk.Close() })
	rt, err := router.New(context.Background(), router.Config{Brokers: []string{brk.Addr()}, Topic: "cmds"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	w := &world{t: t, b: b, brk: brk, topic: "cmds", group: "workers", rt: rt, produced: map[string]int{}}
	for i := 0; i < 40; i++ {
		w.keys = append(w.keys, "k"+strconv.Itoa(i))
	}
	return w
}

// produce sends n more commands round-robin over the keys, each carrying
// its per-key sequence number.
func (w *world) produce(n int) {
	w.t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var firstErr error
	for i := 0; i < n; i++ {
		k := w.keys[(w.total+i)%len(w.keys)]
		seq := w.produced[k]
		w.produced[k]++
		w.rt.SendAsync(ctx, router.Command{Key: []byte(k), Type: "effect", Payload: []byte(strconv.Itoa(seq))}, func(_ router.Result, err error) {
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	w.total += n
	if err := w.rt.Flush(ctx); err != nil {
		w.t.Fatal(err)
	}
	if firstErr != nil {
		w.t.Fatal(firstErr)
	}
}

// proc is one worker process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	stderr strings.Builder
	done   chan struct{}
	err    error
}

func (w *world) start(name string, env ...string) *proc {
	w.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envChild+"=1",
		envBrokers+"="+w.brk.Addr(),
		envTopic+"="+w.topic,
		envGroup+"="+w.group,
		envSink+"="+w.b.spec,
		envSchema+"="+w.b.schema,
		envName+"="+name,
	)
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	w.t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if w.t.Failed() {
			w.t.Logf("worker %s stdout:\n%s\nstderr (tail):\n%s", p.name, strings.Join(p.snapshot(), "\n"), tail(p.stderrText(), 4000))
		}
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *proc) snapshot() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

func (p *proc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// count returns how many stdout lines start with prefix.
func (p *proc) count(prefix string) int {
	n := 0
	for _, l := range p.snapshot() {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// waitLine waits for a stdout line starting with prefix and returns it.
func (p *proc) waitLine(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	var found string
	waitFor(t, d, p.name+": "+prefix, func() bool {
		for _, l := range p.snapshot() {
			if strings.HasPrefix(l, prefix) {
				found = l
				return true
			}
		}
		select {
		case <-p.done:
			t.Fatalf("worker %s exited (%v) before %q", p.name, p.err, prefix)
		default:
		}
		return false
	})
	return found
}

// stopped reports whether the process is in the stopped state (SIGSTOP).
func (p *proc) stopped() bool { return faults.Stopped(p.cmd.Process.Pid) }

func (p *proc) kill(t *testing.T) {
	t.Helper()
	p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("worker %s did not die", p.name)
	}
}

// field returns the value of key=value in a stdout line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

func fieldInt(t *testing.T, line, key string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(field(line, key), 10, 64)
	if err != nil {
		t.Fatalf("line %q: field %s: %v", line, key, err)
	}
	return n
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// applied returns how many effect rows the sink holds.
func (w *world) applied() int {
	rows, err := w.b.st.rows(context.Background())
	if err != nil {
		return -1
	}
	return len(rows)
}

func (w *world) waitAllApplied(d time.Duration) {
	w.t.Helper()
	waitFor(w.t, d, fmt.Sprintf("all %d commands applied", w.total), func() bool { return w.applied() >= w.total })
}

// committed returns Kafka's committed offset per partition (-1 if none).
func (w *world) committed() map[int32]int64 {
	w.t.Helper()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(w.brk.Addr()))
	if err != nil {
		w.t.Fatal(err)
	}
	defer adm.Close()
	out := map[int32]int64{}
	for p := int32(0); p < partitions; p++ {
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

// nextOffsets returns the sink's checkpoint per partition.
func (w *world) nextOffsets() map[int32]int64 {
	w.t.Helper()
	fs, err := w.b.st.fences(context.Background())
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

// check verifies DESIGN.md §7 from the sink's own records:
// L every produced command's effect is present; X none twice; O per key in
// produce order; F no write with a stale token after a newer claim; V Kafka
// lag returns to zero.
func (w *world) check() {
	t := w.t
	t.Helper()
	ctx := context.Background()
	rows, err := w.b.st.rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type ks struct {
		k   string
		seq int
	}
	seen := map[ks]int{}
	offs := map[[2]int64]int{}
	perKey := map[string][]row{}
	for _, r := range rows {
		seen[ks{r.key, r.seq}]++
		offs[[2]int64{int64(r.part), r.off}]++
		perKey[r.key] = append(perKey[r.key], r)
	}
	var lost, dup, order, stale int
	for k, n := range w.produced {
		for s := 0; s < n; s++ {
			switch c := seen[ks{k, s}]; {
			case c == 0:
				lost++
			case c > 1:
				dup += c - 1
			}
		}
	}
	for _, c := range offs {
		if c > 1 {
			dup += c - 1
		}
	}
	for k, rs := range perKey {
		slices.SortFunc(rs, func(a, b row) int { return int(a.off - b.off) })
		for i := 1; i < len(rs); i++ {
			if rs[i].seq <= rs[i-1].seq {
				order++
				t.Errorf("O: key %s: seq %d at offset %d after seq %d at offset %d", k, rs[i].seq, rs[i].off, rs[i-1].seq, rs[i-1].off)
				break
			}
		}
	}
	for p := int32(0); p < partitions; p++ {
		claims, err := w.b.st.claims(ctx, epochs.Scope{Group: w.group, Topic: w.topic, Partition: p})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claims {
			for _, r := range rows {
				if r.part == p && r.off >= c.next && r.epoch < c.epoch {
					stale++
					t.Errorf("F: partition %d offset %d written at epoch %d after a claim at epoch %d from offset %d", p, r.off, r.epoch, c.epoch, c.next)
				}
			}
		}
	}
	if lost+dup+order+stale > 0 {
		t.Errorf("invariants: lost=%d duplicates=%d order_violations=%d stale_accepted=%d (of %d produced, %d rows)", lost, dup, order, stale, w.total, len(rows))
	}
	// V: every partition's committed offset reaches its end.
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(w.brk.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := adm.ListEndOffsets(ctx, w.topic)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "Kafka lag to reach zero (V)", func() bool {
		c := w.committed()
		ok := true
		ends.Each(func(o kadm.ListedOffset) {
			if c[o.Partition] != o.Offset {
				ok = false
			}
		})
		return ok
	})
}
