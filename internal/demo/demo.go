// Package demo runs workrouter's demonstration with real processes: an
// embedded broker (or a real cluster), worker processes of the ledger
// example on a durable sink (SQLite by default), a few thousand ledger
// commands, and one worker frozen with SIGSTOP past its session timeout.
// When the frozen worker is resumed after another worker has taken over its
// partitions, the sink rejects its late write. The summary is computed from
// the sink's own records.
package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/broker"
	"github.com/workrouter/workrouter/internal/faults"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink/postgres"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// Config configures Run. Zero values take the documented defaults.
type Config struct {
	Commands   int   // ledger commands to produce; default 3000
	Accounts   int   // distinct accounts (keys); default 300
	Partitions int32 // partitions of the topic the demo creates; default 6
	Workers    int   // worker processes; default 3 (at least 2)
	Seed       uint64
	// Brokers, if set, runs against that cluster instead of an embedded
	// broker; the topic must exist or be creatable there.
	Brokers []string
	// SinkPath is the SQLite file; default a file in a temporary directory.
	SinkPath string
	// PostgresDSN, if set, runs the demo on PostgreSQL instead of SQLite,
	// in a fresh schema that is dropped at the end.
	PostgresDSN string
	// WorkerArgv starts one worker process: the demo appends "worker" and
	// its flags. Required (the CLI passes its own executable).
	WorkerArgv []string
	// SessionTimeout of the workers; default 2s.
	SessionTimeout time.Duration
	// Out receives the timeline as it happens; nil discards.
	Out io.Writer
}

// Summary is the outcome of a demo run, computed from the sink's records.
type Summary struct {
	Produced        int      `json:"produced"`
	Applied         int      `json:"applied"`
	Duplicates      int      `json:"duplicates"`
	Lost            int      `json:"lost"`
	OrderViolations int      `json:"order_violations"`
	StaleRejected   int      `json:"stale_rejected"`
	StaleAccepted   int      `json:"stale_accepted"`
	Mismatches      []string `json:"balance_mismatches,omitempty"`
	Timeline        []string `json:"timeline"`
}

// OK reports whether every invariant held and the fault really happened.
func (s Summary) OK() bool {
	return s.Applied == s.Produced && s.Duplicates == 0 && s.Lost == 0 && s.OrderViolations == 0 &&
		s.StaleRejected >= 1 && s.StaleAccepted == 0 && len(s.Mismatches) == 0
}

// Line is the summary's final line.
func (s Summary) Line() string {
	return fmt.Sprintf("demo: produced=%d applied=%d duplicates=%d lost=%d order_violations=%d stale_rejected=%d",
		s.Produced, s.Applied, s.Duplicates, s.Lost, s.OrderViolations, s.StaleRejected)
}

// ErrInvariant is matched by the error Run returns when the run finished
// but an invariant did not hold or the fault did not happen.
var ErrInvariant = errors.New("demo: invariant violated")

// ErrConfig is matched by the error Run returns for a bad Config.
var ErrConfig = errors.New("demo: invalid config")

const group = "ledger-demo"

// Run executes the demo. It owns every process it starts and stops them
// before returning. The error matches ErrInvariant when the summary is not OK.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	if cfg.Commands == 0 {
		cfg.Commands = 3000
	}
	if cfg.Accounts == 0 {
		cfg.Accounts = 300
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 6
	}
	if cfg.Workers == 0 {
		cfg.Workers = 3
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 2 * time.Second
	}
	switch {
	case cfg.Commands < 100, cfg.Accounts <= 0, cfg.Partitions <= 0:
		return Summary{}, fmt.Errorf("%w: need at least 100 commands and positive accounts and partitions", ErrConfig)
	case cfg.Workers < 2:
		return Summary{}, fmt.Errorf("%w: need at least 2 workers, so that one can take over from the frozen one", ErrConfig)
	case len(cfg.WorkerArgv) == 0:
		return Summary{}, fmt.Errorf("%w: no worker command", ErrConfig)
	}
	d := &run{cfg: cfg, start: time.Now(), ctx: ctx}
	defer d.stopAll()
	sum, err := d.run()
	d.mu.Lock()
	sum.Timeline = slices.Clone(d.lines)
	d.mu.Unlock()
	if err != nil {
		return sum, err
	}
	if !sum.OK() {
		return sum, fmt.Errorf("%w: %s", ErrInvariant, sum.Line())
	}
	return sum, nil
}

