// Package demo runs workrouter's demonstration with real processes: an
// embedded broker (or a real cluster), worker processes of the ledger
// example on a durable sink (SQLite by default), a few thousand ledger
// commands, and one worker made a zombie with a batch in hand: frozen with
// SIGSTOP past its session timeout (Config.Fault "pause"), or left running
// with its links to the broker cut both ways ("partition"). When another
// worker has taken over its partitions and the zombie's batch goes on, the
// sink rejects its late write. The summary is computed from the sink's own
// records.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/cmd/internal/faults"
	"github.com/workrouter/workrouter/cmd/internal/netfault"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/invariants"
	"github.com/workrouter/workrouter/router"
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
	// ClientOpts are more options of the demo's own clients (TLS, SASL)
	// for Brokers, and WorkerConn the matching flags of the worker
	// processes (a password goes in Worker.Env).
	ClientOpts []kgo.Opt
	WorkerConn []string
	// SinkPath is the SQLite file; default a file in a temporary directory.
	SinkPath string
	// PostgresDSN, if set, runs the demo on PostgreSQL instead of SQLite,
	// in a fresh schema that is dropped at the end.
	PostgresDSN string
	// RedisURL, if set, runs the demo on Redis, under a fresh key prefix
	// that is deleted at the end.
	RedisURL string
	// Kafka, if set, runs the demo on sink/kafka: the workers publish the
	// ledger's decisions as events, in transactions, to topics of the
	// run's own on the demo's broker (the embedded one, or Brokers), and
	// the summary is computed from the events a read_committed consumer
	// sees.
	Kafka bool
	// Worker starts one worker process (the harness's worker of the
	// workrouter-lab binary; see cluster.StartWorker). Required (the
	// lab's demo command passes its own executable).
	Worker cluster.Binary
	// SessionTimeout of the workers; default 2s.
	SessionTimeout time.Duration
	// KeyConcurrency is the workers' lanes per partition
	// (consumer.Config.KeyConcurrency, the worker's --key-concurrency);
	// default 1.
	KeyConcurrency int
	// Protocol is the workers' group protocol: "cooperative" (default)
	// or "kip848". Under KIP-848 the session timeout is the broker's:
	// the embedded broker is given SessionTimeout, and a cluster named by
	// Brokers must have a group.consumer.session.timeout.ms no longer
	// than it, or the frozen worker is not evicted before it resumes.
	Protocol string
	// Fault is how the demo makes its zombie of w1, the first worker,
	// just before its 4th batch: "pause" (default) freezes it with SIGSTOP
	// past its session timeout and resumes it with SIGCONT after the
	// takeover; "partition" leaves it running, holding that batch, and
	// cuts its links to every broker address both ways (black-holed,
	// through proxies of package netfault that w1 dials instead of the
	// brokers), releases the batch after the takeover and heals the links
	// once its write was refused. On the Kafka sink the sink's clients
	// dial through the same links (the harness worker's --dial-map reaches
	// them too), so the links heal right after the release and the held
	// transaction's offset commit is refused by the group coordinator
	// then. "partition" refuses a TLS connection (the worker's dialer
	// through the proxies is plain TCP).
	Fault string
	// Out receives the timeline as it happens; nil discards.
	Out io.Writer

	// bypass, in tests, starts w1 without its dial mapping: its
	// connections go around its links, and the cut must be seen to miss.
	bypass bool
}

// The demo's faults, the values of Config.Fault.
const (
	// FaultPause freezes w1 with SIGSTOP past its session timeout (the
	// default).
	FaultPause = "pause"
	// FaultPartition cuts w1's links to the brokers both ways while it
	// runs with a batch in hand.
	FaultPartition = "partition"
)

// The kinds the demo's faults are counted (Summary.Faults) and drawn as:
// the chaos harness's kinds of the same faults.
const (
	kindPause     = "pause"
	kindPartition = "partition-broker"
)

// Faults returns the accepted values of Config.Fault, the default first.
func Faults() []string { return []string{FaultPause, FaultPartition} }

