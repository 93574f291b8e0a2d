// Package chaos is workrouter's fault harness: a seeded, repeatable
// experiment that runs worker processes of the ledger example against a
// broker process (kfake, with synchronous writes to a data dir; see
// package brokerproc) and a durable sink (SQLite or PostgreSQL),
// produces keyed commands at a steady rate, injects faults of the selected
// kinds at seeded random intervals, and then checks from the sink's own
// records that the fencing promise held: no stale write landed (F), nothing
// acknowledged was lost (L), per-key order held (O), no command ID was
// applied twice (X: every copy of a command in the log skipped as a
// duplicate), lag returned to zero after the faults and no committed
// offset was ever ahead of the sink's NextOffset (V: sampled every 1–2 s
// all along the run, see vSampler), and every record that was skipped has
// exactly one dead letter, nothing else was skipped and no record was both
// dead-lettered and applied (D). It also checks that the faults happened:
// every requested kind fired, a stale write was rejected when pauses or
// heartbeat blackholes ran, V was sampled, and a poison record was
// dead-lettered right after an offset gap when poison ran.
//
// The fault kinds (Kind) and what each does on each sink:
//
//   - pause: SIGSTOP a worker past its session timeout, then SIGCONT. Two
//     of three pauses are armed to freeze between transactions (so an
//     SQLite writer does not hold the write lock while stopped), resumed
//     either right after another worker claimed its partition (before the
//     new owner's first write) or after the new owner's first write; the
//     third is a plain SIGSTOP at a random moment for 1.5× the session.
//   - kill: SIGKILL a worker, then start a new process in its place.
//   - heartbeat: hold back one member's group heartbeats at the broker
//     (kfake request interception, no reply) for 1.5× the session while it
//     keeps fetching and writing.
//   - broker-conn: close all of one worker's broker connections, or stall
//     them for 1.5× the session (a wrapping kgo.Dialer in the worker).
//   - sink-conn: on PostgreSQL, pg_terminate_backend on the worker's
//     connections (found by application_name), preferring one inside a
//     transaction; on SQLite, which has no connection to cut, the worker's
//     next transaction has its context cancelled after its first effect.
//   - coordinator: for 1–2.5 s, answer one member's heartbeats and offset
//     commits with NOT_COORDINATOR, REBALANCE_IN_PROGRESS, or no reply.
//   - poison: a foreign producer (a plain kgo client with explicit
//     partitions, not the router) writes, between the good commands, one
//     record of each cluster.PoisonKind: not an envelope, a null key, two
//     type headers, a type without a handler, a payload the ledger's
//     handler refuses. Then a transactional client writes poison records
//     right after a commit marker and right after an aborted transaction
//     (cluster.PoisonProducer.Transactions), which the workers, reading
//     read_committed, dead-letter above their checkpoint. The workers
//     dead-letter types without a handler (--on-no-handler dead-letter)
//     and give a failing handler 3 attempts.
//   - broker-restart: SIGKILL the broker process and start it again on the
//     same address and data dir; every acknowledged record must still be
//     there, and every worker must claim again.
//   - resend: the load producer sends 5–20 commands the broker had
//     acknowledged again, with their command IDs (cluster.Producer.Resend),
//     as an application retrying Send after an ambiguous error whose first
//     attempt had landed; the workers must skip every copy as a duplicate
//     (X is per command ID), and the run fails if none was skipped.
//   - churn: all along the run, beside the other faults, an extra member
//     joins, stays 1–5 s and leaves (SIGTERM), and the next joins 1–5 s
//     later; each join-and-leave counts as one churn fault.
//
// With Config.KafkaNodes the run goes on a cluster of Apache Kafka nodes
// it starts itself (package kafkacluster; the run's topic with 3 replicas
// and min.insync.replicas=2, producers idempotent with acks=all) instead
// of the embedded broker, and four more kinds act on its nodes. Each is
// counted only when the cluster, read again after the fault, reports that
// it moved what it had to move (NodeFault.Happened), and each ends with
// the node running again and every replica of the run's topic and of the
// group offsets in sync, so that one node at most is ever down:
//
//   - leader-kill: SIGKILL the leader of a partition a worker is applying
//     (the metadata must name another leader), then start it again.
//   - controller-kill: SIGKILL the active KRaft controller (DescribeQuorum
//     must name another quorum leader at a newer epoch), then start it
//     again.
//   - broker-pause: SIGSTOP the leader of a partition a worker is applying
//     past its broker session (the controller fences it: the metadata must
//     name another leader), then SIGCONT.
//   - coordinator-restart: stop (SIGTERM) the node coordinating the
//     workers' group (FindCoordinator must name another node), then start
//     it again.
//
// A fifth, PartitionBrokerNode, runs there only when named: it cuts one
// node off from the others and from its clients (see nodepartition.go).
//
// heartbeat, coordinator and broker-restart need the embedded broker and
// do not run there (Excluded says why, and the run says so).
//
// Four network kinds (NetKinds) run only when named, wherever the run
// goes: with any of them each worker w1…wN reaches every broker address
// and its sink through TCP proxies of its own (package netfault), and
//
//   - partition-broker: hold one worker's next batch, cut its broker links
//     both ways while its sink link works, release the batch once another
//     member claimed its partition (the sink must refuse its write), heal;
//   - partition-sink: cut one worker's sink link for 1.5× the session,
//     heal;
//   - one-way: drop the replies on one worker's sink link for 1.5× the
//     session (its requests still land), heal; the worker must retry;
//   - slow-link: delay one worker's broker links by 300 ms ± 100 ms each
//     way for 1.5× the session, heal.
//
// On the Kafka sink (Config.Kafka) the sink is the brokers: each worker's
// sink clients (its transactional producers, its admin client, the
// ledger's events reader) reach every broker address through sink links
// of their own (the worker's --sink-dial-map), apart from its consumer's
// broker links. partition-broker cuts both, so the held transaction's
// offset commit reaches the group coordinator after the heal and is
// refused; partition-sink cuts the sink links only (the consumer keeps
// its partitions; the producer's requests go unanswered and are sent
// again after the heal); one-way drops the replies on the sink links (a
// produce, offset commit or EndTxn lands unheard and is sent again by the
// client: X shows it did not apply twice); slow-link delays both.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/brokerproc"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/cmd/internal/faults"
	"github.com/workrouter/workrouter/cmd/internal/netfault"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/kafkacluster"
	"github.com/workrouter/workrouter/router"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds; see the package documentation.
const (
	Pause         Kind = "pause"
	Kill          Kind = "kill"
	Heartbeat     Kind = "heartbeat"
	BrokerConn    Kind = "broker-conn"
	SinkConn      Kind = "sink-conn"
	Coordinator   Kind = "coordinator"
	Poison        Kind = "poison"
	BrokerRestart Kind = "broker-restart"
	Resend        Kind = "resend"
	Churn         Kind = "churn"
)