type run struct {
	cfg     Config
	ctx     context.Context
	start   time.Time
	mu      sync.Mutex
	lines   []string
	workers []*worker
}

func (d *run) logf(format string, args ...any) {
	line := fmt.Sprintf("%6.2fs  ", time.Since(d.start).Seconds()) + fmt.Sprintf(format, args...)
	d.mu.Lock()
	d.lines = append(d.lines, line)
	d.mu.Unlock()
	if d.cfg.Out != nil {
		fmt.Fprintln(d.cfg.Out, line)
	}
}

func (d *run) run() (Summary, error) {
	ctx := d.ctx
	dir, err := os.MkdirTemp("", "workrouter-demo-")
	if err != nil {
		return Summary{}, err
	}
	defer os.RemoveAll(dir)

	brokers := d.cfg.Brokers
	topic := ledger.Topic
	if len(brokers) == 0 {
		b, err := broker.Start(broker.Config{
			Listen:            "127.0.0.1:0",
			DataDir:           filepath.Join(dir, "broker"),
			Topics:            map[string]int32{topic: d.cfg.Partitions},
			MinSessionTimeout: 100 * time.Millisecond,
		})
		if err != nil {
			return Summary{}, err
		}
		defer b.Close()
		brokers = []string{b.Addr()}
		d.logf("embedded broker on %s (data in %s), topic %s with %d partitions", b.Addr(), dir, topic, d.cfg.Partitions)
	} else {
		topic = fmt.Sprintf("%s-demo-%d", ledger.Topic, time.Now().UnixNano())
		adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			return Summary{}, err
		}
		_, err = adm.CreateTopic(ctx, d.cfg.Partitions, -1, nil, topic)
		adm.Close()
		if err != nil {
			return Summary{}, fmt.Errorf("demo: creating topic %s on %v: %w", topic, brokers, err)
		}
		d.logf("cluster %v, topic %s with %d partitions", brokers, topic, d.cfg.Partitions)
	}

	st, err := d.openStore(ctx, dir)
	if err != nil {
		return Summary{}, err
	}
	defer st.close()
	d.logf("%s", st.desc)

	// Workers; w1 will freeze itself with SIGSTOP just before its 4th batch.
	for i := 1; i <= d.cfg.Workers; i++ {
		extra := []string{}
		if i == 1 {
			extra = append(extra, "--freeze-before-batch", "4")
		}
		w, err := d.startWorker("w"+strconv.Itoa(i), brokers, topic, st.spec, extra...)
		if err != nil {
			return Summary{}, err
		}
		d.workers = append(d.workers, w)
	}
	if err := d.waitUntil(60*time.Second, "every partition claimed by a worker", func() bool {
		owned := map[int32]bool{}
		for _, w := range d.workers {
			for p := range w.owned() {
				owned[p] = true
			}
		}
		return len(owned) == int(d.cfg.Partitions)
	}); err != nil {
		return Summary{}, err
	}
	time.Sleep(500 * time.Millisecond) // let the cooperative rebalances settle
	for _, w := range d.workers {
		d.logf("%s owns %s", w.name, describe(w.owned()))
	}

	rt, err := router.New(ctx, router.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		return Summary{}, err
	}
	defer rt.Close()
	p := &producer{rt: rt, rng: rand.New(rand.NewPCG(d.cfg.Seed, d.cfg.Seed+7)), accounts: d.cfg.Accounts, seqs: map[string]int{}}
	half := d.cfg.Commands / 2
	if err := p.send(ctx, half); err != nil {
		return Summary{}, err
	}
	d.logf("produced %d ledger commands over %d accounts", half, d.cfg.Accounts)

	victim := d.workers[0]
	if err := d.waitUntil(60*time.Second, victim.name+" to freeze", func() bool { return victim.frozen() && victim.stoppedState() }); err != nil {
		return Summary{}, err
	}
	ft := victim.freezeToken()
	held := victim.owned()
	d.logf("PAUSE %s: SIGSTOP just before its batch on partition %d at epoch %d; its session timeout is %s; it held %s",
		victim.name, ft.partition, ft.epoch, d.cfg.SessionTimeout, describe(held))

	// Another worker must take over every partition the victim held and
	// apply there, while the victim is frozen.
	if err := d.waitUntil(90*time.Second, "the frozen worker's partitions to be taken over", func() bool {
		for part, c := range held {
			owner, oc := d.ownerOf(part)
			if owner == nil || owner == victim || oc.epoch <= c.epoch {
				return false
			}
		}
		return true
	}); err != nil {
		return Summary{}, err
	}
	for part, c := range held {
		owner, oc := d.ownerOf(part)
		d.logf("partition %d taken over by %s at epoch %d (from %s's epoch %d), resuming at offset %d", part, owner.name, oc.epoch, victim.name, c.epoch, oc.next)
	}
	if !victim.stoppedState() {
		return Summary{}, fmt.Errorf("demo: %s resumed before the takeover: the pause did not outlast its session", victim.name)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return Summary{}, err
	}
	d.logf("RESUME %s with SIGCONT: it still believes it owns partition %d at epoch %d", victim.name, ft.partition, ft.epoch)
	if err := d.waitUntil(60*time.Second, "the late write to be decided", func() bool { return victim.fencedCount() > 0 }); err != nil {
		return Summary{}, err
	}
	for _, f := range victim.fencedLines() {
		d.logf("REJECTED late write by %s: %s", victim.name, f)
	}

	if err := p.send(ctx, d.cfg.Commands-half); err != nil {
		return Summary{}, err
	}
	d.logf("produced %d more commands", d.cfg.Commands-half)
	if err := d.waitUntil(120*time.Second, "every command applied and Kafka lag at zero", func() bool {
		n, err := st.count(ctx, `SELECT count(*) FROM ledger_postings`)
		return err == nil && n >= d.cfg.Commands && lagZero(ctx, brokers, topic)
	}); err != nil {
		d.logf("not converged: %v", err)
	} else {
		d.logf("lag is zero: all %d commands applied", d.cfg.Commands)
	}
	for _, w := range d.workers {
		d.logf("%s finally owns %s", w.name, describe(w.owned()))
	}

	// Verify from the sink's own records.
	rep, err := st.verify(ctx)
	if err != nil {
		return Summary{}, err
	}
	sum := Summary{Produced: d.cfg.Commands, Applied: rep.Postings, Duplicates: rep.Duplicates,
		OrderViolations: rep.OrderViolations, Mismatches: rep.Mismatches}
	for acct, n := range p.seqs {
		have := map[int]bool{}
		for _, s := range rep.Seqs[acct] {
			have[s] = true
		}
		for i := 0; i < n; i++ {
			if !have[i] {
				sum.Lost++
			}
		}
	}
	for _, w := range d.workers {
		sum.StaleRejected += w.fencedCount()
	}
	stale, err := staleAccepted(ctx, st, group, topic, d.cfg.Partitions)
	if err != nil {
		return Summary{}, err
	}
	sum.StaleAccepted = stale
	return sum, nil
}

