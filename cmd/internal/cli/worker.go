package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/consumerprom"
	"github.com/workrouter/workrouter/consumer/eventlog"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/examples/invoices"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
	"github.com/workrouter/workrouter/sink/postgres"
	"github.com/workrouter/workrouter/sink/postgres/postgresprom"
	"github.com/workrouter/workrouter/sink/redis"
	"github.com/workrouter/workrouter/sink/sinkmetrics"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// WorkerFlags holds the values of `workrouter worker`'s flags
// (AddWorkerFlags defines them).
type WorkerFlags struct {
	example           string
	brokers           []string
	topic             string
	group             string
	sink              string
	protocol          string
	clientID          string
	maxBatch          int
	keyConcurrency    int
	sessionTimeout    time.Duration
	heartbeatInterval time.Duration
	revokeTimeout     time.Duration
	rebalanceTimeout  time.Duration
	metricsAddr       string
	events            string
	// dedupeWindow is the sink's Config.DedupeWindow (0: its default).
	dedupeWindow int64
	// noTakeover: consumer.Config.NoTakeover.
	noTakeover bool

	partitioner string
	misroute    string
	conn        ConnFlags
	// poison is the policy for records that cannot be applied (the
	// --on-* flags, --max-attempts, --max-retry-time).
	poison consumer.PoisonPolicy
	// dlqTopic is the Kafka topic dead letters are mirrored to ("": none).
	dlqTopic string
	// dlqCompression is the codec of the --dlq-topic mirror's batches.
	dlqCompression string
	// readyMaxStall makes /readyz fail while a partition has been stalled
	// or blocked longer than it (0: stalls do not affect readiness).
	readyMaxStall time.Duration
}

// poisonActionValue is a --on-* flag: dead-letter or stall.
type poisonActionValue struct{ a *consumer.PoisonAction }

func (v poisonActionValue) String() string {
	if v.a == nil {
		return ""
	}
	return v.a.String()
}

func (v poisonActionValue) Set(s string) error {
	switch s {
	case "dead-letter":
		*v.a = consumer.PoisonDeadLetter
	case "stall":
		*v.a = consumer.PoisonStall
	default:
		return fmt.Errorf("%q: want dead-letter or stall", s)
	}
	return nil
}

func (v poisonActionValue) Type() string { return "dead-letter|stall" }

// errUnknownExample is matched by the error for an --example that does not exist.
var errUnknownExample = errors.New("unknown example")

