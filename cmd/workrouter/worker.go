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
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/examples/invoices"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/cmd/internal/faults"
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
	freezeBeforeBatch int64
	chaos             bool
	chaosStall        time.Duration
	metricsAddr       string
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

Real applications build their own binary from the library (see the README);
this command runs the examples in ./examples.`,
		Example: `  workrouter worker --example ledger --sink sqlite:ledger.db
  workrouter worker --example invoices --sink postgres://postgres@127.0.0.1:5432/test --group billing`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWorker(cmd, f) },
	}
	fl := cmd.Flags()
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
	fl.Int64Var(&f.freezeBeforeBatch, "freeze-before-batch", 0, "fault injection: stop this process with SIGSTOP right before its Nth batch (0: never)")
	_ = fl.MarkHidden("freeze-before-batch")
	fl.BoolVar(&f.chaos, "chaos", false, "fault injection for `workrouter chaos`: SIGUSR1 freezes (SIGSTOP) before the next batch, "+
		"SIGUSR2 cuts the broker connections, SIGHUP stalls them for --chaos-stall, SIGWINCH interrupts the next sink transaction mid-way")
	fl.DurationVar(&f.chaosStall, "chaos-stall", 3*time.Second, "with --chaos: how long SIGHUP stalls the broker connections")
	_ = fl.MarkHidden("chaos")
	_ = fl.MarkHidden("chaos-stall")
	return cmd
}

func runWorker(cmd *cobra.Command, f workerFlags) error {
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
		s, err := sqlite.Open(ctx, sqlite.Config{Path: spec.path, Logger: logger})
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
		return serveWorker[*sqlite.Tx](cmd, f, protocol, "sqlite", s, handlers, logger)
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
		return serveWorker[pgx.Tx](cmd, f, protocol, "postgres", s, handlers, logger)
	}
	return fmt.Errorf("unsupported sink %q", f.sink)
}

func serveWorker[Tx any](cmd *cobra.Command, f workerFlags, protocol consumer.Protocol, backend string, s sink.Sink[Tx],
	handlers map[string]consumer.Handler[Tx], logger *slog.Logger) error {
	ctx := cmd.Context()
	reg := newRegistry()
	s, err := sinkmetrics.Wrap(s, reg, backend)
	if err != nil {
		return err
	}
	if f.freezeBeforeBatch > 0 {
		s = faults.FreezeBeforeBatch(s, f.freezeBeforeBatch, func(tok epochs.Token, _ []int64) {
			logger.Warn(faults.MsgFreezing, "group", tok.Group, "topic", tok.Topic,
				"partition", tok.Partition, "epoch", tok.Epoch, "member", tok.Member)
		})
	}
	var clientOpts []kgo.Opt
	if f.chaos {
		ch := newChaosHooks(s, f.chaosStall, logger)
		s = ch.sink
		clientOpts = append(clientOpts, kgo.Dialer(ch.dialer.DialContext))
		stop := ch.start(ctx)
		defer stop()
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	w, err := consumer.New(cctx, consumer.Config[Tx]{
		ClientOpts:        clientOpts,
		Registerer:        reg,
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
		f.clientID, f.example, f.group, f.topic, f.sink)
	<-ctx.Done()
	logger.Info("leaving the group", "reason", context.Cause(ctx))
	return w.Close()
}