func (d *run) waitUntil(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: gave up after %s waiting for %s", timeout, what)
		}
		select {
		case <-d.ctx.Done():
			return d.ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		for _, w := range d.workers {
			if w.exited() {
				return fmt.Errorf("demo: worker %s exited while waiting for %s: %s", w.name, what, w.lastErr())
			}
		}
	}
	return nil
}

// ownerOf returns the worker whose latest claim of part is the newest.
func (d *run) ownerOf(part int32) (*worker, claimEvent) {
	var best *worker
	var bc claimEvent
	for _, w := range d.workers {
		if c, ok := w.owned()[part]; ok && (best == nil || c.epoch > bc.epoch) {
			best, bc = w, c
		}
	}
	return best, bc
}

func (d *run) stopAll() {
	for _, w := range d.workers {
		w.cmd.Process.Signal(syscall.SIGCONT)
		w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range d.workers {
		select {
		case <-w.done:
		case <-time.After(15 * time.Second):
			w.cmd.Process.Kill()
			<-w.done
		}
	}
}

func describe(owned map[int32]claimEvent) string {
	if len(owned) == 0 {
		return "no partitions"
	}
	parts := slices.Sorted(func(yield func(int32) bool) {
		for p := range owned {
			if !yield(p) {
				return
			}
		}
	})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = fmt.Sprintf("p%d@epoch%d", p, owned[p].epoch)
	}
	return strings.Join(out, " ")
}

// ---- the producer ----

type producer struct {
	rt       *router.Router
	rng      *rand.Rand
	accounts int
	seqs     map[string]int
	n        int
}