// Summary is the outcome of a demo run, computed from the sink's records.
type Summary struct {
	Produced        int `json:"produced"`
	Applied         int `json:"applied"`
	Duplicates      int `json:"duplicates"`
	Lost            int `json:"lost"`
	OrderViolations int `json:"order_violations"`
	StaleRejected   int `json:"stale_rejected"`
	StaleAccepted   int `json:"stale_accepted"`
	// NotConverged counts partitions whose lag did not return to zero
	// (invariant V).
	NotConverged int `json:"not_converged"`
	// Violations describe every invariant violation found (at most 20).
	Violations []string `json:"violations,omitempty"`
	// Invariants are the checker's counts of each invariant's
	// violations (invariants.Report), D included.
	Invariants invariants.Violations `json:"invariants"`
	// Faults counts the faults that happened, by kind: the one pause
	// ("pause") or partition ("partition-broker", the chaos harness's name
	// of the same fault).
	Faults   map[string]int `json:"faults"`
	Timeline []string       `json:"timeline"`
	// Trace is the run's typed events, for its report (package
	// timeline); not in the JSON summary.
	Trace cluster.Trace `json:"-"`
	// Counted says the run reached its count of the sink's records: the
	// counts above are the run's. A run that stopped before (a setup
	// error, a broker that cannot be reached) has zeros there, which say
	// nothing; it is not in the JSON summary.
	Counted bool `json:"-"`
}

// OK reports whether every invariant held and the fault really happened.
func (s Summary) OK() bool {
	return s.Applied == s.Produced && s.Duplicates == 0 && s.Lost == 0 && s.OrderViolations == 0 &&
		s.StaleRejected >= 1 && s.StaleAccepted == 0 && s.NotConverged == 0 && len(s.Violations) == 0
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
	if cfg.KeyConcurrency == 0 {
		cfg.KeyConcurrency = 1
	}
	if cfg.Protocol == "" {
		cfg.Protocol = "cooperative"
	}
	if cfg.Fault == "" {
		cfg.Fault = FaultPause
	}
	switch {
	case !slices.Contains(Faults(), cfg.Fault):
		return Summary{}, fmt.Errorf("%w: fault %q: want pause or partition", ErrConfig, cfg.Fault)
	case cfg.Fault == FaultPartition && slices.Contains(cfg.WorkerConn, "--tls"):
		return Summary{}, fmt.Errorf("%w: --fault partition routes the worker's broker connections through proxies with a dialer of plain TCP, "+
			"which does not speak TLS: run it on a plaintext listener (without --tls)", ErrConfig)
	case cfg.Protocol != "cooperative" && cfg.Protocol != "kip848":
		return Summary{}, fmt.Errorf("%w: protocol %q: want cooperative or kip848", ErrConfig, cfg.Protocol)
	case cfg.Commands < 100, cfg.Accounts <= 0, cfg.Partitions <= 0:
		return Summary{}, fmt.Errorf("%w: need at least 100 commands and positive accounts and partitions", ErrConfig)
	case cfg.Kafka && cfg.KeyConcurrency != 1:
		return Summary{}, fmt.Errorf("%w: key concurrency %d: the Kafka sink applies a partition in offset order (its checkpoint, the committed offset, holds no gaps)", ErrConfig, cfg.KeyConcurrency)
	case cfg.KeyConcurrency < 1:
		return Summary{}, fmt.Errorf("%w: key concurrency %d: want at least 1 lane per partition", ErrConfig, cfg.KeyConcurrency)
	case cfg.Workers < 2:
		return Summary{}, fmt.Errorf("%w: need at least 2 workers, so that one can take over from the frozen one", ErrConfig)
	case len(cfg.Worker.Argv) == 0:
		return Summary{}, fmt.Errorf("%w: no worker command", ErrConfig)
	}
	d := &run{cfg: cfg, tl: cluster.NewTimeline(cfg.Out), ctx: ctx, start: time.Now()}
	defer d.stopAll()
	sum, err := d.run()
	sum.Timeline = d.tl.Lines()
	sum.Faults = map[string]int{kindPause: 0}
	if cfg.Fault == FaultPartition {
		sum.Faults = map[string]int{kindPartition: 0}
	}
	for _, f := range d.faults {
		sum.Faults[f.Kind]++
	}
	sum.Counted = d.traced != nil
	if d.traced == nil { // the run stopped before its summary
		d.traced, d.tracedAt = cluster.TraceOf(d.workers), time.Now()
	}
	sum.Trace = cluster.Trace{Start: d.start, End: d.tracedAt, Topic: d.topic, Partitions: cfg.Partitions,
		Workers: d.traced, Faults: d.faults}
	if err != nil {
		return sum, err
	}
	if !sum.OK() {
		return sum, fmt.Errorf("%w: %s", ErrInvariant, sum.Line())
	}
	return sum, nil
}

