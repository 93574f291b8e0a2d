package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/eventlog"
	"github.com/workrouter/workrouter/examples/invoices"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/postgres"
	"github.com/workrouter/workrouter/sink/sinkmetrics"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// workerFlags holds the values of `workrouter worker`'s flags.
type workerFlags struct {
	example           string
	brokers           []string
	topic             string
	group             string
	sink              string
	protocol          string
	clientID          string
	maxBatch          int
	sessionTimeout    time.Duration
	heartbeatInterval time.Duration
	revokeTimeout     time.Duration
	rebalanceTimeout  time.Duration
	metricsAddr       string
	events            string
	// sqliteBusy is the SQLite sink's busy timeout (0: its default); only
	// the harness's worker sets it.
	sqliteBusy time.Duration
}

// errUnknownExample is matched by the error for an --example that does not exist.
var errUnknownExample = errors.New("unknown example")

func newWorkerCmd() *cobra.Command {
	var f workerFlags
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

Real applications build their own binary from the library (see the README);
this command runs the examples in ./examples.`,
		Example: `  workrouter worker --example ledger --sink sqlite:ledger.db
  workrouter worker --example invoices --sink postgres://postgres@127.0.0.1:5432/test --group billing
  workrouter worker --example ledger --events /var/log/workrouter/events.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWorker(cmd, f, nil) },
	}
	addWorkerFlags(cmd.Flags(), &f)
	return cmd
}

// addWorkerFlags defines the worker's flags on fl.
func addWorkerFlags(fl *pflag.FlagSet, f *workerFlags) {
	fl.StringVar(&f.example, "example", "", "built-in example to run: ledger or invoices (required)")
	fl.StringSliceVar(&f.brokers, "brokers", []string{"127.0.0.1:9092"}, "seed brokers, comma-separated")
	fl.StringVar(&f.topic, "topic", "", "topic of commands (default: the example's, ledger or invoices)")
	fl.StringVar(&f.group, "group", "", "consumer group (default: <example>-workers)")
	fl.StringVar(&f.sink, "sink", "sqlite:workrouter.db", "fenced sink: sqlite:PATH or postgres://…")
	fl.StringVar(&f.protocol, "protocol", "cooperative", "group protocol: cooperative or kip848")
	fl.StringVar(&f.clientID, "client-id", "", "this member's client id (default: workrouter-<host>-<pid>)")
	fl.IntVar(&f.maxBatch, "max-batch", 256, "most records applied in one sink transaction")
	fl.DurationVar(&f.sessionTimeout, "session-timeout", 10*time.Second, "group session timeout")
	fl.DurationVar(&f.heartbeatInterval, "heartbeat-interval", time.Second, "group heartbeat interval")
	fl.DurationVar(&f.revokeTimeout, "revoke-timeout", 10*time.Second, "how long a revoked partition's in-flight batch may take")
	fl.DurationVar(&f.rebalanceTimeout, "rebalance-timeout", 60*time.Second, "group rebalance timeout: how long the group waits for members to rejoin")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this host:port (no host means loopback; empty disables)")
	fl.StringVar(&f.events, "events", "", "also write every worker event as a JSON line to this file (appended; /dev/fd/N for an inherited descriptor)")
}

// runWorker runs the worker f describes; h adds the harness's fault hooks
// (nil for the product command).
func runWorker(cmd *cobra.Command, f workerFlags, h *harnessHooks) error {
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
		host, _ := os.Hostname()
		f.clientID = fmt.Sprintf("workrouter-%s-%d", host, os.Getpid())
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
	logger, err := newLogger(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	switch spec.kind {
	case "sqlite":
		s, err := sqlite.Open(ctx, sqlite.Config{Path: spec.path, Logger: logger, BusyTimeout: f.sqliteBusy})
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
		return serveWorker[*sqlite.Tx](cmd, f, spec, protocol, "sqlite", s, handlers, logger, h, nil)
	case "postgres":
		// A search_path in the DSN names the schema of the sink's tables
		// too, so that the sink and the example's tables live together.
		var schema string
		if pc, err := pgx.ParseConfig(spec.dsn); err == nil {
			schema = pc.RuntimeParams["search_path"]
		}
		s, err := postgres.Open(ctx, postgres.Config{DSN: spec.dsn, Schema: schema, Logger: logger})
		if err != nil {
			return err
		}
		defer s.Close()
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
		return serveWorker[pgx.Tx](cmd, f, spec, protocol, "postgres", s, handlers, logger, h, backendPID)
	}
	return fmt.Errorf("unsupported sink %q", f.sink)
}

// serveWorker runs a Worker on s until the command's context ends or the
// Worker stops by itself. backendPID, if set, reads the database session's
// backend ID inside a transaction (for the harness's hooks).
func serveWorker[Tx any](cmd *cobra.Command, f workerFlags, spec sinkSpec, protocol consumer.Protocol, backend string, s sink.Sink[Tx],
	handlers map[string]consumer.Handler[Tx], logger *slog.Logger, h *harnessHooks, backendPID func(context.Context, Tx) (int, error)) error {
	ctx := cmd.Context()
	reg := newRegistry()
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
	if h != nil {
		var stop func()
		s, clientOpts, stop, err = installHooks(ctx, h, s, events, backendPID)
		if err != nil {
			return err
		}
		defer stop()
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	w, err := consumer.New(cctx, consumer.Config[Tx]{
		ClientOpts:        clientOpts,
		Registerer:        reg,
		Observers:         observers,
		Brokers:           f.brokers,
		Group:             f.group,
		Topic:             f.topic,
		Sink:              s,
		Handlers:          handlers,
		Protocol:          protocol,
		MaxBatch:          f.maxBatch,
		SessionTimeout:    f.sessionTimeout,
		HeartbeatInterval: f.heartbeatInterval,
		RevokeTimeout:     f.revokeTimeout,
		RebalanceTimeout:  f.rebalanceTimeout,
		ClientID:          f.clientID,
		Logger:            logger,
		Poison:            h.poisonPolicy(),
	})
	if err != nil {
		return err
	}
	ops, err := startOps(f.metricsAddr, reg, w.Ready, logger)
	if err != nil {
		w.Close()
		return err
	}
	defer ops.close()
	fmt.Fprintf(cmd.OutOrStdout(), "workrouter worker %s: example %s, group %s, topic %s, sink %s\n",
		f.clientID, f.example, f.group, f.topic, spec)
	select {
	case <-ctx.Done():
		logger.Info("leaving the group", "reason", context.Cause(ctx))
		return w.Close()
	case <-w.Done():
		return w.Err()
	}
}