func (p *producer) send(ctx context.Context, count int) error {
	var mu sync.Mutex
	var first error
	for i := 0; i < count; i++ {
		acct := "acct-" + strconv.Itoa(p.rng.IntN(p.accounts))
		seq := p.seqs[acct]
		p.seqs[acct]++
		p.n++
		id := "cmd-" + strconv.Itoa(p.n)
		amount := int64(1 + p.rng.IntN(10000))
		cmd := ledger.Deposit(acct, id, seq, amount)
		if p.rng.IntN(3) == 0 {
			cmd = ledger.Withdraw(acct, id, seq, amount)
		}
		p.rt.SendAsync(ctx, cmd, func(_ router.Result, err error) {
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	if err := p.rt.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return first
}

// ---- reading the sink ----

// store is the demo's view of the sink: the workers' --sink value and the
// queries the verification needs, on SQLite or PostgreSQL.
type store struct {
	spec   string
	desc   string
	count  func(ctx context.Context, q string, args ...any) (int, error)
	verify func(ctx context.Context) (ledger.Report, error)
	claims func(ctx context.Context, scope epochs.Scope) ([]claimEvent, error)
	close  func()
}

func (d *run) openStore(ctx context.Context, dir string) (*store, error) {
	if d.cfg.PostgresDSN != "" {
		return openPostgres(ctx, d.cfg.PostgresDSN)
	}
	path := d.cfg.SinkPath
	if path == "" {
		path = filepath.Join(dir, "ledger.db")
	}
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		return nil, err
	}
	if err := ledger.SetupSQLite(ctx, s.DB()); err != nil {
		s.Close()
		return nil, err
	}
	return &store{
		spec: "sqlite:" + path,
		desc: "SQLite sink " + path,
		count: func(ctx context.Context, q string, args ...any) (int, error) {
			var n int
			err := s.DB().QueryRowContext(ctx, q, args...).Scan(&n)
			return n, err
		},
		verify: func(ctx context.Context) (ledger.Report, error) { return ledger.VerifySQLite(ctx, s.DB()) },
		claims: func(ctx context.Context, scope epochs.Scope) ([]claimEvent, error) {
			h, err := s.History(ctx, scope)
			var out []claimEvent
			for _, e := range h {
				if e.Kind == sqlite.KindClaim {
					out = append(out, claimEvent{epoch: e.Token.Epoch, next: e.NextOffset})
				}
			}
			return out, err
		},
		close: func() { s.Close() },
	}, nil
}

func openPostgres(ctx context.Context, dsn string) (*store, error) {
	schema := fmt.Sprintf("workrouter_demo_%d", time.Now().UnixNano())
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("demo: PostgreSQL %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		return nil, fmt.Errorf("demo: creating schema %s: %w", schema, err)
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	spec := dsn + sep + "search_path=" + schema
	s, err := postgres.Open(ctx, postgres.Config{DSN: spec, Schema: schema})
	if err == nil {
		err = ledger.SetupPostgres(ctx, s.Pool())
	}
	dropSchema := func() {
		admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		admin.Close()
	}
	if err != nil {
		if s != nil {
			s.Close()
		}
		dropSchema()
		return nil, err
	}
	return &store{
		spec: spec,
		desc: "PostgreSQL sink in schema " + schema + " (dropped at the end)",
		count: func(ctx context.Context, q string, args ...any) (int, error) {
			var n int
			err := s.Pool().QueryRow(ctx, q, args...).Scan(&n)
			return n, err
		},
		verify: func(ctx context.Context) (ledger.Report, error) { return ledger.VerifyPostgres(ctx, s.Pool()) },
		claims: func(ctx context.Context, scope epochs.Scope) ([]claimEvent, error) {
			h, err := s.History(ctx, scope)
			var out []claimEvent
			for _, e := range h {
				if e.Kind == "claim" {
					out = append(out, claimEvent{epoch: e.Token.Epoch, next: e.NextOffset})
				}
			}
			return out, err
		},
		close: func() {
			s.Close()
			dropSchema()
		},
	}, nil
}

// staleAccepted counts postings written under a token older than a claim
// that had already taken the scope over from an earlier offset (invariant F).
func staleAccepted(ctx context.Context, st *store, group, topic string, partitions int32) (int, error) {
	n := 0
	for p := int32(0); p < partitions; p++ {
		claims, err := st.claims(ctx, scopeOf(group, topic, p))
		if err != nil {
			return 0, err
		}
		for _, c := range claims {
			k, err := st.count(ctx, `SELECT count(*) FROM ledger_postings WHERE topic = $1 AND part = $2 AND off >= $3 AND epoch < $4`,
				topic, p, c.next, c.epoch)
			if err != nil {
				return 0, err
			}
			n += k
		}
	}
	return n, nil
}

func scopeOf(group, topic string, p int32) epochs.Scope {
	return epochs.Scope{Group: group, Topic: topic, Partition: p}
}

func lagZero(ctx context.Context, brokers []string, topic string) bool {
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return false
	}
	defer adm.Close()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return false
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false
	}
	ok := true
	ends.Each(func(o kadm.ListedOffset) {
		c, found := committed.Lookup(topic, o.Partition)
		if o.Offset > 0 && (!found || c.At != o.Offset) {
			ok = false
		}
	})
	return ok
}

// ---- worker processes ----

type claimEvent struct {
	epoch int32
	next  int64
}

type worker struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	mu      sync.Mutex
	claims  map[int32]claimEvent
	fenced  []string
	freeze  *claimEvent
	freezeP int32
	errs    []string
}