type run struct {
	cfg      Config
	ctx      context.Context
	tl       *cluster.Timeline
	workers  []*cluster.Worker
	start    time.Time
	topic    string
	faults   []cluster.FaultSpan   // the pause or the partition, once it happened
	traced   []cluster.WorkerTrace // the workers' events when the summary was counted
	tracedAt time.Time
	// net and links are w1's proxied links to every broker address
	// (Fault "partition"); gate is the file that releases its held batch.
	net   *netfault.Net
	links netfault.Links
	gate  string
}

func (d *run) logf(format string, args ...any) { d.tl.Logf(format, args...) }

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
			// KIP-848 groups take their session timeout and heartbeat
			// interval from the broker, not the client.
			BrokerConfigs: map[string]string{
				"group.consumer.session.timeout.ms":    strconv.FormatInt(d.cfg.SessionTimeout.Milliseconds(), 10),
				"group.consumer.heartbeat.interval.ms": "200",
			},
		})
		if err != nil {
			return Summary{}, err
		}
		defer b.Close()
		brokers = []string{b.Addr()}
		d.logf("embedded broker on %s (data in %s), topic %s with %d partitions", b.Addr(), dir, topic, d.cfg.Partitions)
	} else {
		topic = fmt.Sprintf("%s-demo-%d", ledger.Topic, time.Now().UnixNano())
		adm, err := kadm.NewOptClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, d.cfg.ClientOpts...)...)
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
	d.topic = topic

	st, err := cluster.OpenStore(ctx, cluster.StoreConfig{Dir: dir, SQLitePath: d.cfg.SinkPath,
		PostgresDSN: d.cfg.PostgresDSN, RedisURL: d.cfg.RedisURL, SchemaPrefix: "workrouter_demo",
		Kafka: d.cfg.Kafka, KafkaBrokers: brokers, KafkaClientOpts: d.cfg.ClientOpts, KafkaPartitions: d.cfg.Partitions})
	if err != nil {
		return Summary{}, err
	}
	defer st.Close()
	d.logf("%s", st.Desc())
	if d.cfg.KeyConcurrency > 1 {
		d.logf("workers apply with %d lanes per partition (--key-concurrency): one account's commands in one lane, in offset order", d.cfg.KeyConcurrency)
	}

	// Workers; w1 will freeze itself with SIGSTOP just before its 4th
	// batch, or hold that batch while its broker links are cut.
	if d.cfg.Fault == FaultPartition {
		if err := d.linkVictim(brokers, dir); err != nil {
			return Summary{}, err
		}
	}
	for i := 1; i <= d.cfg.Workers; i++ {
		name := "w" + strconv.Itoa(i)
		opts := cluster.WorkerOptions{Brokers: brokers, Conn: d.cfg.WorkerConn, Topic: topic, Group: group, SinkSpec: st.Spec(),
			Name: name, SessionTimeout: d.cfg.SessionTimeout, KeyConcurrency: d.cfg.KeyConcurrency, Protocol: d.cfg.Protocol}
		if i == 1 {
			opts.Hooks = []string{"--freeze-before-batch=4"}
			if d.cfg.Fault == FaultPartition {
				opts.Hooks = append(opts.Hooks, "--freeze-hold-file="+d.gate)
				if !d.cfg.bypass {
					opts.Hooks = append(opts.Hooks, "--dial-map="+d.links.DialMap())
				}
			}
		}
		w, err := cluster.StartWorker(name, d.cfg.Worker, nil, opts.Args()...)
		if err != nil {
			return Summary{}, fmt.Errorf("demo: %w", err)
		}
		d.workers = append(d.workers, w)
	}
	if err := d.waitUntil(60*time.Second, "every partition claimed by a worker", func() bool {
		owned := map[int32]bool{}
		for _, w := range d.workers {
			for p := range w.Owned() {
				owned[p] = true
			}
		}
		return len(owned) == int(d.cfg.Partitions)
	}); err != nil {
		return Summary{}, err
	}
	time.Sleep(500 * time.Millisecond) // let the cooperative rebalances settle
	for _, w := range d.workers {
		d.logf("%s owns %s", w.Name(), cluster.Describe(w.Owned()))
	}

	rt, err := router.New(ctx, router.Config{Brokers: brokers, Topic: topic, ClientOpts: d.cfg.ClientOpts})
	if err != nil {
		return Summary{}, err
	}
	defer rt.Close()
	p := cluster.NewProducer(rt, d.cfg.Seed, d.cfg.Accounts)
	half := d.cfg.Commands / 2
	if err := p.Send(ctx, half); err != nil {
		return Summary{}, err
	}
	d.logf("produced %d ledger commands over %d accounts", half, d.cfg.Accounts)

	zombie := d.pause
	if d.cfg.Fault == FaultPartition {
		zombie = d.partition
	}
	if err := zombie(d.workers[0]); err != nil {
		return Summary{}, err
	}

	if err := p.Send(ctx, d.cfg.Commands-half); err != nil {
		return Summary{}, err
	}
	d.logf("produced %d more commands", d.cfg.Commands-half)
	converged := d.waitUntil(120*time.Second, "every command applied and Kafka lag at zero", func() bool {
		n, err := st.Count(ctx, `SELECT count(*) FROM ledger_postings`)
		return err == nil && n >= d.cfg.Commands && cluster.LagZero(ctx, brokers, topic, group, d.cfg.ClientOpts...)
	})
	if converged != nil {
		d.logf("not converged: %v", converged)
	} else {
		d.logf("lag is zero: all %d commands applied", d.cfg.Commands)
	}
	for _, w := range d.workers {
		d.logf("%s finally owns %s", w.Name(), cluster.Describe(w.Owned()))
	}

	// Verify from the sink's own records, with the invariant checker.
	applied, err := st.Count(ctx, `SELECT count(*) FROM ledger_postings`)
	if err != nil {
		return Summary{}, err
	}
	rep, err := st.Check(ctx, cluster.CheckConfig{Brokers: brokers, ClientOpts: d.cfg.ClientOpts, Group: group, Topic: topic,
		Partitions: d.cfg.Partitions, Acked: p.Acked(), NotConverged: converged != nil})
	if err != nil {
		return Summary{}, err
	}
	sum := Summary{Produced: d.cfg.Commands, Applied: applied, Duplicates: rep.X,
		OrderViolations: rep.O, Lost: rep.L, StaleAccepted: rep.F, NotConverged: rep.V,
		Violations: rep.Notes(20), Invariants: rep.Violations}
	// The stale writes rejected are counted from the same events the
	// report draws (Summary.Trace).
	d.traced, d.tracedAt = cluster.TraceOf(d.workers), time.Now()
	for _, w := range d.traced {
		sum.StaleRejected += w.Count(consumer.KindFenced)
	}
	for _, n := range sum.Violations {
		d.logf("%s", n)
	}
	return sum, nil
}

