// Command billing-worker is the README's own worker: a consumer group
// member that records each tenant's billing runs in an SQLite database,
// inside the sink's fenced transaction. Run several on one machine and they
// share the partitions of topic "billing"; stop one with Ctrl-C and the
// others take its partitions over.
//
//	go run ./examples/billing-worker -brokers 127.0.0.1:9092 -db billing.db
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/sink/sqlite"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka brokers, comma-separated")
	path := flag.String("db", "billing.db", "SQLite database file (created if missing)")
	flag.Parse()
	// The library logs nothing unless given a logger: this one writes
	// claims, fences, stalls and a missing topic to stderr.
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, strings.Split(*brokers, ","), *path, logger); err != nil {
		logger.Error("billing worker failed", "err", err)
		os.Exit(1)
	}
}

// run works until ctx ends (then leaves the group cleanly) or the worker
// stops by itself.
func run(ctx context.Context, brokers []string, path string, logger *slog.Logger) error {
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path, Logger: logger})
	if err != nil {
		return err
	}
	defer s.Close()
	// The handler's table, created before the worker starts. A second
	// request for the same tenant and period is a no-op.
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS runs (
		tenant TEXT NOT NULL,
		period TEXT NOT NULL,
		PRIMARY KEY (tenant, period))`); err != nil {
		return err
	}
	w, err := consumer.New(ctx, consumer.Config[*sqlite.Tx]{
		Brokers: brokers, Group: "billing", Topic: "billing", Sink: s,
		Logger: logger,
		Handlers: map[string]consumer.Handler[*sqlite.Tx]{
			// Runs inside the fenced transaction: write only through tx.
			"run-billing": func(ctx context.Context, tx *sqlite.Tx, cmd consumer.Command) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO runs (tenant, period) VALUES (?, ?)
					ON CONFLICT (tenant, period) DO NOTHING`, string(cmd.Key), string(cmd.Payload))
				return err
			},
		},
	})
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return w.Close() // finishes in-flight batches, commits, leaves the group
	case <-w.Done():
		return w.Err() // stopped by itself: exit, and let a supervisor restart it
	}
}