// Kinds returns every fault kind, in the order of the report's table.
func Kinds() []Kind {
	return []Kind{Pause, Kill, Heartbeat, BrokerConn, SinkConn, Coordinator, Poison, BrokerRestart, Resend,
		LeaderKill, ControllerKill, BrokerPause, CoordinatorRestart, Churn, PartitionBroker, PartitionSink, OneWay, SlowLink, PartitionBrokerNode}
}

// EmbeddedKinds returns the fault kinds of a run on the harness's own
// embedded broker (the default): every kind but those of Kafka nodes.
func EmbeddedKinds() []Kind {
	return []Kind{Pause, Kill, Heartbeat, BrokerConn, SinkConn, Coordinator, Poison, BrokerRestart, Resend, Churn}
}

// ClusterKinds returns the fault kinds of a run on a cluster of Apache
// Kafka nodes the harness started (Config.KafkaNodes): the kinds of the
// workers, the sink, the producers and the log, and those of the nodes
// (leader-kill, controller-kill, broker-pause, coordinator-restart); not
// heartbeat, coordinator and broker-restart (see Excluded).
func ClusterKinds() []Kind {
	return []Kind{Pause, Kill, BrokerConn, SinkConn, Poison, Resend, LeaderKill, ControllerKill, BrokerPause, CoordinatorRestart, Churn}
}

// ExternalKinds returns the fault kinds that work on any cluster
// (Config.Brokers): those that touch no broker.
func ExternalKinds() []Kind {
	return []Kind{Pause, Kill, BrokerConn, SinkConn, Resend, Churn}
}

// Excluded returns, for a run on an external cluster (external) or on
// Kafka nodes the harness started (nodes), or on the embedded broker
// (neither), the kinds that do not apply there and why.
func Excluded(external, nodes bool) map[Kind]string {
	out := map[Kind]string{}
	switch {
	case external:
		for _, k := range []Kind{Heartbeat, Coordinator} {
			out[k] = "intercepts requests inside the embedded broker"
		}
		out[BrokerRestart] = "kills and restarts the embedded broker's process"
		out[Poison] = "not enabled on --brokers"
		for _, k := range allNodeKinds {
			out[k] = "acts on Kafka nodes the harness started (--kafka-nodes)"
		}
	case nodes:
		for _, k := range []Kind{Heartbeat, Coordinator} {
			out[k] = "intercepts requests inside the embedded broker; on Kafka nodes broker-pause and coordinator-restart take its place"
		}
		out[BrokerRestart] = "kills and restarts the embedded broker's process; on Kafka nodes leader-kill and controller-kill do that to real nodes"
	default:
		for _, k := range allNodeKinds {
			out[k] = "acts on Kafka nodes (--kafka-nodes)"
		}
	}
	return out
}

// ErrConfig is matched by the error Run or ParseKinds returns for a bad
// configuration.
var ErrConfig = errors.New("chaos: invalid config")

// ErrFailed is matched by the error Run returns when the run finished but
// an invariant was violated, a requested kind never fired, or no stale
// write was rejected although pauses or heartbeat faults ran.
var ErrFailed = errors.New("chaos: run failed")