// pause freezes victim with SIGSTOP just before its 4th batch (its
// --freeze-before-batch), waits until every partition it held was taken
// over at a newer epoch, resumes it with SIGCONT and waits until its late
// write was decided.
func (d *run) pause(victim *cluster.Worker) error {
	if err := d.waitUntil(60*time.Second, victim.Name()+" to freeze", func() bool { return len(victim.Freezes()) > 0 && victim.Stopped() }); err != nil {
		return err
	}
	ft := victim.Freezes()[0]
	held := victim.Owned()
	pausedAt := time.Now()
	d.logf("PAUSE %s: SIGSTOP just before its batch on partition %d at epoch %d; its session timeout is %s; it held %s",
		victim.Name(), ft.Partition, ft.Epoch, d.cfg.SessionTimeout, cluster.Describe(held))

	// Another worker must take over every partition the victim held and
	// apply there, while the victim is frozen.
	if err := d.waitTakenOver(victim, held, "the frozen worker's partitions to be taken over"); err != nil {
		return err
	}
	if !victim.Stopped() {
		return fmt.Errorf("demo: %s resumed before the takeover: the pause did not outlast its session", victim.Name())
	}
	if err := victim.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	d.faults = append(d.faults, cluster.FaultSpan{Kind: kindPause, Victim: victim.Name(), Start: pausedAt, End: time.Now(),
		Detail: fmt.Sprintf("SIGSTOP just before its batch on partition %d at epoch %d, past its session timeout (%s); SIGCONT after the takeover", ft.Partition, ft.Epoch, d.cfg.SessionTimeout)})
	d.logf("RESUME %s with SIGCONT: it still believes it owns partition %d at epoch %d", victim.Name(), ft.Partition, ft.Epoch)
	if err := d.waitUntil(60*time.Second, "the late write to be decided", func() bool { return victim.FencedCount() > 0 }); err != nil {
		return err
	}
	for _, f := range victim.FencedLines() {
		d.logf("REJECTED late write by %s: %s", victim.Name(), f)
	}
	return nil
}

