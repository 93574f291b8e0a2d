// Command compare measures workrouter beside Confluent's Parallel Consumer
// and a hand-written Java KafkaConsumer on one real Kafka broker and one
// PostgreSQL database: the same pre-produced backlog, the same ledger
// tables and handler logic (examples/ledger), the same concurrency cap. It
// prints one table: time to drain the backlog, produce-to-applied latency
// at a fixed offered rate, and a zombie scenario (an instance added, one
// killed with SIGKILL, one frozen with SIGSTOP past its session timeout and
// resumed after the takeover), every count read from the database.
//
//	go run ./compare --brokers 127.0.0.1:9092 --postgres postgres://postgres@127.0.0.1:5432/test
//
// See compare/README.md and docs/compare.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// options are the harness's flags.
type options struct {
	brokers, postgres, javaDir, jsonOut string
	records, keys, runs, warmup         int
	dists, handlers, systems            []string
	concurrency, partitions, sessionMS  int
	latencyRate, latencySeconds         int
	zombieRate, zombieConcurrency       int
	zombieAttempts, zombieSleepMS       int
	zombie, zombieHold                  bool
	pinClientCPUs                       string
	seed                                uint64
}

func defaultOptions() options {
	brokers := os.Getenv("WORKROUTER_TEST_BROKERS")
	if brokers == "" {
		brokers = "127.0.0.1:9092"
	}
	pg := os.Getenv("WORKROUTER_TEST_POSTGRES")
	if pg == "" {
		pg = "postgres://postgres@127.0.0.1:5432/test"
	}
	return options{
		brokers: brokers, postgres: pg, javaDir: "",
		records: 50000, keys: 10000, runs: 5, warmup: 1,
		dists: []string{"uniform", "zipf"}, handlers: []string{"pg", "sleep1", "sleep10"}, systems: allSystems,
		concurrency: 24, partitions: 12, sessionMS: 3000,
		latencyRate: 200, latencySeconds: 10,
		zombieRate: 200, zombieConcurrency: 6, zombieAttempts: 3, zombieSleepMS: 5, zombie: true, zombieHold: true, pinClientCPUs: pinAuto, seed: 1,
	}
}