// ParseKinds parses a comma-separated list of kinds, or "all" (or
// nothing), which it returns as nil: every kind that applies where the
// run goes (EmbeddedKinds, ClusterKinds or ExternalKinds; see
// Config.Kinds).
func ParseKinds(s string) ([]Kind, error) {
	if strings.TrimSpace(s) == "all" || strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(f))
		if !slices.Contains(Kinds(), k) {
			return nil, fmt.Errorf("%w: unknown fault kind %q (want all or some of %v)", ErrConfig, k, Kinds())
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// Config configures Run. Zero values take the documented defaults.
type Config struct {
	// Duration is how long commands are produced and faults injected;
	// default 2m.
	Duration time.Duration
	// Seed seeds the fault schedule and the commands.
	Seed uint64
	// Kinds are the fault kinds to inject; default every kind that
	// applies: EmbeddedKinds, ClusterKinds with KafkaNodes, ExternalKinds
	// with Brokers.
	Kinds []Kind
	// Workers is the number of worker processes (at least 2); default 3.
	Workers int
	// Partitions of the topic; default 6.
	Partitions int32
	// Accounts (keys); default 200.
	Accounts int
	// Rate is commands produced per second; default 200.
	Rate int
	// SinkPath is the SQLite file; default one in a temporary directory.
	SinkPath string
	// PostgresDSN selects PostgreSQL, in a fresh schema dropped at the end.
	PostgresDSN string
	// RedisURL selects Redis, under a fresh key prefix deleted at the end;
	// its sink-conn fault is CLIENT KILL of the worker's connections.
	RedisURL string
	// Kafka selects sink/kafka: the ledger's decisions published as
	// events, in transactions, to topics of the run's own on the run's
	// broker, checked from what a read_committed consumer sees (D from
	// the sink's dead-letter topic). Resend does not apply there
	// (kafkaExcluded).
	Kafka bool
	// Protocol is "cooperative" (default) or "kip848".
	Protocol string
	// SessionTimeout of the workers; default 2s.
	SessionTimeout time.Duration
	// RebalanceTimeout of the workers; default 2.5× SessionTimeout. The
	// embedded broker (kfake) restarts a classic group's rebalance timer on
	// every join and every session expiry while the group is preparing a
	// rebalance, and never drops a dead member before that timer fires
	// (Kafka drops it at its session timeout): with the worker's default
	// of 60s and a join every few seconds, the group stays in
	// PreparingRebalance for good. A short timeout lets it complete.
	RebalanceTimeout time.Duration
	// KeyConcurrency is the workers' lanes per partition
	// (consumer.Config.KeyConcurrency, the worker's --key-concurrency);
	// default 1. With more, a partition's accounts are applied out of
	// offset order across accounts, and O is checked per account in the
	// postings' application order.
	KeyConcurrency int
	// RecoverTimeout bounds the wait for lag zero after the faults;
	// default 2m.
	RecoverTimeout time.Duration
	// Brokers, if set, runs the experiment on that cluster, on a topic of
	// its own (ledger-chaos-<time>), instead of the harness's broker.
	// Only ExternalKinds can be injected there (the default then).
	// Plaintext only: the broker-conn fault cuts plain TCP connections.
	// The broker's own group settings apply: for KIP-848, its
	// group.consumer.session.timeout.ms must not exceed SessionTimeout, or
	// a paused worker is not evicted before it resumes.
	Brokers []string
	// KafkaNodes, if set (at least 3), runs the experiment on a cluster
	// of that many Apache Kafka nodes (each a broker and a KRaft
	// controller) that Run starts with package kafkacluster on free ports
	// of 127.0.0.1 and stops at the end, with its topic replicated 3
	// times and min.insync.replicas=2, instead of the embedded broker.
	// ClusterKinds can be injected there (the default then).
	KafkaNodes int
	// LogDir, if set, receives each worker process's log as
	// NAME-PID.log and the broker's as broker.log (every start of the
	// broker process appends to it), for post-mortems.
	LogDir string
	// Worker is the workrouter-lab binary: it starts each worker process (the
	// harness's worker; see cluster.StartWorker) and the broker process
	// (the harness's broker; see package brokerproc). Required.
	Worker cluster.Binary
	// Out receives the timeline as it happens; nil discards.
	Out io.Writer
}

func (c Config) withDefaults() (Config, error) {
	if c.Duration == 0 {
		c.Duration = 2 * time.Minute
	}
	applies := EmbeddedKinds()
	switch {
	case len(c.Brokers) > 0:
		applies = ExternalKinds()
	case c.KafkaNodes > 0:
		applies = ClusterKinds()
	}
	if c.Kafka {
		applies = slices.DeleteFunc(slices.Clone(applies), func(k Kind) bool { _, ok := kafkaExcluded[k]; return ok })
	}
	if len(c.Kinds) == 0 {
		c.Kinds = applies
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.Partitions == 0 {
		c.Partitions = 6
	}
	if c.Accounts == 0 {
		c.Accounts = 200
	}
	if c.Rate == 0 {
		c.Rate = 200
	}
	if c.Protocol == "" {
		c.Protocol = "cooperative"
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 2 * time.Second
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = c.SessionTimeout * 5 / 2
	}
	if c.RecoverTimeout == 0 {
		c.RecoverTimeout = 2 * time.Minute
	}
	if c.KeyConcurrency == 0 {
		c.KeyConcurrency = 1
	}
	switch {
	case len(c.Worker.Argv) == 0:
		return c, fmt.Errorf("%w: no worker command", ErrConfig)
	case c.Workers < 2:
		return c, fmt.Errorf("%w: need at least 2 workers, so that one can take over from another", ErrConfig)
	case c.Duration < 0, c.Partitions < 1, c.Accounts < 1, c.Rate < 1, c.SessionTimeout < 0, c.RecoverTimeout < 0, c.RebalanceTimeout < 0:
		return c, fmt.Errorf("%w: duration, partitions, accounts and rate must be positive", ErrConfig)
	case c.KeyConcurrency < 1:
		return c, fmt.Errorf("%w: key concurrency %d: want at least 1 lane per partition", ErrConfig, c.KeyConcurrency)
	case c.Protocol != "cooperative" && c.Protocol != "kip848":
		return c, fmt.Errorf("%w: protocol %q: want cooperative or kip848", ErrConfig, c.Protocol)
	case c.KafkaNodes > 0 && len(c.Brokers) > 0:
		return c, fmt.Errorf("%w: Kafka nodes to start and an external cluster at once: want one of them", ErrConfig)
	case c.KafkaNodes < 0 || c.KafkaNodes > 0 && c.KafkaNodes < replicationFactor:
		return c, fmt.Errorf("%w: %d Kafka nodes: want at least %d (the topic has %d replicas, min.insync.replicas=2, and one node is down at a time)", ErrConfig, c.KafkaNodes, replicationFactor, replicationFactor)
	}
	if c.Kafka && c.KeyConcurrency != 1 {
		return c, fmt.Errorf("%w: key concurrency %d: the Kafka sink applies a partition in offset order (its checkpoint, the committed offset, holds no gaps)", ErrConfig, c.KeyConcurrency)
	}
	excluded := c.excluded()
	for _, k := range c.Kinds {
		if !slices.Contains(Kinds(), k) {
			return c, fmt.Errorf("%w: unknown fault kind %q", ErrConfig, k)
		}
		if !slices.Contains(applies, k) && !namedOnly(c, k) {
			return c, fmt.Errorf("%w: fault kind %q does not apply here: it %s (those do: %v)", ErrConfig, k, excluded[k], applies)
		}
	}
	return c, nil
}

// kafkaExcluded are the fault kinds that do not run on the Kafka sink,
// and why.
var kafkaExcluded = map[Kind]string{
	BrokerRestart: "restarts the embedded broker from its data dir, and kfake commits a transaction's records before it applies " +
		"its offset commits: a kill between the two leaves outputs visible with the group's offsets behind them, and the checker " +
		"reports their writer as stale (F; docs/chaos.md); the workers come back, and on Kafka nodes leader-kill, controller-kill " +
		"and coordinator-restart run with this sink",
	Resend: "counts the worker's skipped duplicates, and the Kafka sink has no dedupe window (the ledger decides a repeated ID once, " +
		"as an applied record)",
}

// excluded returns Excluded for where c runs, plus kafkaExcluded on the
// Kafka sink.
func (c Config) excluded() map[Kind]string {
	out := Excluded(len(c.Brokers) > 0, c.KafkaNodes > 0)
	if c.Kafka {
		for k, why := range kafkaExcluded {
			if _, ok := out[k]; !ok {
				out[k] = why + " (--sink kafka)"
			}
		}
	}
	return out
}

const group = "ledger-chaos"

// maxAttempts is the workers' budget of failed handler attempts before a
// record is dead-lettered.
const maxAttempts = 3

// Run runs the experiment. It owns every process and goroutine it starts
// and ends them before returning. The Result is filled as far as the run
// got; the error matches ErrFailed when the run finished but did not pass
// (see Result.OK).
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	r := &run{cfg: cfg, ctx: ctx, start: time.Now(), times: defaultNodeTimes(), tl: cluster.NewTimeline(cfg.Out), ended: map[*cluster.Worker]bool{}, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed)),
		stopWatch: make(chan struct{}),
		res: Result{Requested: slices.Clone(cfg.Kinds), Faults: map[Kind]int{}, Protocol: cfg.Protocol, Seed: cfg.Seed, KeyConcurrency: cfg.KeyConcurrency,
			KafkaNodes: cfg.KafkaNodes, Excluded: cfg.excluded()}}
	defer r.stopAll()
	stopWatching := sync.OnceFunc(func() { close(r.stopWatch); r.watchWG.Wait() })
	defer stopWatching()
	err = r.run()
	stopWatching()
	r.mu.Lock()
	r.res.Trace.Start = r.start
	r.res.Trace.Topic, r.res.Trace.Partitions = r.topic, cfg.Partitions
	if r.res.Trace.Workers == nil { // the run stopped before its check
		r.res.Trace.Workers, r.res.Trace.End = cluster.TraceOf(r.all), time.Now()
	}
	res := r.res
	r.mu.Unlock()
	if err != nil {
		return res, err
	}
	if !res.OK() {
		return res, fmt.Errorf("%w: %s", ErrFailed, strings.Join(res.Failures(), "; "))
	}
	return res, nil
}