func newWorkerCmd() *cobra.Command {
	var f WorkerFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a consumer group member for a built-in example (ledger, invoices)",
		Long: `worker joins a consumer group and applies the commands of a built-in example
to a fenced sink until interrupted (Ctrl-C, SIGINT or SIGTERM), then leaves the
group cleanly. Each owned partition is claimed in the sink before any record is
processed, and every batch is applied in one fenced transaction.

With --events, every event of the worker (claims, applied batches, fences,
stalls, commits…) is also written as one JSON object per line to that file —
for tooling that follows a worker without parsing its log.

Every record's key is checked against the producers' partitioner
(--partitioner, murmur2 by default): a record on another partition than its
key maps to is counted (workrouter_consumer_misrouted_total), logged at WARN
with the key and both partitions, and applied (--misroute apply) or refused
as a poison record (--misroute refuse): handled as --on-undecodable says, so
by default dead-lettered at once with reason misrouted (see workrouter dlq
list --reason misrouted); with --on-undecodable stall its partition stalls.

Poison records — records that are not workrouter commands (no key, no or two
type headers), commands of a type without a handler, and commands whose
handler keeps failing while the sink is healthy — cost only themselves: the
records before them are applied, and the sink stores the poison record as a
dead letter in the same fenced transaction that moves the checkpoint past
it (see workrouter dlq). What happens to each kind is set by --on-undecodable,
--on-no-handler and --on-handler-error: dead-letter, or stall (retry with
backoff until it applies; the partition waits). A handler error is retried
--max-attempts times or for --max-retry-time, whichever ends first, before
it is dead-lettered; an error the handler marks permanent is dead-lettered at
once. Failures of the database itself (down, busy, a lost connection) never
count: they are retried without limit and never dead-letter anything.
--dlq-topic also publishes every dead letter to a Kafka topic (by
convention <topic>.dlq; it must exist), with headers naming where it came
from and why. --ready-max-stall makes /readyz fail while a partition has
made no progress for longer than it.

Every command's ID (the workrouter-id header) is checked inside the fenced
transaction: a command whose ID the sink applied in the partition within the
last --dedupe-window offsets (100000 by default) is skipped as a duplicate,
counted (workrouter_consumer_duplicates_skipped_total, the fence row's count
that fences list and status --sink show) and logged. A record without an ID
is applied once per offset, and counted. A command redriven from a dead
letter for another consumer group (workrouter dlq redrive) is skipped
without calling a handler, whatever the window, and its ID is not recorded.

Real applications build their own binary from the library (see the README);
this command runs the examples in ./examples.
` + ConnHelp,
		Example: `  workrouter worker --example ledger --sink sqlite:ledger.db
  workrouter worker --example invoices --sink postgres://postgres@127.0.0.1:5432/test --group billing
  workrouter worker --example ledger --sink kafka://   # decisions to ledger.events, on the cluster of --brokers
  workrouter worker --example ledger --events /var/log/workrouter/events.jsonl
  workrouter worker --example ledger --on-no-handler dead-letter --dlq-topic ledger.dlq \
      --metrics-addr :9464 --ready-max-stall 5m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return RunWorker(cmd, f, nil) },
	}
	AddWorkerFlags(cmd.Flags(), &f)
	return cmd
}

// AddWorkerFlags defines the worker's flags on fl.
func AddWorkerFlags(fl *pflag.FlagSet, f *WorkerFlags) {
	fl.StringVar(&f.example, "example", "", "built-in example to run: ledger or invoices (required)")
	fl.StringSliceVar(&f.brokers, "brokers", []string{"127.0.0.1:9092"}, "seed brokers, comma-separated")
	fl.StringVar(&f.topic, "topic", "", "topic of commands (default: the example's, ledger or invoices)")
	fl.StringVar(&f.group, "group", "", "consumer group (default: <example>-workers)")
	notEmpty(fl, "topic", "group")
	fl.StringVar(&f.sink, "sink", "sqlite:workrouter.db", "fenced sink: sqlite:PATH, postgres://…, redis://… or kafka://[HOST:PORT,…][?events-topic=…&checkpoint-topic=…&dead-letter-topic=…] (Redis and Kafka: the ledger only; Kafka without hosts: the cluster of --brokers)")
	fl.StringVar(&f.protocol, "protocol", "cooperative", "group protocol: cooperative or kip848")
	fl.StringVar(&f.clientID, "client-id", "", "this member's client id (default: workrouter-<host>-<pid>-<8 random hex digits>, which differs per process even in containers that share a host name and PID)")
	fl.IntVar(&f.maxBatch, "max-batch", 0, "most records applied in one sink transaction (0: the sink's preference, 2048 for kafka://, 256 for the others)")
	fl.IntVar(&f.keyConcurrency, "key-concurrency", 1, "lanes per partition: records of different keys are applied concurrently, each key in offset order, through the sink's checkpoint with gaps (1: one batch at a time, the partition in offset order; see docs/operating.md#key-concurrency)")
	fl.DurationVar(&f.sessionTimeout, "session-timeout", 10*time.Second, "group session timeout")
	fl.DurationVar(&f.heartbeatInterval, "heartbeat-interval", time.Second, "group heartbeat interval")
	fl.DurationVar(&f.revokeTimeout, "revoke-timeout", 10*time.Second, "how long a revoked partition's in-flight batch may take")
	fl.DurationVar(&f.rebalanceTimeout, "rebalance-timeout", 60*time.Second, "group rebalance timeout: how long the group waits for members to rejoin")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this host:port (no host means loopback; empty disables)")
	fl.StringVar(&f.partitioner, "partitioner", "murmur2", "the producers' partitioner, checked against every record: murmur2 (Kafka's default) or crc32 (librdkafka's default)")
	fl.StringVar(&f.misroute, "misroute", "apply", "what to do with a record whose key maps to another partition: apply (and report it) or refuse (dead-letter it at once, reason misrouted, as --on-undecodable says; with --on-undecodable stall the partition stalls)")
	AddConnFlags(fl, &f.conn)
	fl.StringVar(&f.events, "events", "", "also write every worker event as a JSON line to this file (appended; /dev/fd/N for an inherited descriptor)")
	f.poison = consumer.PoisonPolicy{Undecodable: consumer.PoisonDeadLetter, NoHandler: consumer.PoisonStall,
		HandlerError: consumer.PoisonDeadLetter, MaxAttempts: 8, MaxRetryTime: time.Minute}
	fl.Var(poisonActionValue{&f.poison.Undecodable}, "on-undecodable", "records that are not workrouter commands (no key, no or two type headers): dead-letter or stall")
	fl.Var(poisonActionValue{&f.poison.NoHandler}, "on-no-handler", "commands of a type the example has no handler for: stall (wait for a handler) or dead-letter")
	fl.Var(poisonActionValue{&f.poison.HandlerError}, "on-handler-error", "commands whose handler fails (or panics) past --max-attempts/--max-retry-time, or at once when it marks the error permanent: dead-letter or stall")
	fl.IntVar(&f.poison.MaxAttempts, "max-attempts", f.poison.MaxAttempts, "failed attempts of a command's handler before it is dead-lettered (failures of the sink itself never count)")
	fl.DurationVar(&f.poison.MaxRetryTime, "max-retry-time", f.poison.MaxRetryTime, "how long a failing command is retried, from its first failure, before it is dead-lettered (whichever of this and --max-attempts ends first)")
	fl.StringVar(&f.dlqTopic, "dlq-topic", "", "also publish every dead letter to this Kafka topic, which must exist (by convention <topic>.dlq); empty: no mirror")
	fl.StringVar(&f.dlqCompression, "dlq-compression", "none", "codec of the --dlq-topic mirror's record batches: none (every client reads it), gzip, snappy, lz4 or zstd (see docs/interop.md)")
	fl.DurationVar(&f.readyMaxStall, "ready-max-stall", 0, "make /readyz answer 503 while a partition has been stalled or blocked longer than this (needs --metrics-addr; 0: stalls do not affect readiness)")
	fl.BoolVar(&f.noTakeover, "no-takeover", false, "keep a partition whose fence holder belongs to an earlier incarnation of the group (deleted and recreated, expired, lost by the broker) blocked until an operator resets its fence, instead of taking it over with a proof of membership (see docs/operating.md#runbook-epochs-went-backwards)")
	fl.Int64Var(&f.dedupeWindow, "dedupe-window", 0, "how many offsets of a partition the sink remembers applied command IDs for: a command whose ID was applied within it is skipped as a duplicate (0: the sink's default, 100000)")
}

// checkPoisonFlags validates the poison policy, --dlq-topic,
// --ready-max-stall, --dedupe-window and --key-concurrency.
func checkPoisonFlags(f WorkerFlags) error {
	switch {
	case f.keyConcurrency < 1:
		return fmt.Errorf("--key-concurrency must be at least 1, got %d", f.keyConcurrency)
	case f.keyConcurrency > consumer.MaxKeyConcurrency:
		return fmt.Errorf("--key-concurrency must be at most %d, got %d: each lane costs a goroutine, a queue and sink transactions of its own (see docs/operating.md#key-concurrency)", consumer.MaxKeyConcurrency, f.keyConcurrency)
	case f.dedupeWindow < 0:
		return fmt.Errorf("--dedupe-window must not be negative, got %d", f.dedupeWindow)
	case f.poison.MaxAttempts < 1:
		return fmt.Errorf("--max-attempts must be at least 1, got %d", f.poison.MaxAttempts)
	case f.poison.MaxRetryTime <= 0:
		return fmt.Errorf("--max-retry-time must be positive, got %s", f.poison.MaxRetryTime)
	case f.readyMaxStall < 0:
		return fmt.Errorf("--ready-max-stall must not be negative, got %s", f.readyMaxStall)
	case f.readyMaxStall > 0 && f.metricsAddr == "":
		return errors.New("--ready-max-stall changes /readyz, which only --metrics-addr serves: give --metrics-addr too")
	case !envelope.Compression(f.dlqCompression).Valid():
		return fmt.Errorf("--dlq-compression %q: want none, gzip, snappy, lz4 or zstd", f.dlqCompression)
	case f.dlqTopic != "" && f.dlqTopic == f.topic:
		// consumer.New refuses it too (ErrDeadLetterLoop); refused here
		// with the other flags, before the sink is opened.
		return fmt.Errorf("--dlq-topic %q is the topic of commands: dead letters would be consumed again as commands", f.dlqTopic)
	}
	return nil
}

// maxWireTimeout is the longest group timeout the Kafka protocol carries
// (an int32 of milliseconds).
const maxWireTimeout = time.Duration(math.MaxInt32) * time.Millisecond

// checkGroupFlags validates the flags the group client takes
// (--session-timeout, --heartbeat-interval, --rebalance-timeout,
// --revoke-timeout, --max-batch, --client-id, --metrics-addr) before
// anything is opened: a refused flag leaves no sink file behind.
func checkGroupFlags(f WorkerFlags) error {
	inRange := func(flag string, d time.Duration) error {
		if d < 100*time.Millisecond || d > maxWireTimeout {
			return fmt.Errorf("--%s must be between 100ms and %s, got %s", flag, maxWireTimeout, d)
		}
		return nil
	}
	if err := inRange("session-timeout", f.sessionTimeout); err != nil {
		return err
	}
	if err := inRange("rebalance-timeout", f.rebalanceTimeout); err != nil {
		return err
	}
	switch {
	case f.heartbeatInterval <= 0:
		return fmt.Errorf("--heartbeat-interval must be positive, got %s", f.heartbeatInterval)
	case f.heartbeatInterval >= f.sessionTimeout:
		return fmt.Errorf("--heartbeat-interval %s must be shorter than --session-timeout %s, or the member is expired between two heartbeats", f.heartbeatInterval, f.sessionTimeout)
	case f.revokeTimeout < 0:
		return fmt.Errorf("--revoke-timeout must not be negative, got %s", f.revokeTimeout)
	case f.maxBatch < 0:
		return fmt.Errorf("--max-batch must not be negative (0: the sink's preference), got %d", f.maxBatch)
	case len(f.clientID) > 256:
		return fmt.Errorf("--client-id is %d bytes, at most 256", len(f.clientID))
	}
	if f.metricsAddr != "" {
		if _, err := loopbackDefault(f.metricsAddr); err != nil {
			return err
		}
	}
	return nil
}

// lanesText says the key concurrency for the banner.
func lanesText(n int) string {
	if n == 1 {
		return "key concurrency 1 (one batch at a time per partition)"
	}
	return fmt.Sprintf("key concurrency %d (lanes per partition)", n)
}

// defaultClientID is workrouter-<host>-<pid>-<8 hex digits>: containers
// on one host network often share a host name and PID 1, so the random
// part tells their processes apart in the group's member list.
func defaultClientID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("workrouter-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// RunWorker runs the worker f describes; h adds the harness's fault hooks
// (nil for the product command).
func RunWorker(cmd *cobra.Command, f WorkerFlags, h *WorkerHooks) error {
	if h != nil && f.events == "" {
		return fmt.Errorf("the harness worker needs --events: the harness follows its events, not its log")
	}
	if f.example != "ledger" && f.example != "invoices" {
		return fmt.Errorf("%w %q: want ledger or invoices", errUnknownExample, f.example)
	}
	if f.topic == "" {
		f.topic = map[string]string{"ledger": ledger.Topic, "invoices": invoices.Topic}[f.example]
	}
	if f.group == "" {
		f.group = f.example + "-workers"
	}
	if f.clientID == "" {
		f.clientID = defaultClientID()
	}
	if err := checkPoisonFlags(f); err != nil {
		return err
	}
	if err := checkGroupFlags(f); err != nil {
		return err
	}
	var protocol consumer.Protocol
	switch f.protocol {
	case "cooperative":
		protocol = consumer.Cooperative
	case "kip848":
		protocol = consumer.KIP848
	default:
		return fmt.Errorf("--protocol %q: want cooperative or kip848", f.protocol)
	}
	spec, err := parseSinkSpec(f.sink)
	if err != nil {
		return err
	}
	if _, err := envelope.ParsePartitioner(f.partitioner); err != nil {
		return fmt.Errorf("--partitioner: %w", err)
	}
	if f.misroute != "apply" && f.misroute != "refuse" {
		return fmt.Errorf("--misroute %q: want apply or refuse", f.misroute)
	}
	c, err := ResolveConn(cmd, f.conn, f.brokers)
	if err != nil {
		return err
	}
	logger, err := NewLogger(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	// The registry of --metrics-addr: the consumer's, the sink wrapper's
	// and the sink's own series (PostgreSQL's gap compactions, Redis's held
	// watches).
	reg := NewRegistry()
	switch spec.kind {
	case "sqlite":
		s, err := sqlite.Open(ctx, sqlite.Config{Path: spec.path, Logger: logger, BusyTimeout: h.sqliteBusy(), DedupeWindow: f.dedupeWindow})
		if err != nil {
			return err
		}
		defer s.Close()
		handlers := ledger.SQLiteHandlers()
		setup := ledger.SetupSQLite
		if f.example == "invoices" {
			handlers, setup = invoices.SQLiteHandlers(), invoices.SetupSQLite
		}
		if err := setup(ctx, s.DB()); err != nil {
			return fmt.Errorf("setting up the %s tables: %w", f.example, err)
		}
		return serveWorker[*sqlite.Tx](cmd, f, c, spec, protocol, "sqlite", s, handlers, reg, logger, h.sqliteHook(), h.lagEvery(), nil)
	case "postgres":
		s, err := postgres.Open(ctx, postgres.Config{DSN: spec.dsn, Schema: spec.schema(), Logger: logger, DedupeWindow: f.dedupeWindow})
		if err != nil {
			return err
		}
		defer s.Close()
		unregister, err := postgresprom.Register(reg, s)
		if err != nil {
			return err
		}
		defer unregister()
		handlers := ledger.PostgresHandlers()
		setup := ledger.SetupPostgres
		if f.example == "invoices" {
			handlers, setup = invoices.PostgresHandlers(), invoices.SetupPostgres
		}
		if err := setup(ctx, s.Pool()); err != nil {
			return fmt.Errorf("setting up the %s tables: %w", f.example, err)
		}
		backendPID := func(ctx context.Context, tx pgx.Tx) (int, error) {
			var pid int
			err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
			return pid, err
		}
		return serveWorker[pgx.Tx](cmd, f, c, spec, protocol, "postgres", s, handlers, reg, logger, h.postgresHook(), h.lagEvery(), backendPID)
	case "redis":
		return serveRedisWorker(cmd, f, c, spec, protocol, reg, logger, h)
	case "kafka":
		return serveKafkaWorker(cmd, f, c, spec, protocol, reg, logger, h)
	}
	return fmt.Errorf("unsupported sink %q", f.sink)
}

// serveWorker runs a Worker on s, connected as c, until the command's
// context ends or the Worker stops by itself; reg is the registry that
// --metrics-addr serves (the sink's own metrics may be on it already), on
// which it registers the consumer's and the sink wrapper's. hook, if set,
// adds the harness's fault hooks; lag is the worker's LagInterval (0: the
// consumer's). backendPID, if set, reads the database session's backend ID
// inside a transaction (for the harness's hooks).
func serveWorker[Tx any](cmd *cobra.Command, f WorkerFlags, c Conn, spec sinkSpec, protocol consumer.Protocol, backend string, s sink.Sink[Tx],
	handlers map[string]consumer.Handler[Tx], reg *prometheus.Registry, logger *slog.Logger, hook SinkHook[Tx], lag time.Duration,
	backendPID func(context.Context, Tx) (int, error)) error {
	ctx := cmd.Context()
	partitioner, _ := envelope.ParsePartitioner(f.partitioner) // checked by RunWorker
	misroute := consumer.MisrouteApply
	if f.misroute == "refuse" {
		misroute = consumer.MisrouteRefuse
	}
	// A sink that fences with the group's own metadata (sink/kafka) is
	// bound to the member once the Worker exists.
	binder, _ := any(s).(interface{ BindMember(kafka.MemberFunc) })
	s, err := sinkmetrics.Wrap(s, reg, backend)
	if err != nil {
		return err
	}
	var observers []consumer.Observer
	var events *eventlog.Writer
	if f.events != "" {
		file, err := os.OpenFile(f.events, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("--events: %w", err)
		}
		defer file.Close()
		events = eventlog.NewWriter(file, func(err error) {
			logger.Error("the event stream failed; events are no longer written", "events", f.events, "err", err)
		})
		observers = append(observers, events)
	}
	var clientOpts []kgo.Opt
	if hook != nil {
		var stop func()
		s, clientOpts, stop, err = hook(ctx, s, handlers, HookEnv[Tx]{Events: events, TLS: c.cfg.UsesTLS(), BackendPID: backendPID})
		if err != nil {
			return err
		}
		defer stop()
	}
	gctx, stop := c.guard(ctx)
	defer stop()
	cctx, cancel := context.WithTimeout(gctx, 15*time.Second)
	defer cancel()
	clientOpts = append(clientOpts, c.opts...)
	metrics, err := consumerprom.New(reg, f.group)
	if err != nil {
		return err
	}
	defer metrics.Unregister()
	w, err := consumer.New(cctx, consumer.Config[Tx]{
		ClientOpts:            clientOpts,
		Observers:             append(observers, metrics),
		Partitioner:           partitioner,
		Misroute:              misroute,
		Brokers:               c.brokers,
		Group:                 f.group,
		Topic:                 f.topic,
		Sink:                  s,
		Handlers:              handlers,
		Poison:                f.poison,
		DeadLetterTopic:       f.dlqTopic,
		DeadLetterCompression: envelope.Compression(f.dlqCompression),
		Protocol:              protocol,
		MaxBatch:              f.maxBatch,
		KeyConcurrency:        f.keyConcurrency,
		NoTakeover:            f.noTakeover,
		SessionTimeout:        f.sessionTimeout,
		HeartbeatInterval:     f.heartbeatInterval,
		RevokeTimeout:         f.revokeTimeout,
		RebalanceTimeout:      f.rebalanceTimeout,
		LagInterval:           lag,
		ClientID:              f.clientID,
		Logger:                logger,
	})
	switch {
	case errors.Is(err, consumer.ErrDeadLetterLoop):
		return fmt.Errorf("--dlq-topic %q is the topic of commands: dead letters would be consumed again as commands", f.dlqTopic)
	case errors.Is(err, consumer.ErrDeadLetterTopicMissing):
		return fmt.Errorf("--dlq-topic: topic %q does not exist on %s (create it first: kafka-topics.sh --create --topic %s, or workrouter-lab broker --topic %s,%s for the embedded broker)",
			f.dlqTopic, strings.Join(c.brokers, ","), f.dlqTopic, f.topic, f.dlqTopic)
	}
	if err != nil {
		if errors.Is(err, consumer.ErrConfig) {
			return err
		}
		return fmt.Errorf("cannot join group %s on the brokers %s: %w", f.group, strings.Join(c.brokers, ","), c.explain(err))
	}
	if binder != nil {
		binder.BindMember(w.Member)
	}
	ops, err := StartOps(f.metricsAddr, reg, w, f.readyMaxStall, logger)
	if err != nil {
		w.Close()
		return err
	}
	defer ops.Close()
	fmt.Fprintf(cmd.OutOrStdout(), "workrouter worker %s: example %s, group %s, topic %s, sink %s, brokers %s (%s), partitioner %s, %s\n",
		f.clientID, f.example, f.group, f.topic, spec, strings.Join(c.brokers, ","), c.cfg, partitioner, lanesText(f.keyConcurrency))
	logger.Info("poison records", "on_undecodable", f.poison.Undecodable, "on_no_handler", f.poison.NoHandler,
		"on_handler_error", f.poison.HandlerError, "max_attempts", f.poison.MaxAttempts, "max_retry_time", f.poison.MaxRetryTime,
		"dlq_topic", f.dlqTopic, "ready_max_stall", f.readyMaxStall)
	select {
	case <-ctx.Done():
		logger.Info("leaving the group", "reason", context.Cause(ctx))
		return w.Close()
	case <-w.Done():
		return w.Err()
	}
}

// WorkerHooks is what the lab's harness worker adds to the product worker
// (RunWorker): the fault hooks, one SinkHook per sink backend, and the
// settings only the harness changes. The product's worker command passes
// none.
type WorkerHooks struct {
	SQLite   SinkHook[*sqlite.Tx]
	Postgres SinkHook[pgx.Tx]
	Redis    SinkHook[*redis.Tx]
	Kafka    SinkHook[*kafka.Tx]
	// LagInterval is the worker's consumer.Config.LagInterval (0: the
	// consumer's default): the harnesses' reports draw the lag from the
	// workers' lag events, which the product worker reports every 10s.
	LagInterval time.Duration
	// SQLiteBusyTimeout is the SQLite sink's busy timeout (0: the sink's
	// default).
	SQLiteBusyTimeout time.Duration
	// KafkaSinkOpts are added to the options of the Kafka sink's clients
	// (its producers and admin client, the ledger's events reader and
	// the client that creates the sink's topics): the harness's dialer
	// through the network fault layer, so that a cut of the broker links
	// reaches the sink's producer too. The sink is built before the
	// SinkHook runs, so its hook's options cannot reach it.
	KafkaSinkOpts []kgo.Opt
}

// SinkHook installs fault hooks on a worker before it starts: it returns
// s wrapped, the options of the worker's Kafka client (a dialer of its
// own) and a function that stops the hooks' goroutines. It may add to
// handlers.
type SinkHook[Tx any] func(ctx context.Context, s sink.Sink[Tx], handlers map[string]consumer.Handler[Tx], env HookEnv[Tx]) (sink.Sink[Tx], []kgo.Opt, func(), error)

// HookEnv is what a SinkHook is told about the worker.
type HookEnv[Tx any] struct {
	// Events is the worker's event stream (--events), where the hooks
	// report what they did.
	Events *eventlog.Writer
	// TLS reports whether the worker reaches the brokers over TLS.
	TLS bool
	// BackendPID, if not nil, reads the database session's backend ID
	// inside a transaction (PostgreSQL).
	BackendPID func(context.Context, Tx) (int, error)
}

func (h *WorkerHooks) sqliteHook() SinkHook[*sqlite.Tx] {
	if h == nil {
		return nil
	}
	return h.SQLite
}

func (h *WorkerHooks) postgresHook() SinkHook[pgx.Tx] {
	if h == nil {
		return nil
	}
	return h.Postgres
}

func (h *WorkerHooks) redisHook() SinkHook[*redis.Tx] {
	if h == nil {
		return nil
	}
	return h.Redis
}

func (h *WorkerHooks) kafkaHook() SinkHook[*kafka.Tx] {
	if h == nil {
		return nil
	}
	return h.Kafka
}

func (h *WorkerHooks) kafkaSinkOpts() []kgo.Opt {
	if h == nil {
		return nil
	}
	return h.KafkaSinkOpts
}

func (h *WorkerHooks) lagEvery() time.Duration {
	if h == nil {
		return 0
	}
	return h.LagInterval
}

func (h *WorkerHooks) sqliteBusy() time.Duration {
	if h == nil {
		return 0
	}
	return h.SQLiteBusyTimeout
}