func main() {
	if os.Getenv(workerEnv) != "" {
		if err := runInstance(); err != nil {
			fmt.Fprintln(os.Stderr, "compare instance:", err)
			os.Exit(1)
		}
		return
	}
	o := defaultOptions()
	var dists, handlers, systems string
	flag.StringVar(&o.brokers, "brokers", o.brokers, "Kafka brokers, comma-separated (default $WORKROUTER_TEST_BROKERS)")
	flag.StringVar(&o.postgres, "postgres", o.postgres, "PostgreSQL URL (default $WORKROUTER_TEST_POSTGRES); each run gets a schema of its own, dropped after")
	flag.StringVar(&o.javaDir, "java-dir", "", "the Maven project of the Java programs (default: compare/java beside this source)")
	flag.StringVar(&o.jsonOut, "json", "", "also write every run as JSON to this file")
	flag.IntVar(&o.records, "records", o.records, "records in the pre-produced backlog")
	flag.IntVar(&o.keys, "keys", o.keys, "accounts (keys)")
	flag.IntVar(&o.runs, "runs", o.runs, "measured runs of each system, per distribution and handler")
	flag.IntVar(&o.warmup, "warmup", o.warmup, "discarded runs before them")
	flag.StringVar(&dists, "dists", strings.Join(o.dists, ","), "key distributions: uniform, zipf (s=1.1)")
	flag.StringVar(&handlers, "handlers", strings.Join(o.handlers, ","), "handlers: pg (the ledger's effect), sleep1, sleep10 (1 or 10 ms, then the effect)")
	flag.StringVar(&systems, "systems", strings.Join(o.systems, ","), "systems: "+strings.Join(allSystems, ","))
	flag.IntVar(&o.concurrency, "concurrency", o.concurrency, "the cap N: Parallel Consumer's maxConcurrency, workrouter's lanes × partitions, the JDBC/pgx connections; the plain consumer runs min(N, partitions) KafkaConsumers")
	flag.IntVar(&o.partitions, "partitions", o.partitions, "partitions of each topic")
	flag.IntVar(&o.sessionMS, "session-ms", o.sessionMS, "every consumer's session timeout (classic protocol)")
	flag.IntVar(&o.latencyRate, "latency-rate", o.latencyRate, "offered rate of the latency runs, commands a second (0: no latency runs)")
	flag.IntVar(&o.latencySeconds, "latency-seconds", o.latencySeconds, "length of a latency run")
	flag.BoolVar(&o.zombie, "zombie", o.zombie, "run the zombie scenario for each system")
	flag.IntVar(&o.zombieRate, "zombie-rate", o.zombieRate, "offered rate during the zombie scenario")
	flag.IntVar(&o.zombieConcurrency, "zombie-concurrency", o.zombieConcurrency, "the cap N of each of the zombie scenario's three instances")
	flag.IntVar(&o.zombieAttempts, "zombie-attempts", o.zombieAttempts, "scenarios to run, at most, until a Java system's frozen instance attempts a late write (workrouter's: always up to 3, until one is refused)")
	flag.IntVar(&o.zombieSleepMS, "zombie-sleep-ms", o.zombieSleepMS, "the zombie scenario's handler sleeps this long (every system alike), so that a frozen instance is likely mid-batch")
	flag.BoolVar(&o.zombieHold, "zombie-hold", o.zombieHold, "the zombie scenario's handler sleeps after the ledger's effect, inside its transaction, holding its row locks (a frozen instance is then likely frozen holding a batch); false: before it")
	flag.StringVar(&o.pinClientCPUs, "pin-client-cpus", o.pinClientCPUs, "run every client process under taskset -c on these CPUs (a taskset list, e.g. 2-3); auto: the upper half of the cores when there are at least 4, else none; off: none. The broker is not started here: pin it with taskset -apc LIST <pid>")
	flag.Uint64Var(&o.seed, "seed", o.seed, "the workload's seed")
	flag.Parse()
	o.dists, o.handlers, o.systems = split(dists), split(handlers), split(systems)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, o, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			os.Exit(1)
		}
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// harness runs the comparison.
type harness struct {
	o     options
	java  java
	names int // runs so far: unique topic, group and schema names
	tag   string
	log   io.Writer
	pin   string // the clients' CPU list (taskset -c), "" for none
}

func (h *harness) name(kind string) string {
	h.names++
	return fmt.Sprintf("cmp_%s_%s_%d", h.tag, kind, h.names)
}

// drainRun is one run of a system over the backlog.
type drainRun struct {
	Dist, Handler, System string
	Warmup                bool
	Timing                timing
	Counts                counts
	Load                  string // /proc/loadavg when the run started
}

// latencyRun is one latency run.
type latencyRun struct {
	System string
	Timing timing
	Counts counts
	Load   string
}

// zombieRun is one zombie scenario.
type zombieRun struct {
	System   string
	Counts   counts
	Attempts int // scenarios run until the frozen instance attempted a late write
	// HeldTx reports whether b was frozen inside a transaction that had
	// written (holding a batch) in the scenario counted.
	HeldTx bool
	Load   string
}

// report is everything measured.
type report struct {
	Options  map[string]any
	Drain    []drainRun
	Latency  []latencyRun
	Zombie   []zombieRun
	Versions map[string]string
}