type run struct {
	cfg   Config
	ctx   context.Context
	start time.Time
	rng   *rand.Rand // the fault schedule's; used by the scheduler goroutine only

	// kc and nodes are the Kafka cluster of Config.KafkaNodes; times
	// bounds the node faults' waits; applyingFn, if set, replaces
	// applying (tests).
	kc         *kafkacluster.Cluster
	nodes      nodeControl
	times      nodeTimes
	applyingFn func() (string, int32, bool)
	nodeNet    *nodeLinks    // the links of the Kafka nodes (partition-broker-node), or nil
	startup    time.Duration // how long the Kafka cluster took to start

	brokers    []string
	topic      string
	store      *cluster.Store
	bp         *brokerproc.Process
	prod       *cluster.Producer
	poisonProd *cluster.PoisonProducer
	// quiet is held by the load producer while it sends and flushes, and
	// by the poison transactions: nothing else is written meanwhile, so
	// each transactional poison record follows a transaction marker
	// directly (a gap right before it, every time).
	quiet sync.Mutex

	tl *cluster.Timeline

	// net is the network fault layer (NetKinds), nil without those
	// kinds; links are each worker's links, by name; gateDir holds the
	// hold gates.
	net     *netfault.Net
	links   map[string]*links
	gateDir string

	sampler vSampler // V's samples; its goroutine's until it stopped

	watchWG   sync.WaitGroup // watchTakeover's goroutines
	stopWatch chan struct{}  // closed when the run stops watching takeovers

	mu       sync.Mutex
	watching map[string]chan struct{} // victim name → closed when its takeover watch is superseded
	active   []*cluster.Worker        // current members, by slot (w1..wN)
	all      []*cluster.Worker        // every process ever started
	churned  int
	ended    map[*cluster.Worker]bool // processes the harness ended on purpose
	logs     []*os.File               // worker logs (LogDir), closed after the workers
	victim   string                   // the worker the fault being injected hit (supersede)
	detail   string                   // what the fault being injected did, for the report (setDetail)
	res      Result

	notConverged bool // the wait for lag zero timed out (V)
}

// markEnded records that the harness is about to end w on purpose.
func (r *run) markEnded(w *cluster.Worker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended[w] = true
}

// logf writes one timeline line; the scheduler, the churn loop and the
// takeover watches call it.
func (r *run) logf(format string, args ...any) { r.tl.Logf(format, args...) }

// reportRefused logs the connections the links of n closed because
// dialling their upstream failed (what the clients saw as a refusal), if
// any.
func (r *run) reportRefused(what string, n *netfault.Net) {
	if k, last := n.Refused(); k > 0 {
		r.logf("network fault layer: %s closed %d connections whose upstream could not be dialled (last: %v)", what, k, last)
	}
}

// useCluster creates the run's topic on Config.Brokers.
func (r *run) useCluster() error {
	r.brokers = r.cfg.Brokers
	r.topic = fmt.Sprintf("%s-chaos-%d", ledger.Topic, time.Now().UnixNano())
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(r.brokers...))
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, r.cfg.Partitions, -1, nil, r.topic); err != nil {
		return fmt.Errorf("chaos: creating topic %s on %v: %w", r.topic, r.brokers, err)
	}
	return nil
}