func (d *run) startWorker(name string, brokers []string, topic, sinkSpec string, extra ...string) (*worker, error) {
	args := append(slices.Clone(d.cfg.WorkerArgv[1:]), "worker",
		"--example", "ledger",
		"--brokers", strings.Join(brokers, ","),
		"--topic", topic,
		"--group", group,
		"--sink", sinkSpec,
		"--client-id", name,
		"--max-batch", "50",
		"--session-timeout", d.cfg.SessionTimeout.String(),
		"--heartbeat-interval", "200ms",
		"--revoke-timeout", "5s",
		"--log-level", "info",
	)
	args = append(args, extra...)
	cmd := exec.Command(d.cfg.WorkerArgv[0], args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	w := &worker{name: name, cmd: cmd, done: make(chan struct{}), claims: map[int32]claimEvent{}}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: starting worker %s: %w", name, err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			w.observe(sc.Text())
		}
		cmd.Wait()
	}()
	return w, nil
}

// observe reads one of the worker's log lines (slog text format).
func (w *worker) observe(line string) {
	kv := parseLogfmt(line)
	w.mu.Lock()
	defer w.mu.Unlock()
	part64, _ := strconv.ParseInt(kv["partition"], 10, 32)
	epoch64, _ := strconv.ParseInt(kv["epoch"], 10, 32)
	part, epoch := int32(part64), int32(epoch64)
	switch kv["msg"] {
	case "partition claimed":
		next, _ := strconv.ParseInt(kv["next_offset"], 10, 64)
		w.claims[part] = claimEvent{epoch: epoch, next: next}
	case "partition revoked", "partition lost":
		if c, ok := w.claims[part]; ok && c.epoch == epoch {
			delete(w.claims, part)
		}
	case "apply fenced; partition stopped", "claim fenced; partition stopped":
		delete(w.claims, part)
		w.fenced = append(w.fenced, kv["err"])
	case "freezing (SIGSTOP) before batch":
		w.freeze = &claimEvent{epoch: epoch}
		w.freezeP = part
	}
	if kv["level"] == "ERROR" && !strings.Contains(kv["msg"], "fenced") {
		w.errs = append(w.errs, kv["msg"]+": "+kv["err"])
	}
}

func (w *worker) owned() map[int32]claimEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int32]claimEvent, len(w.claims))
	for p, c := range w.claims {
		out[p] = c
	}
	return out
}

func (w *worker) frozen() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.freeze != nil
}

type freezeInfo struct {
	partition int32
	epoch     int32
}

func (w *worker) freezeToken() freezeInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	return freezeInfo{partition: w.freezeP, epoch: w.freeze.epoch}
}

func (w *worker) fencedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.fenced)
}

func (w *worker) fencedLines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.fenced)
}

func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (w *worker) lastErr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) == 0 {
		return "no error logged"
	}
	return w.errs[len(w.errs)-1]
}

// stoppedState reports whether the process is stopped (SIGSTOP).
func (w *worker) stoppedState() bool { return faults.Stopped(w.cmd.Process.Pid) }

// parseLogfmt parses a slog text line: key=value pairs, values optionally
// quoted.
func parseLogfmt(line string) map[string]string {
	out := map[string]string{}
	for len(line) > 0 {
		line = strings.TrimLeft(line, " ")
		eq := strings.IndexByte(line, '=')
		if eq <= 0 {
			break
		}
		key := line[:eq]
		line = line[eq+1:]
		var val string
		if strings.HasPrefix(line, `"`) {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				break
			}
			val, _ = strconv.Unquote(q)
			line = line[len(q):]
		} else {
			sp := strings.IndexByte(line, ' ')
			if sp < 0 {
				sp = len(line)
			}
			val, line = line[:sp], line[sp:]
		}
		out[key] = val
	}
	return out
}