func run(ctx context.Context, o options, w io.Writer) (*report, error) {
	if o.javaDir == "" {
		_, file, _, _ := runtime.Caller(0)
		o.javaDir = filepath.Join(filepath.Dir(file), "java")
	}
	h := &harness{o: o, log: w, tag: fmt.Sprintf("%d_%d", os.Getpid(), time.Now().Unix()%100000)}
	pin, why, err := resolvePin(o.pinClientCPUs, runtime.NumCPU())
	if err != nil {
		return nil, err
	}
	h.pin = pin
	fmt.Fprintln(w, "compare:", why)
	needJava := slices.ContainsFunc(o.systems, func(s string) bool { return s != sysWorkrouter })
	if needJava {
		fmt.Fprintf(w, "building the Java programs (mvn, %s)\n", o.javaDir)
		j, err := buildJava(ctx, o.javaDir)
		if err != nil {
			return nil, err
		}
		h.java = j
	}
	rep := &report{
		Options: map[string]any{"records": o.records, "keys": o.keys, "runs": o.runs, "warmup": o.warmup, "concurrency": o.concurrency,
			"partitions": o.partitions, "session_ms": o.sessionMS, "latency_rate": o.latencyRate, "latency_seconds": o.latencySeconds,
			"zombie_rate": o.zombieRate, "zombie_concurrency": o.zombieConcurrency, "zombie_sleep_ms": o.zombieSleepMS, "zombie_hold": o.zombieHold, "pin_client_cpus": pin, "java_flags": strings.Join(javaFlags, " ")},
		Versions: map[string]string{"parallel-consumer": "io.confluent.parallelconsumer:parallel-consumer-core:0.5.3.3",
			"kafka-clients": "4.4.0", "postgresql-jdbc": "42.7.14", "go": runtime.Version()},
	}
	brokers := strings.Split(o.brokers, ",")
	var topics []string
	defer func() {
		if len(topics) > 0 {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := deleteTopics(dctx, brokers, topics...); err != nil {
				fmt.Fprintf(w, "compare: deleting the topics %v: %v\n", topics, err)
			}
		}
	}()
	for _, dist := range o.dists {
		wl, err := newWorkload(o.records, o.keys, dist, o.seed)
		if err != nil {
			return nil, err
		}
		topic := h.name("backlog_" + dist)
		if err := createTopic(ctx, brokers, topic, int32(o.partitions)); err != nil {
			return nil, err
		}
		topics = append(topics, topic)
		t0 := time.Now()
		if err := produce(ctx, brokers, topic, wl.cmds, 0); err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "produced %d records (%s keys) to %s in %.1fs\n", len(wl.cmds), dist, topic, time.Since(t0).Seconds())
		for _, handler := range o.handlers {
			sleepMS, err := handlerSleep(handler)
			if err != nil {
				return nil, err
			}
			for i := -o.warmup; i < o.runs; i++ {
				for _, sys := range o.systems { // interleaved: one run of each, then the next round
					load := loadavg()
					t, c, err := h.drain(ctx, sys, topic, wl, sleepMS)
					if err != nil {
						return nil, fmt.Errorf("%s %s %s: %w", dist, handler, sys, err)
					}
					r := drainRun{Dist: dist, Handler: handler, System: sys, Warmup: i < 0, Timing: t, Counts: c, Load: load}
					rep.Drain = append(rep.Drain, r)
					fmt.Fprintf(w, "drain %-7s %-7s %-12s warmup=%-5v %6.2fs %8.0f/s lost=%d dup_deliveries=%d wrong_balances=%d order_violations=%d load=%s\n",
						dist, handler, sys, r.Warmup, t.DrainSeconds, t.PerSecond, c.Lost, c.DupDeliveries, c.WrongBalances, c.OrderViolations, load)
				}
			}
		}
	}
	if o.latencyRate > 0 {
		wl, err := newWorkload(o.latencyRate*o.latencySeconds, o.keys, "uniform", o.seed+1)
		if err != nil {
			return nil, err
		}
		for i := 0; i < o.runs; i++ {
			for _, sys := range o.systems {
				topic := h.name("latency")
				if err := createTopic(ctx, brokers, topic, int32(o.partitions)); err != nil {
					return nil, err
				}
				topics = append(topics, topic)
				load := loadavg()
				t, c, err := h.latency(ctx, sys, topic, wl)
				if err != nil {
					return nil, fmt.Errorf("latency %s: %w", sys, err)
				}
				rep.Latency = append(rep.Latency, latencyRun{System: sys, Timing: t, Counts: c, Load: load})
				fmt.Fprintf(w, "latency %-12s %d/s p50=%.1fms p99=%.1fms lost=%d load=%s\n", sys, o.latencyRate, t.P50ms, t.P99ms, c.Lost, load)
			}
		}
	}
	if o.zombie {
		for _, sys := range o.systems {
			load := loadavg()
			z, err := h.zombie(ctx, sys, brokers, &topics)
			if err != nil {
				return nil, fmt.Errorf("zombie %s: %w", sys, err)
			}
			z.Load = load
			rep.Zombie = append(rep.Zombie, z)
			c := z.Counts
			fmt.Fprintf(w, "zombie %-12s applied=%d/%d lost=%d dup_deliveries=%d dup_effects=%d wrong_balances=%d order_violations=%d late_landed=%d late_caught=%d fenced=%d taken_over=%d claims_not_recorded=%d held_tx=%v attempts=%d load=%s\n",
				sys, c.Applied, c.Produced, c.Lost, c.DupDeliveries, c.DupEffects, c.WrongBalances, c.OrderViolations, c.LateLanded, c.LateCaught, c.Fenced, c.TakenOver, c.ClaimsNotRecorded, z.HeldTx, z.Attempts, load)
		}
	}
	printTable(w, rep)
	return rep, nil
}