// startBroker starts the harness's broker process (package brokerproc)
// with the run's topic and its data in dir; the returned function stops
// it.
func (r *run) startBroker(dir string) (func(), error) {
	r.topic = ledger.Topic
	var brokerLog io.Writer
	closeLog := func() {}
	if r.cfg.LogDir != "" {
		f, err := os.OpenFile(filepath.Join(r.cfg.LogDir, "broker.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("chaos: broker log: %w", err)
		}
		closeLog = func() { f.Close() }
		brokerLog = f
	}
	// KIP-848 groups take their session timeout and heartbeat interval
	// from the broker, not the client: give them the workers' values.
	bp, err := brokerproc.Start(r.ctx, r.cfg.Worker, brokerproc.Config{
		DataDir: filepath.Join(dir, "broker"), SyncWrites: true, Control: filepath.Join(dir, "broker.sock"),
		Topic: r.topic, Partitions: r.cfg.Partitions, MinSessionTimeout: 100 * time.Millisecond,
		BrokerConfigs: map[string]string{
			"group.consumer.session.timeout.ms":    strconv.FormatInt(r.cfg.SessionTimeout.Milliseconds(), 10),
			"group.consumer.heartbeat.interval.ms": "200",
		},
		Verbose: r.cfg.LogDir != "",
	}, brokerLog)
	if err != nil {
		closeLog()
		return nil, fmt.Errorf("chaos: starting the broker: %w", err)
	}
	r.bp = bp
	r.brokers = []string{bp.Addr()}
	return func() {
		bp.Stop(15 * time.Second)
		closeLog()
	}, nil
}

func (r *run) run() error {
	ctx := r.ctx
	dir, err := os.MkdirTemp("", "workrouter-chaos-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	switch {
	case len(r.cfg.Brokers) > 0:
		if err := r.useCluster(); err != nil {
			return err
		}
	case r.cfg.KafkaNodes > 0:
		kdir := filepath.Join(dir, "kafka")
		if r.cfg.LogDir != "" {
			kdir = filepath.Join(r.cfg.LogDir, "kafka") // the nodes' logs kept
		}
		stop, err := r.startKafka(kdir)
		if err != nil {
			return err
		}
		defer stop()
	default:
		stop, err := r.startBroker(dir)
		if err != nil {
			return err
		}
		defer stop()
	}
	defer r.stopAll() // the workers leave while the broker is still up

	st, err := cluster.OpenStore(ctx, cluster.StoreConfig{Dir: dir, SQLitePath: r.cfg.SinkPath,
		PostgresDSN: r.cfg.PostgresDSN, RedisURL: r.cfg.RedisURL, SchemaPrefix: "workrouter_chaos",
		Kafka: r.cfg.Kafka, KafkaBrokers: r.brokers, KafkaPartitions: r.cfg.Partitions})
	if err != nil {
		return err
	}
	defer st.Close()
	r.store = st
	if usesNet(r.cfg.Kinds) {
		if err := r.setupNet(dir); err != nil {
			if r.net != nil {
				r.net.Close()
			}
			return err
		}
		// The workers leave through their links, then the links close.
		defer func() {
			r.stopAll()
			r.net.Close()
			r.reportRefused("the workers' links", r.net)
		}()
	}
	where := "external cluster"
	switch {
	case r.bp != nil:
		where = fmt.Sprintf("kfake in process %d, synchronous writes to a data dir", r.bp.Pid())
	case r.kc != nil:
		where = fmt.Sprintf("%d Apache Kafka %s nodes, replication factor %d, min.insync.replicas=2; producers idempotent with acks=all", r.cfg.KafkaNodes, kafkacluster.Version, replicationFactor)
	}
	r.logf("broker %v (%s), topic %s with %d partitions, group %s, protocol %s; %s",
		r.brokers, where, r.topic, r.cfg.Partitions, group, r.cfg.Protocol, st.Desc())
	r.logf("seed %d, faults %v, %d workers with %d lane(s) per partition, %d commands/s, session timeout %s, for %s",
		r.cfg.Seed, r.cfg.Kinds, r.cfg.Workers, r.cfg.KeyConcurrency, r.cfg.Rate, r.cfg.SessionTimeout, r.cfg.Duration)
	for _, k := range Kinds() {
		if why, ok := r.res.Excluded[k]; ok {
			r.logf("fault kind %s not run here: it %s", k, why)
		}
	}

	for i := 1; i <= r.cfg.Workers; i++ {
		w, err := r.startWorker("w" + strconv.Itoa(i))
		if err != nil {
			return err
		}
		r.active = append(r.active, w)
	}
	if err := r.waitUntil(60*time.Second, "every partition claimed", func() bool {
		owned := map[int32]bool{}
		for _, w := range r.members() {
			for p := range w.Owned() {
				owned[p] = true
			}
		}
		return len(owned) == int(r.cfg.Partitions)
	}); err != nil {
		return err
	}

	rt, err := router.New(ctx, router.Config{Brokers: r.brokers, Topic: r.topic})
	if err != nil {
		return err
	}
	defer rt.Close()
	prod := cluster.NewProducer(rt, r.cfg.Seed, r.cfg.Accounts)
	r.prod = prod
	if slices.Contains(r.cfg.Kinds, Poison) {
		if r.poisonProd, err = cluster.NewPoisonProducer(r.brokers, r.topic, r.cfg.Partitions, r.cfg.Seed); err != nil {
			return err
		}
		defer r.poisonProd.Close()
	}
	// V is sampled all along, until the final check.
	stopSampling := make(chan struct{})
	var sampleWG sync.WaitGroup
	sampleWG.Go(func() { r.sampler.run(r, stopSampling) })
	stopSampler := sync.OnceFunc(func() { close(stopSampling); sampleWG.Wait() })
	defer stopSampler()

	stopProducing := make(chan struct{})
	var prodWG sync.WaitGroup
	var prodErr error
	prodWG.Go(func() { prodErr = r.produce(prod, stopProducing) })
	stopProducer := sync.OnceFunc(func() { close(stopProducing); prodWG.Wait() })
	defer stopProducer()

	// Churn runs on its own, all along: a member joins, stays 1–5 s,
	// leaves, and the next joins 1–5 s later, with its own seeded source.
	end := r.start.Add(r.startup + r.cfg.Duration) // the Kafka cluster's start does not count
	scheduled := slices.DeleteFunc(slices.Clone(r.cfg.Kinds), func(k Kind) bool { return k == Churn })
	var churnWG sync.WaitGroup
	var churnErr error
	var lastChurn time.Time
	stopChurn := make(chan struct{})
	if len(scheduled) < len(r.cfg.Kinds) {
		rng := rand.New(rand.NewPCG(r.cfg.Seed, r.cfg.Seed^0xc4c4))
		churnWG.Go(func() { lastChurn, churnErr = r.churnLoop(rng, stopChurn, end) })
	}
	stopChurning := sync.OnceFunc(func() { close(stopChurn); churnWG.Wait() })
	defer stopChurning()

	// The fault schedule: rounds of every other requested kind in a
	// seeded order, with seeded gaps, until the duration is up.
	var lastFault time.Time
	for round := 0; len(scheduled) > 0 && time.Now().Before(end); round++ {
		kinds := slices.Clone(scheduled)
		r.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		for _, k := range kinds {
			gap := 500*time.Millisecond + time.Duration(r.rng.Int64N(int64(1500*time.Millisecond)))
			if time.Now().Add(gap).After(end) {
				break
			}
			if err := r.sleep(gap); err != nil {
				return err
			}
			// A fault that found nothing to act on (no batch to freeze
			// before, no member with a partition…) is tried again, up to
			// three times; only faults that happened are counted.
			fired, err := r.injectTraced(k)
			for attempt := 1; err == nil && !fired && attempt < 3; attempt++ {
				if err = r.sleep(500 * time.Millisecond); err == nil {
					fired, err = r.injectTraced(k)
				}
			}
			if err != nil {
				return err
			}
			lastFault = time.Now()
		}
	}
	if err := r.sleep(time.Until(end)); err != nil {
		return err
	}
	stopChurning()
	if churnErr != nil {
		return churnErr
	}
	if lastChurn.After(lastFault) {
		lastFault = lastChurn
	}
	stopProducer()
	if prodErr != nil {
		r.logf("producer: %v", prodErr)
	}
	// Recovery is timed from the later of the last fault's end and the
	// last command produced.
	if prodEnd := time.Now(); lastFault.Before(prodEnd) {
		lastFault = prodEnd
	}
	r.res.Sent = prod.Sent()
	r.res.Produced = prod.AckedCount()
	txnCommands := 0
	if r.poisonProd != nil {
		// The good commands the poison producer wrote (in committed
		// transactions, and after them) must be applied too.
		txnCommands = len(r.poisonProd.Commands())
		r.res.Produced += txnCommands
	}
	r.logf("faults over; produced %d commands through the router (%d acknowledged), and %d good commands with the poison transactions; waiting for lag zero",
		r.res.Sent, r.res.Produced-txnCommands, txnCommands)

	converged := r.waitUntil(r.cfg.RecoverTimeout, "every acknowledged command applied and lag zero", func() bool {
		n, err := st.Count(ctx, `SELECT count(*) FROM ledger_postings`)
		return err == nil && n >= r.res.Produced && cluster.LagZero(ctx, r.brokers, r.topic, group)
	})
	if converged != nil {
		if ctx.Err() != nil {
			return converged
		}
		r.notConverged = true
		r.logf("V: not converged: %v", converged)
	} else {
		r.res.Recover = time.Since(lastFault).Round(time.Millisecond)
		r.logf("lag zero, every acknowledged command applied, %s after the last fault", r.res.Recover)
	}
	stopSampler()
	v := &r.sampler
	r.logf("V sampling: %d readings of the committed offsets and then the sink's NextOffsets, %d failed (last error: %v), %d skipped because the topic's ID changed during the reading",
		v.rounds, v.failed, v.lastErr, v.logChanged)
	return r.check(prod)
}

// check reads the sink's records, checks the invariants over them with
// the shared checker, and fills the result's figures.
func (r *run) check(prod *cluster.Producer) error {
	ctx := r.ctx
	applied, err := r.store.Count(ctx, `SELECT count(*) FROM ledger_postings`)
	if err != nil {
		return err
	}
	cc := cluster.CheckConfig{Brokers: r.brokers, Group: group, Topic: r.topic,
		Partitions: r.cfg.Partitions, Acked: prod.Acked(), NotConverged: r.notConverged, Samples: r.sampler.samples}
	poisoned := map[cluster.PoisonKind]int{}
	poisonTxn := 0
	if r.poisonProd != nil {
		cc.Poison, cc.Unconfirmed, cc.Aborted = r.poisonProd.Acked(), r.poisonProd.Unconfirmed(), r.poisonProd.Aborted()
		for _, p := range cc.Poison {
			poisoned[p.Kind]++
			if p.Transactional {
				poisonTxn++
			}
		}
		maps.Copy(cc.Acked, r.poisonProd.Commands())
	}
	scan, err := cluster.ScanLog(ctx, r.brokers, r.topic)
	if err != nil {
		return err
	}
	if n := len(scan.Copies); n > 0 {
		ex := make([]string, 0, 5)
		for _, pos := range slices.Sorted(maps.Keys(scan.Copies)) {
			if len(ex) < cap(ex) {
				ex = append(ex, scan.Copies[pos]+" again at "+pos)
			}
		}
		why := "resent commands, or a producer's retry across a broker restart that kfake wrote twice: it does not rebuild its idempotent-producer state from its log"
		if r.bp == nil {
			why = "resent commands, or a batch the broker wrote twice"
		}
		r.logf("the log holds %d records that repeat an earlier record's command ID (%s), each to be skipped as a duplicate: %s…",
			n, why, strings.Join(ex, ", "))
	}
	rep, err := r.store.Check(ctx, cc)
	if err != nil {
		return err
	}
	fences, err := r.store.Fences(ctx)
	if err != nil {
		return err
	}
	skipped := 0
	for _, f := range fences {
		if f.Scope.Group == group && f.Scope.Topic == r.topic {
			skipped += int(f.Duplicates)
		}
	}
	dead := map[string]int{}
	dls, err := r.store.DeadLetters(ctx, group, r.topic)
	if err != nil && !errors.Is(err, cluster.ErrNoDeadLetters) {
		return err
	}
	afterGap := 0
	for _, d := range dls {
		dead[d.Record.Reason]++
		if scan.AfterGap[cluster.PositionID(d.Scope.Partition, d.Record.Offset)] {
			afterGap++
		}
	}
	notes := rep.Notes(20)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Violations = rep.Violations
	r.res.Notes = notes
	r.res.Applied = applied
	r.res.Poisoned, r.res.DeadLetters = poisoned, dead
	r.res.PoisonUnconfirmed = len(cc.Unconfirmed)
	r.res.LogCopies = len(scan.Copies)
	r.res.DuplicatesSkipped = skipped
	r.res.Resent = prod.Resent()
	r.res.PoisonTxn, r.res.Aborted, r.res.DeadLettersAfterGap = poisonTxn, len(cc.Aborted), afterGap
	r.res.VSamples = rep.Samples
	r.res.VSkipped = rep.SamplesSkipped + r.sampler.logChanged
	r.res.VReadsFailed = r.sampler.failed
	// The stale writes rejected are counted from the same events the
	// report draws (Result.Trace).
	r.res.Trace.Workers, r.res.Trace.End = cluster.TraceOf(r.all), time.Now()
	r.res.Checked = true
	r.res.UnmappedDials = unmappedDials(r.all)
	for i, w := range r.all {
		if w.Exited() && !r.ended[w] {
			r.res.Crashes++
			r.logf("worker %s exited by itself: %s", w.Name(), w.LastErr())
		}
		r.res.StaleRejected += r.res.Trace.Workers[i].Count(consumer.KindFenced)
		r.res.DuplicateEvents += w.Count(consumer.KindDuplicate)
		for _, e := range w.Errors() {
			r.logf("worker %s logged an error: %s", w.Name(), e)
			r.res.WorkerErrors++
		}
	}
	for _, n := range notes {
		r.logf("%s", n)
	}
	return nil
}

// produce sends Rate commands a second in ten ticks until stop is closed.
func (r *run) produce(p *cluster.Producer, stop <-chan struct{}) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	per := max(1, r.cfg.Rate/10)
	var first error
	for {
		select {
		case <-stop:
			return first
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-tick.C:
		}
		r.quiet.Lock()
		err := p.Send(r.ctx, per)
		r.quiet.Unlock()
		if err != nil && first == nil {
			first = err
		}
	}
}