// linkVictim starts w1's links: a proxy to every address a client of
// brokers dials (the seeds and every advertised broker), which w1 dials
// instead (its --dial-map), and the file that will release its held
// batch.
func (d *run) linkVictim(brokers []string, dir string) error {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	addrs, err := cluster.BrokerAddrs(ctx, brokers, d.cfg.ClientOpts...)
	cancel()
	if err != nil {
		return fmt.Errorf("demo: the broker addresses to proxy: %w", err)
	}
	d.net = netfault.New()
	if d.links, err = d.net.Links("w1-broker-", addrs); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.gate = filepath.Join(dir, "release-w1")
	d.logf("w1 reaches the brokers %v through proxies of its own (--dial-map), which can cut its links", addrs)
	return nil
}

// partition lets victim (w1) take its 4th batch in hand and hold it
// there, running (--freeze-before-batch with --freeze-hold-file), cuts its
// links to every broker both ways, and asserts each step: the cut drops
// bytes, every partition it held is taken over at a newer epoch, and once
// the batch is released its write reaches the sink and is refused. Then
// it heals the links.
func (d *run) partition(victim *cluster.Worker) error {
	name := victim.Name()
	if err := d.waitUntil(60*time.Second, name+" to take its 4th batch in hand", func() bool { return len(victim.Freezes()) > 0 }); err != nil {
		return err
	}
	ft := victim.Freezes()[0]
	held := victim.Owned()
	d0 := d.links.Dropped()
	if err := d.links.Cut(); err != nil {
		return fmt.Errorf("demo: cutting %s's broker links: %w", name, err)
	}
	cutAt := time.Now()
	d.logf("PARTITION %s: its %s cut both ways (black-holed: every byte dropped, no connection closed); it keeps running, "+
		"with its batch of partition %d at epoch %d (offsets %d–%d) in hand; its session timeout is %s; it held %s",
		name, plural(len(d.links), "broker link", "broker links"), ft.Partition, ft.Epoch, ft.First, ft.Last, d.cfg.SessionTimeout, cluster.Describe(held))
	// A member heartbeats every 200 ms: a cut that drops nothing is a
	// cut the worker's connections go around.
	if err := cluster.WaitUntil(d.ctx, 2*d.cfg.SessionTimeout, "bytes dropped", func() bool { return d.links.Dropped() > d0 }); err != nil {
		return fmt.Errorf("demo: PARTITION %s: no byte dropped on its cut links in %s: its connections do not go through them (--dial-map)", name, 2*d.cfg.SessionTimeout)
	}
	if err := d.waitTakenOver(victim, held, "the cut worker's partitions to be taken over"); err != nil {
		return err
	}
	if victim.Exited() || victim.Stopped() {
		return fmt.Errorf("demo: %s did not stay running through the partition", name)
	}
	fenced := victim.FencedCount()
	if err := os.WriteFile(d.gate, nil, 0o644); err != nil {
		return fmt.Errorf("demo: releasing %s's batch: %w", name, err)
	}
	d.logf("RELEASE %s's held batch, its broker links still cut: it still believes it owns partition %d at epoch %d", name, ft.Partition, ft.Epoch)
	// On the Kafka sink the sink's producer reaches the brokers through
	// the same links: its held transaction reaches the group coordinator,
	// which refuses its offset commit, only once they heal.
	var lost int64
	var healAt time.Time
	heal := func() error {
		lost = d.links.Dropped() - d0
		if err := d.links.Heal(); err != nil {
			return fmt.Errorf("demo: healing %s's broker links: %w", name, err)
		}
		healAt = time.Now()
		d.logf("HEAL %s: its broker links restored after %s, %d bytes dropped while cut", name, healAt.Sub(cutAt).Round(time.Millisecond), lost)
		return nil
	}
	if d.cfg.Kafka {
		if err := heal(); err != nil {
			return err
		}
	}
	// Wait for the refusal of the held batch itself: another write of the
	// cut worker (a transaction of its other partition, in flight when
	// the links were cut) may be refused first.
	heldRefused := func() bool {
		for _, r := range victim.Records() {
			if r.Kind == consumer.KindFenced && r.Partition == ft.Partition && r.Epoch == ft.Epoch {
				return true
			}
		}
		return false
	}
	if err := d.waitUntil(60*time.Second, name+"'s held write to be refused", heldRefused); err != nil {
		if victim.FencedCount() > fenced {
			return fmt.Errorf("demo: %s's refused writes (%v) are not its held batch of partition %d at epoch %d", name, victim.FencedLines(), ft.Partition, ft.Epoch)
		}
		return fmt.Errorf("%w (its write of partition %d at epoch %d, released after the takeover, was not refused by the sink)", err, ft.Partition, ft.Epoch)
	}
	for _, f := range victim.FencedLines() {
		d.logf("REJECTED late write by %s: %s", name, f)
	}
	if !d.cfg.Kafka {
		if err := heal(); err != nil {
			return err
		}
	}
	d.faults = append(d.faults, cluster.FaultSpan{Kind: kindPartition, Victim: name, Start: cutAt, End: healAt,
		Detail: fmt.Sprintf("broker links cut both ways for %s while it held its batch of partition %d at epoch %d, running; taken over; the held write refused by the sink; %d bytes dropped",
			healAt.Sub(cutAt).Round(time.Millisecond), ft.Partition, ft.Epoch, lost)})
	if n := victim.Count(faults.KindDialUnmapped); n > 0 {
		return fmt.Errorf("demo: %s dialled %d broker addresses outside its links: the cut did not reach every connection", name, n)
	}
	// Healed, it rejoins the group and claims partitions again.
	var back []string
	if err := d.waitUntil(60*time.Second, name+" to claim a partition again after the heal", func() bool {
		back = back[:0]
		for _, r := range victim.Records() {
			if r.Kind == consumer.KindClaimed && r.Time.After(healAt) {
				back = append(back, fmt.Sprintf("p%d@epoch%d", r.Partition, r.Epoch))
			}
		}
		return len(back) > 0
	}); err != nil {
		return err
	}
	d.logf("%s back in the group after the heal: it claimed %s", name, strings.Join(back, " "))
	return nil
}