func handlerSleep(handler string) (int, error) {
	switch handler {
	case "pg":
		return 0, nil
	case "sleep1":
		return 1, nil
	case "sleep10":
		return 10, nil
	}
	return 0, fmt.Errorf("compare: --handlers: unknown handler %q (pg, sleep1, sleep10)", handler)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// newRun makes a run's schema and a pool on it.
func (h *harness) newRun(ctx context.Context) (string, *pgxpool.Pool, error) {
	schema := h.name("s")
	if err := setupRun(ctx, h.o.postgres, schema); err != nil {
		return "", nil, err
	}
	pool, err := pgxpool.New(ctx, withParams(h.o.postgres, "search_path="+schema, "pool_max_conns=2"))
	if err != nil {
		_ = dropSchema(ctx, h.o.postgres, schema)
		return "", nil, err
	}
	return schema, pool, nil
}

func (h *harness) endRun(schema string, pool *pgxpool.Pool) {
	pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dropSchema(ctx, h.o.postgres, schema); err != nil {
		fmt.Fprintf(h.log, "compare: dropping schema %s: %v\n", schema, err)
	}
}

func (h *harness) spec(sys, topic, group, schema, member string, concurrency, sleepMS int) instanceSpec {
	return instanceSpec{system: sys, brokers: h.o.brokers, topic: topic, group: group, dsn: h.o.postgres, schema: schema,
		member: member, concurrency: concurrency, partitions: h.o.partitions, sleepMS: sleepMS, sessionMS: h.o.sessionMS}
}

// waitApplied polls until want commands are posted, or timeout, or no
// command was posted for stall.
func waitApplied(ctx context.Context, pool *pgxpool.Pool, want int, timeout, stall time.Duration, alive func() error) error {
	start := time.Now()
	deadline := start.Add(timeout)
	last, lastAt := -1, start
	for {
		n, err := applied(ctx, pool)
		if err != nil {
			return err
		}
		if n >= want {
			return nil
		}
		if err := alive(); err != nil {
			return err
		}
		now := time.Now()
		if n != last {
			last, lastAt = n, now
		}
		if now.After(deadline) {
			return fmt.Errorf("compare: %d of %d commands applied after %s", n, want, timeout)
		}
		if now.Sub(lastAt) > stall {
			return fmt.Errorf("compare: %d of %d commands applied, none in the last %s", n, want, stall)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func exited(ins ...*instance) func() error {
	return func() error {
		for _, in := range ins {
			select {
			case <-in.done:
				return fmt.Errorf("compare: %s instance %s exited: %v\n%s", in.spec.system, in.spec.member, in.err, tail(in.output(), 3000))
			default:
			}
		}
		return nil
	}
}

func (h *harness) drain(ctx context.Context, sys, topic string, wl *workload, sleepMS int) (timing, counts, error) {
	schema, pool, err := h.newRun(ctx)
	if err != nil {
		return timing{}, counts{}, err
	}
	defer h.endRun(schema, pool)
	in, err := h.start(ctx, h.spec(sys, topic, h.name("g"), schema, "a", h.o.concurrency, sleepMS))
	if err != nil {
		return timing{}, counts{}, err
	}
	// A backlog of --records 1000000 takes Parallel Consumer more than
	// 1,000 s here: the drain's bound is a floor of 200 commands a second
	// (a sleeping handler's sleep added), and 2 minutes without progress.
	timeout := 2*time.Minute + time.Duration(len(wl.cmds))*time.Duration(sleepMS+5)*time.Millisecond
	werr := waitApplied(ctx, pool, len(wl.cmds), timeout, 2*time.Minute, exited(in))
	serr := in.stop(30 * time.Second)
	if werr != nil {
		return timing{}, counts{}, fmt.Errorf("%w\n%s", werr, tail(in.output(), 3000))
	}
	if serr != nil {
		fmt.Fprintln(h.log, serr)
	}
	t, err := drainTiming(ctx, pool)
	if err != nil {
		return t, counts{}, err
	}
	c, err := check(ctx, pool, wl)
	return t, c, err
}

func (h *harness) latency(ctx context.Context, sys, topic string, wl *workload) (timing, counts, error) {
	schema, pool, err := h.newRun(ctx)
	if err != nil {
		return timing{}, counts{}, err
	}
	defer h.endRun(schema, pool)
	in, err := h.start(ctx, h.spec(sys, topic, h.name("g"), schema, "a", h.o.concurrency, 0))
	if err != nil {
		return timing{}, counts{}, err
	}
	defer func() { _ = in.stop(30 * time.Second) }()
	time.Sleep(3 * time.Second) // the group's first assignment
	if err := produce(ctx, strings.Split(h.o.brokers, ","), topic, wl.cmds, h.o.latencyRate); err != nil {
		return timing{}, counts{}, err
	}
	if err := waitApplied(ctx, pool, len(wl.cmds), 2*time.Minute, 2*time.Minute, exited(in)); err != nil {
		return timing{}, counts{}, err
	}
	t, err := latency(ctx, pool)
	if err != nil {
		return t, counts{}, err
	}
	c, err := check(ctx, pool, wl)
	return t, c, err
}

// zombie runs the zombie scenario until the frozen instance attempted a
// late write (at most --zombie-attempts times for a Java system, 3 for
// workrouter): instances a and b start, commands flow
// at the zombie rate, c joins, a is killed with SIGKILL, b is frozen with
// SIGSTOP past its session timeout and resumed once the others have taken
// its partitions over; then the flow ends and every command must be
// applied.
func (h *harness) zombie(ctx context.Context, sys string, brokers []string, topics *[]string) (zombieRun, error) {
	z := zombieRun{System: sys}
	for z.Attempts = 1; ; z.Attempts++ {
		c, heldTx, err := h.zombieOnce(ctx, sys, brokers, topics)
		if err != nil {
			return z, err
		}
		z.Counts, z.HeldTx = c, heldTx
		limit := h.o.zombieAttempts
		if sys == sysWorkrouter {
			limit = 3
		}
		attempted := c.LateLanded+c.LateCaught+c.Fenced > 0
		if attempted && (heldTx || sys != sysWorkrouter || !h.o.zombieHold) || z.Attempts >= limit {
			return z, nil
		}
		fmt.Fprintf(h.log, "zombie %s: the frozen instance attempted no late write, or was not frozen holding a batch; again\n", sys)
	}
}

func (h *harness) zombieOnce(ctx context.Context, sys string, brokers []string, topics *[]string) (counts, bool, error) {
	session := time.Duration(h.o.sessionMS) * time.Millisecond
	// The flow lasts from the start until a while after the resume.
	flow := 6*time.Second + session + 3*time.Second + 4*time.Second
	wl, err := newWorkload(int(flow.Seconds())*h.o.zombieRate, h.o.keys/10, "uniform", h.o.seed+2)
	if err != nil {
		return counts{}, false, err
	}
	topic := h.name("zombie")
	if err := createTopic(ctx, brokers, topic, int32(h.o.partitions)); err != nil {
		return counts{}, false, err
	}
	*topics = append(*topics, topic)
	schema, pool, err := h.newRun(ctx)
	if err != nil {
		return counts{}, false, err
	}
	defer h.endRun(schema, pool)
	group := h.name("g")
	var all []*instance
	defer func() {
		for _, in := range all {
			_ = in.stop(30 * time.Second)
		}
	}()
	startOne := func(member string) (*instance, error) {
		s := h.spec(sys, topic, group, schema, member, h.o.zombieConcurrency, h.o.zombieSleepMS)
		if h.o.zombieHold {
			s.sleepMS, s.holdMS = 0, h.o.zombieSleepMS
		}
		in, err := h.start(ctx, s)
		if err == nil {
			all = append(all, in)
		}
		return in, err
	}
	a, err := startOne("a")
	if err != nil {
		return counts{}, false, err
	}
	b, err := startOne("b")
	if err != nil {
		return counts{}, false, err
	}
	prodErr := make(chan error, 1)
	go func() { prodErr <- produce(ctx, brokers, topic, wl.cmds, h.o.zombieRate) }()
	t0 := time.Now()
	sleepUntil := func(d time.Duration) { time.Sleep(time.Until(t0.Add(d))) }
	sleepUntil(2 * time.Second)
	if _, err := startOne("c"); err != nil {
		return counts{}, false, err
	}
	sleepUntil(4 * time.Second)
	a.kill()
	sleepUntil(6 * time.Second)
	// Freeze b holding a batch: inside a transaction that has written
	// (the handler's hold, after the ledger's effect), if it gets there
	// within 2 s. Without the hold, b is frozen at 6 s sharp.
	inTx := false
	if h.o.zombieHold {
		if inTx, err = waitInTransaction(ctx, pool, appName(schema, "b"), 2*time.Second); err != nil {
			return counts{}, false, err
		}
	}
	if err := b.signal(syscall.SIGSTOP); err != nil {
		return counts{}, false, err
	}
	if h.o.zombieHold && !inTx {
		fmt.Fprintf(h.log, "zombie %s: b was not seen inside a transaction in 2s; frozen anyway\n", sys)
	}
	stopped := time.Now()
	time.Sleep(session + 3*time.Second)
	resumed := time.Now()
	if err := b.signal(syscall.SIGCONT); err != nil {
		return counts{}, false, err
	}
	if err := <-prodErr; err != nil {
		return counts{}, false, err
	}
	alive := func() error { return nil } // b may stop by itself after its fence: the others must finish
	if err := waitApplied(ctx, pool, len(wl.cmds), 2*time.Minute, 2*time.Minute, alive); err != nil {
		return counts{}, false, errors.Join(err, errors.New(tail(b.output(), 2000)))
	}
	time.Sleep(2 * time.Second) // let the resumed instance land what it would
	c, err := check(ctx, pool, wl)
	if err != nil {
		return c, false, err
	}
	if err := zombieCounts(ctx, pool, &c, "b", stopped, resumed); err != nil {
		return c, false, err
	}
	c.Fenced = b.count("fenced ")
	for _, in := range all {
		c.ClaimsNotRecorded += in.count("claim not recorded")
	}
	return c, inTx, nil
}

// waitInTransaction polls pg_stat_activity until a connection named app
// is idle in a transaction that has written (between two statements of
// an open transaction holding a transaction ID), or timeout; it reports
// whether it saw one.
func waitInTransaction(ctx context.Context, pool *pgxpool.Pool, app string, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'idle in transaction' AND backend_xid IS NOT NULL`, app).Scan(&n)
		if err != nil {
			return false, fmt.Errorf("compare: pg_stat_activity: %w", err)
		}
		if n > 0 {
			return true, nil
		}
		time.Sleep(time.Millisecond)
	}
	return false, nil
}

// stats is a median and the spread of runs.
type stats struct{ med, lo, hi float64 }

func summarize(xs []float64) stats {
	if len(xs) == 0 {
		return stats{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stats{m, s[0], s[len(s)-1]}
}

func printTable(w io.Writer, rep *report) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| keys | handler | system | drain, s: median (min–max) | records/s: median (min–max) | lost | dup deliveries | wrong balances | order violations | load (1-min) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	type key struct{ dist, handler, sys string }
	var order []key
	groups := map[key][]drainRun{}
	for _, r := range rep.Drain {
		if r.Warmup {
			continue
		}
		k := key{r.Dist, r.Handler, r.System}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	medRate := map[key]float64{}
	for _, k := range order {
		rs := groups[k]
		var d, p, loads []float64
		var lost, dup, wrong, ov int
		for _, r := range rs {
			d = append(d, r.Timing.DrainSeconds)
			p = append(p, r.Timing.PerSecond)
			lost += r.Counts.Lost
			dup += r.Counts.DupDeliveries
			wrong += r.Counts.WrongBalances
			ov += r.Counts.OrderViolations
			var l float64
			fmt.Sscanf(r.Load, "%g", &l)
			loads = append(loads, l)
		}
		sd, sp, sl := summarize(d), summarize(p), summarize(loads)
		medRate[k] = sp.med
		fmt.Fprintf(w, "| %s | %s | %s | %.2f (%.2f–%.2f) | %.0f (%.0f–%.0f) | %d | %d | %d | %d | %.1f–%.1f |\n",
			k.dist, k.handler, k.sys, sd.med, sd.lo, sd.hi, sp.med, sp.lo, sp.hi, lost, dup, wrong, ov, sl.lo, sl.hi)
	}
	if len(rep.Latency) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| system | p50 ms: median (min–max) | p99 ms: median (min–max) | lost | runs |")
		fmt.Fprintln(w, "|---|---|---|---|---|")
		var syss []string
		by := map[string][]latencyRun{}
		for _, r := range rep.Latency {
			if _, ok := by[r.System]; !ok {
				syss = append(syss, r.System)
			}
			by[r.System] = append(by[r.System], r)
		}
		for _, s := range syss {
			var p50, p99 []float64
			lost := 0
			for _, r := range by[s] {
				p50 = append(p50, r.Timing.P50ms)
				p99 = append(p99, r.Timing.P99ms)
				lost += r.Counts.Lost
			}
			a, b := summarize(p50), summarize(p99)
			fmt.Fprintf(w, "| %s | %.1f (%.1f–%.1f) | %.1f (%.1f–%.1f) | %d | %d |\n", s, a.med, a.lo, a.hi, b.med, b.lo, b.hi, lost, len(by[s]))
		}
	}
	if len(rep.Zombie) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| system | applied | lost | dup deliveries | dup effects | wrong balances | order violations | late writes landed | late writes caught by dedupe | writes refused (fenced) |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
		for _, z := range rep.Zombie {
			c := z.Counts
			fmt.Fprintf(w, "| %s | %d/%d | %d | %d | %d | %d | %d | %d | %d | %d |\n", z.System, c.Applied, c.Produced, c.Lost, c.DupDeliveries, c.DupEffects, c.WrongBalances, c.OrderViolations, c.LateLanded, c.LateCaught, c.Fenced)
		}
	}
	var ratios []string
	for _, k := range order {
		if k.sys != sysWorkrouter {
			continue
		}
		for _, other := range []string{sysPCKey, sysPlain} {
			if r := medRate[key{k.dist, k.handler, other}]; r > 0 {
				ratios = append(ratios, fmt.Sprintf("%s/%s/workrouter_vs_%s=%.2f", k.dist, k.handler, other, medRate[k]/r))
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "compare:", strings.Join(ratios, " "))
}