// workerArgs is the command line of the worker named name.
func (r *run) workerArgs(name string) []string {
	spec, netFlags := r.netArgs(name, r.store.WorkerSpec(name))
	return cluster.WorkerOptions{Brokers: r.brokers, Topic: r.topic, Group: group, SinkSpec: spec,
		Name: name, SessionTimeout: r.cfg.SessionTimeout, Protocol: r.cfg.Protocol, RebalanceTimeout: r.cfg.RebalanceTimeout,
		KeyConcurrency: r.cfg.KeyConcurrency,
		Hooks: append([]string{"--chaos", "--chaos-stall", r.stallFor().String(),
			// Poison records cost only themselves: a type without a
			// handler is dead-lettered too, and a failing handler gets
			// 3 attempts (about 150 ms of retries) instead of 8.
			"--on-no-handler", "dead-letter", "--max-attempts", strconv.Itoa(maxAttempts)}, netFlags...)}.Args()
}

func (r *run) startWorker(name string) (*cluster.Worker, error) {
	args := r.workerArgs(name)
	var logTo io.Writer
	if r.cfg.LogDir != "" {
		f, err := os.CreateTemp(r.cfg.LogDir, name+"-*.log")
		if err != nil {
			return nil, fmt.Errorf("chaos: worker log: %w", err)
		}
		r.mu.Lock()
		r.logs = append(r.logs, f)
		r.mu.Unlock()
		logTo = f
	}
	w, err := cluster.StartWorker(name, r.cfg.Worker, logTo, args...)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	r.mu.Lock()
	r.all = append(r.all, w)
	r.mu.Unlock()
	return w, nil
}

// stallFor is how long pauses, blackholes and stalls last: past the
// session timeout.
func (r *run) stallFor() time.Duration { return r.cfg.SessionTimeout * 3 / 2 }

// members returns the current members (churn members included).
func (r *run) members() []*cluster.Worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.active)
}

func (r *run) sleep(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
}