// plural is n and the noun's form for it.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// waitTakenOver waits until another worker claimed every partition in
// held at a newer epoch than victim's, and logs each takeover.
func (d *run) waitTakenOver(victim *cluster.Worker, held map[int32]cluster.Claim, what string) error {
	if err := d.waitUntil(90*time.Second, what, func() bool {
		for part, c := range held {
			owner, oc := cluster.OwnerOf(d.workers, part)
			if owner == nil || owner == victim || oc.Epoch <= c.Epoch {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	for part, c := range held {
		owner, oc := cluster.OwnerOf(d.workers, part)
		d.logf("partition %d taken over by %s at epoch %d (from %s's epoch %d), resuming at offset %d", part, owner.Name(), oc.Epoch, victim.Name(), c.Epoch, oc.Next)
	}
	return nil
}

// waitUntil is cluster.WaitUntil that also stops when a worker exits.
func (d *run) waitUntil(timeout time.Duration, what string, cond func() bool) error {
	var exited *cluster.Worker
	err := cluster.WaitUntil(d.ctx, timeout, what, func() bool {
		for _, w := range d.workers {
			if w.Exited() {
				exited = w
				return true
			}
		}
		return cond()
	})
	if exited != nil {
		return fmt.Errorf("demo: worker %s exited while waiting for %s: %s", exited.Name(), what, exited.LastErr())
	}
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// stopAll stops the workers, w1 through its links healed and with its
// batch released (so that it can leave the group), and then closes the
// links.
func (d *run) stopAll() {
	if d.links != nil {
		_ = d.links.Heal()
		_ = os.WriteFile(d.gate, nil, 0o644) // w1's batch, if still held
	}
	cluster.StopAll(d.workers, 15*time.Second)
	if d.net != nil {
		d.net.Close()
		if k, last := d.net.Refused(); k > 0 {
			d.logf("network fault layer: w1's links closed %d connections whose upstream could not be dialled (last: %v)", k, last)
		}
	}
}
