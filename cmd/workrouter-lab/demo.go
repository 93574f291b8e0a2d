package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/workrouter/workrouter/cmd/internal/cli"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/cmd/internal/demo"
	"github.com/workrouter/workrouter/cmd/internal/timeline"
)

func newDemoCmd() *cobra.Command {
	var (
		cfg    demo.Config
		asJSON bool
		sink   string
		report string
		cf     cli.ConnFlags
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show fencing at work: a frozen or cut-off worker process's late write is rejected",
		Long: `demo starts an embedded broker in a temporary directory, creates the topic,
starts worker processes of the ledger example on an SQLite sink (or
PostgreSQL with --sink postgres://…, Redis with --sink redis://…, or Kafka
with --sink kafka: the decisions as events, in transactions, read back with
read_committed), produces
ledger commands over a few hundred accounts, freezes one worker with SIGSTOP
past its session timeout (just before one of its batches, between
transactions), resumes it with SIGCONT after another worker has taken over its
partitions, waits until lag is zero, and checks from the sink's own records
that nothing was lost, duplicated or reordered and that the late write was
rejected. It prints a timeline and a final summary line, and exits non-zero if
any invariant failed. With --key-concurrency N the workers apply each partition
in N lanes (one key's commands in one lane, in offset order); the order checked
is then per key.

With --fault partition the zombie is not frozen: the worker keeps running,
holding its batch, while its links to every broker are cut both ways (it
dials the brokers through proxies of the harness, which drop every byte
either way, as a network partition drops packets); after another worker
has taken over its partitions the batch goes on and its write is rejected,
and then the links heal. Each step is checked (bytes dropped by the cut,
the takeover, the held write refused); the run fails, without a summary,
if one did not happen. It needs a plaintext listener and a sink other than
kafka.

With --brokers it runs on that cluster, on a topic of its own; the connection
flags below reach the demo's clients and its worker processes (the password
through their environment, never their command line).
` + cli.ConnHelp,
		Example: `  workrouter-lab demo
  workrouter-lab demo --json
  workrouter-lab demo --report demo.html
  workrouter-lab demo --key-concurrency 8
  workrouter-lab demo --fault partition --report partition.html
  workrouter-lab demo --brokers kafka-1:9092 --commands 10000
  workrouter-lab demo --protocol kip848
  workrouter-lab demo --sink postgres://postgres@127.0.0.1:5432/test
  workrouter-lab demo --sink kafka`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("demo: cannot find its own executable to start workers: %w", err)
			}
			if !slices.Contains(demo.Faults(), cfg.Fault) {
				return fmt.Errorf("--fault %q: want %s", cfg.Fault, strings.Join(demo.Faults(), " or "))
			}
			cfg.Worker = cluster.Binary{Argv: []string{exe}}
			if len(cfg.Brokers) > 0 {
				c, err := cli.ResolveConn(cmd, cf, cfg.Brokers)
				if err != nil {
					return err
				}
				cfg.Brokers, cfg.ClientOpts = c.Brokers(), c.Opts()
				cfg.WorkerConn, cfg.Worker.Env = c.WorkerArgs()
			} else if cf.Given() {
				return fmt.Errorf("the connection flags (--tls, --sasl-*, -X, --properties) apply to --brokers; the embedded broker needs none")
			}
			if cfg.Kafka, err = cli.KafkaHarnessSink(sink); err != nil {
				return err
			} else if !cfg.Kafka {
				if cfg.PostgresDSN, cfg.SinkPath, cfg.RedisURL, err = cli.LedgerSink(sink); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				cfg.Out = out
			}
			sum, err := demo.Run(cmd.Context(), cfg)
			if sum.Timeline != nil {
				// A run that stopped before counting the sink has only
				// zeros to sum up: its error says what happened.
				if sum.Counted && asJSON {
					enc := json.NewEncoder(out)
					_ = enc.Encode(sum)
				} else if sum.Counted {
					fmt.Fprintln(out, sum.Line())
				}
				if report != "" {
					err = errors.Join(err, writeReport(cmd, report, timeline.FromDemo(sum)))
				}
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&cfg.Commands, "commands", 3000, "ledger commands to produce")
	fl.IntVar(&cfg.Accounts, "accounts", 300, "distinct accounts (keys)")
	fl.Int32Var(&cfg.Partitions, "partitions", 6, "topic partitions")
	fl.IntVar(&cfg.Workers, "workers", 3, "worker processes (at least 2)")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "seed for the generated commands")
	fl.StringSliceVar(&cfg.Brokers, "brokers", nil, "run against this cluster instead of an embedded broker")
	fl.StringVar(&sink, "sink", "", "sqlite:PATH, postgres://…, redis://… or kafka (default: an SQLite file in a temporary directory; PostgreSQL runs in a fresh schema dropped at the end; kafka: the ledger's decisions as events, in transactions, on topics of its own on the demo's broker, checked with read_committed)")
	fl.DurationVar(&cfg.SessionTimeout, "session-timeout", 0, "the workers' session timeout (default 2s)")
	fl.StringVar(&cfg.Protocol, "protocol", "cooperative", "the workers' group protocol: cooperative or kip848 (under kip848 the session timeout is the broker's: with --brokers, its group.consumer.session.timeout.ms must not exceed --session-timeout)")
	fl.IntVar(&cfg.KeyConcurrency, "key-concurrency", 1, "lanes per partition in each worker (the worker's --key-concurrency): one key's commands in one lane, in offset order")
	fl.StringVar(&cfg.Fault, "fault", demo.FaultPause, "how the zombie is made: pause (SIGSTOP past its session timeout, then SIGCONT) or partition (its broker links cut both ways while it runs with a batch in hand, then healed)")
	fl.BoolVar(&asJSON, "json", false, "print the summary as one JSON object instead of the timeline")
	fl.StringVar(&report, "report", "", "also write the run as one self-contained HTML page to this file: per partition its owners' tenures, the faults, the refused stale writes, the applied rate and the lag")
	cli.AddConnFlags(fl, &cf)
	return cmd
}

// writeReport writes a harness run's HTML report to path and says so on
// stderr (stdout ends with the run's final line, or holds its JSON).
func writeReport(cmd *cobra.Command, path string, r timeline.Report) error {
	if err := timeline.WriteFile(path, r); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "report written to %s\n", path)
	return nil
}