// waitUntil is cluster.WaitUntil on the run's context.
func (r *run) waitUntil(timeout time.Duration, what string, cond func() bool) error {
	if err := cluster.WaitUntil(r.ctx, timeout, what, cond); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

func (r *run) stopAll() {
	r.mu.Lock()
	all := slices.Clone(r.all)
	r.mu.Unlock()
	cluster.StopAll(all, 15*time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.logs {
		_ = f.Close()
	}
}

// pick returns a random current member holding at least one partition
// (and, if needMember, whose member ID is known), or nil.
func (r *run) pick(needMember bool) *cluster.Worker {
	var cands []*cluster.Worker
	for _, w := range r.members() {
		if len(w.Owned()) > 0 && !w.Exited() && (!needMember || w.Member() != "") {
			cands = append(cands, w)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[r.rng.IntN(len(cands))]
}

// injectTraced runs inject(k) and, if the fault happened, counts it and
// records its span (with the victim supersede named) for the report.
// Only the scheduler calls it.
func (r *run) injectTraced(k Kind) (bool, error) {
	r.mu.Lock()
	r.victim, r.detail = "", ""
	r.mu.Unlock()
	start := time.Now()
	fired, err := r.inject(k)
	if fired {
		r.mu.Lock()
		victim, detail := r.victim, r.detail
		r.mu.Unlock()
		r.counted(cluster.FaultSpan{Kind: string(k), Victim: victim, Start: start, End: time.Now(), Detail: detail})
	}
	return fired, err
}

// setDetail says what the fault being injected did, for its span in the
// report.
func (r *run) setDetail(d string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.detail = d
}

// counted counts one fault that happened and records its span.
func (r *run) counted(f cluster.FaultSpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Faults[Kind(f.Kind)]++
	r.res.Trace.Faults = append(r.res.Trace.Faults, f)
}

// inject runs one fault of kind k to its end and reports whether it
// really happened.
func (r *run) inject(k Kind) (bool, error) {
	switch k {
	case Pause:
		return r.pause()
	case Kill:
		return r.kill()
	case Heartbeat:
		return r.heartbeat()
	case BrokerConn:
		return r.brokerConn()
	case SinkConn:
		return r.sinkConn()
	case Coordinator:
		return r.coordinator()
	case Poison:
		return r.poison()
	case BrokerRestart:
		return r.brokerRestart()
	case Resend:
		return r.resend()
	case LeaderKill:
		return r.leaderKill()
	case ControllerKill:
		return r.controllerKill()
	case BrokerPause:
		return r.brokerPause()
	case CoordinatorRestart:
		return r.coordinatorRestart()
	case PartitionBrokerNode:
		return r.partitionBrokerNode()
	case PartitionBroker:
		return r.partitionBroker()
	case PartitionSink:
		return r.partitionSink()
	case OneWay:
		return r.oneWay()
	case SlowLink:
		return r.slowLink()
	}
	return false, fmt.Errorf("%w: unknown fault kind %q", ErrConfig, k)
}

func (r *run) pause() (bool, error) {
	w := r.pick(false)
	if w == nil {
		r.logf("pause: no worker holds a partition; skipped")
		return false, nil
	}
	r.supersede(w.Name())
	mode := r.rng.IntN(3)
	if mode == 2 {
		d := r.stallFor() + time.Duration(r.rng.Int64N(int64(time.Second)))
		if err := w.Signal(syscall.SIGSTOP); err != nil {
			return false, nil
		}
		start, held := time.Now(), w.Owned()
		stopped := r.waitUntil(2*time.Second, w.Name()+" stopped", w.Stopped) == nil
		if stopped {
			r.watchTakeover(w.Name(), start, held)
		}
		r.logf("PAUSE %s: SIGSTOP at a random moment for %s (holds %s)", w.Name(), d.Round(time.Millisecond), cluster.Describe(w.Owned()))
		err := r.sleep(d)
		_ = w.Signal(syscall.SIGCONT)
		r.logf("RESUME %s", w.Name())
		return stopped, err
	}
	before := len(w.Freezes())
	if err := w.Signal(syscall.SIGUSR1); err != nil {
		return false, nil
	}
	if r.waitUntil(10*time.Second, w.Name()+" to freeze before a batch", func() bool {
		return len(w.Freezes()) > before && w.Stopped() || w.Exited()
	}) != nil || w.Exited() {
		// No batch came (or it died): resume in case it froze late.
		_ = w.Signal(syscall.SIGCONT)
		r.logf("pause: %s did not freeze before a batch; skipped", w.Name())
		return false, nil
	}
	fz := w.Freezes()[len(w.Freezes())-1]
	r.watchTakeover(w.Name(), time.Now(), w.Owned())
	r.logf("PAUSE %s: SIGSTOP between transactions, before its batch on partition %d at epoch %d", w.Name(), fz.Partition, fz.Epoch)
	var takenBy *cluster.Worker
	var claim cluster.Claim
	err := r.waitUntil(6*r.cfg.SessionTimeout+10*time.Second, "partition "+strconv.Itoa(int(fz.Partition))+" to be taken over", func() bool {
		takenBy, claim = cluster.OwnerOf(r.members(), fz.Partition)
		return takenBy != nil && takenBy != w && claim.Epoch > fz.Epoch
	})
	if err == nil {
		what := "before the new owner's first write"
		if mode == 1 {
			what = "after the new owner's first write"
			_ = r.waitUntil(10*time.Second, "the new owner's first write", func() bool {
				n, err := r.store.Count(r.ctx, `SELECT count(*) FROM ledger_postings WHERE part = $1 AND epoch = $2 AND member = $3`,
					fz.Partition, claim.Epoch, claim.Member)
				return err == nil && n > 0
			})
		}
		r.logf("  partition %d taken over by %s at epoch %d from offset %d; RESUME %s %s", fz.Partition, takenBy.Name(), claim.Epoch, claim.Next, w.Name(), what)
	} else {
		r.logf("  partition %d not taken over (%v); RESUME %s", fz.Partition, err, w.Name())
	}
	_ = w.Signal(syscall.SIGCONT)
	return true, r.ctx.Err()
}

func (r *run) kill() (bool, error) {
	members := r.members()
	slot := r.rng.IntN(min(len(members), r.cfg.Workers))
	w := members[slot]
	r.supersede(w.Name())
	r.markEnded(w)
	held := w.Owned()
	w.Kill()
	r.watchTakeover(w.Name(), time.Now(), held)
	r.logf("KILL %s (SIGKILL; it held %s); restarting it", w.Name(), cluster.Describe(w.Owned()))
	nw, err := r.startWorker(w.Name())
	if err != nil {
		return true, err
	}
	r.mu.Lock()
	r.active[slot] = nw
	r.mu.Unlock()
	return true, nil
}

func (r *run) heartbeat() (bool, error) {
	w := r.pick(true)
	if w == nil {
		r.logf("heartbeat: no member with a partition; skipped")
		return false, nil
	}
	r.supersede(w.Name())
	member := w.Member()
	d := r.stallFor() + time.Duration(r.rng.Int64N(int64(time.Second)))
	end, err := r.bp.Blackhole(r.ctx, member)
	if err != nil {
		return false, fmt.Errorf("chaos: heartbeat fault: %w", err)
	}
	r.watchTakeover(w.Name(), time.Now(), w.Owned())
	r.logf("HEARTBEAT blackhole of %s (member %s, holds %s) for %s", w.Name(), member, cluster.Describe(w.Owned()), d.Round(time.Millisecond))
	err = r.sleep(d)
	n, endErr := end()
	if endErr != nil {
		return false, fmt.Errorf("chaos: ending a heartbeat fault: %w", endErr)
	}
	r.logf("  %d heartbeats of %s held back; released", n, w.Name())
	return n > 0, err
}

func (r *run) brokerConn() (bool, error) {
	w := r.pick(false)
	if w == nil {
		return false, nil
	}
	r.supersede(w.Name())
	msg, sig, what := faults.KindBrokerCut, syscall.SIGUSR2, "cut"
	if r.rng.IntN(2) == 0 {
		msg, sig, what = faults.KindBrokerStall, syscall.SIGHUP, "stalled for "+r.stallFor().String()
	}
	before, start, held := w.Count(msg), time.Now(), w.Owned()
	if err := w.Signal(sig); err != nil {
		return false, nil
	}
	fired := r.waitUntil(5*time.Second, w.Name()+" to act", func() bool { return w.Count(msg) > before }) == nil
	if fired && sig == syscall.SIGHUP {
		r.watchTakeover(w.Name(), start, held)
	}
	r.logf("BROKER-CONN %s: connections %s (done: %v)", w.Name(), what, fired)
	if sig == syscall.SIGHUP {
		return fired, r.sleep(r.stallFor())
	}
	return fired, nil
}

func (r *run) sinkConn() (bool, error) {
	w := r.pick(false)
	if w == nil {
		return false, nil
	}
	r.supersede(w.Name())
	if r.store.Postgres() {
		var n int
		var inTx bool
		_ = r.waitUntil(3*time.Second, "a sink transaction of "+w.Name(), func() bool {
			var err error
			n, inTx, err = r.store.TerminateBackends(r.ctx, w.Name())
			return err == nil && inTx
		})
		r.logf("SINK-CONN %s: pg_terminate_backend on %d connections (in a transaction: %v)", w.Name(), n, inTx)
		return n > 0, r.ctx.Err()
	}
	if r.store.Redis() {
		return r.killRedisClients(w)
	}
	before := w.Count(faults.KindSinkCut)
	if err := w.Signal(syscall.SIGWINCH); err != nil {
		return false, nil
	}
	fired := r.waitUntil(10*time.Second, w.Name()+" to interrupt a transaction", func() bool { return w.Count(faults.KindSinkCut) > before }) == nil
	r.logf("SINK-CONN %s: transaction interrupted mid-way (SQLite: context cancelled after its first effect): %v", w.Name(), fired)
	return fired, r.ctx.Err()
}

func (r *run) coordinator() (bool, error) {
	w := r.pick(true)
	if w == nil {
		return false, nil
	}
	r.supersede(w.Name())
	mode := brokerproc.CoordMode(r.rng.IntN(3))
	d := time.Second + time.Duration(r.rng.Int64N(int64(1500*time.Millisecond)))
	end, err := r.bp.Coordinator(r.ctx, w.Member(), mode, d)
	if err != nil {
		return false, fmt.Errorf("chaos: coordinator fault: %w", err)
	}
	err = r.sleep(d)
	n, endErr := end()
	if endErr != nil {
		return false, fmt.Errorf("chaos: ending a coordinator fault: %w", endErr)
	}
	r.logf("COORDINATOR %s for %s: %d heartbeats and offset commits of %s answered so", mode, d.Round(time.Millisecond), n, w.Name())
	return n > 0, err
}

// supersede ends the takeover watch of victim's previous fault, if one is
// still open: a newer fault on the same worker would take the credit.
// It also names the victim of the fault being injected (injectTraced).
func (r *run) supersede(victim string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.victim = victim
	if ch, ok := r.watching[victim]; ok {
		close(ch)
		delete(r.watching, victim)
	}
}

// watchTakeover records in the background how long after start every
// partition in held (a victim's claims when a pause, kill, heartbeat or
// broker-connection stall began) was claimed again at a newer epoch, by
// any worker, the restarted or resumed victim included. A watch that is
// superseded by the victim's next fault, or still open when the run stops
// watching, is counted as watched, not taken over: the victim kept its
// partitions (a heartbeat fault during another member's rebalance, for
// instance: the rejoin counts as liveness).
func (r *run) watchTakeover(victim string, start time.Time, held map[int32]cluster.Claim) {
	if len(held) == 0 {
		return
	}
	superseded := make(chan struct{})
	r.mu.Lock()
	r.res.Watched++
	if r.watching == nil {
		r.watching = map[string]chan struct{}{}
	}
	r.watching[victim] = superseded
	r.mu.Unlock()
	r.watchWG.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			r.mu.Lock()
			all := slices.Clone(r.all)
			r.mu.Unlock()
			done := true
			for p, c := range held {
				if _, now := cluster.OwnerOf(all, p); now.Epoch <= c.Epoch {
					done = false
					break
				}
			}
			if done {
				d := time.Since(start)
				r.mu.Lock()
				r.res.Takeovers = append(r.res.Takeovers, d)
				if r.watching[victim] == superseded {
					delete(r.watching, victim)
				}
				r.mu.Unlock()
				r.logf("  TAKEOVER: %s's partitions %s all claimed again %s after the fault began", victim, cluster.Describe(held), d.Round(time.Millisecond))
				return
			}
			select {
			case <-t.C:
			case <-superseded:
				r.logf("  no takeover of %s's partitions %s before its next fault", victim, cluster.Describe(held))
				return
			case <-r.stopWatch:
				return
			}
		}
	})
}

// churnLoop runs churn until stop is closed or end is near, counting each
// join-and-leave that happened as one churn fault. It returns when the
// last member it started has left, and the time it left.
func (r *run) churnLoop(rng *rand.Rand, stop <-chan struct{}, end time.Time) (time.Time, error) {
	var last time.Time
	for {
		gap := time.Second + time.Duration(rng.Int64N(int64(4*time.Second)))
		if time.Now().Add(gap).After(end) {
			return last, nil
		}
		t := time.NewTimer(gap)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return last, nil
		case <-r.ctx.Done():
			t.Stop()
			return last, r.ctx.Err()
		}
		start := time.Now()
		fired, name, err := r.churn(rng, stop)
		if err != nil {
			return last, err
		}
		last = time.Now()
		if fired {
			r.counted(cluster.FaultSpan{Kind: string(Churn), Victim: name, Start: start, End: last,
				Detail: "an extra member joined and left (SIGTERM)"})
		}
	}
}

// churn starts one extra member, lets it stay 1–5 s (less if stop is
// closed), and stops it with SIGTERM; it reports whether it left cleanly,
// and the member's name.
func (r *run) churn(rng *rand.Rand, stop <-chan struct{}) (bool, string, error) {
	r.mu.Lock()
	r.churned++
	name := "c" + strconv.Itoa(r.churned)
	r.mu.Unlock()
	w, err := r.startWorker(name)
	if err != nil {
		return false, name, err
	}
	r.mu.Lock()
	r.active = append(r.active, w)
	r.mu.Unlock()
	stay := time.Second + time.Duration(rng.Int64N(int64(4*time.Second)))
	r.logf("CHURN %s joins for %s", name, stay.Round(time.Millisecond))
	t := time.NewTimer(stay)
	select {
	case <-t.C:
	case <-stop:
		t.Stop()
	case <-r.ctx.Done():
		t.Stop()
	}
	held := cluster.Describe(w.Owned())
	r.markEnded(w)
	clean := w.Stop(15 * time.Second)
	r.mu.Lock()
	r.active = slices.DeleteFunc(r.active, func(x *cluster.Worker) bool { return x == w })
	r.mu.Unlock()
	r.logf("  %s left (SIGTERM, clean exit %v), holding %s", name, clean, held)
	return clean, name, nil
}
