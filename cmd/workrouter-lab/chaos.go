package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/workrouter/workrouter/cmd/internal/chaos"
	"github.com/workrouter/workrouter/cmd/internal/cli"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/cmd/internal/timeline"
)

func newChaosCmd() *cobra.Command {
	var (
		cfg    chaos.Config
		kinds  string
		sink   string
		asJSON bool
		report string
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Fault harness: inject seeded faults into worker processes and check the fencing invariants",
		Long: `chaos starts a broker process (the embedded broker with synchronous writes to a
data dir, so that it can be killed and restarted), worker processes of the ledger example on
a durable sink (SQLite in a temporary directory by default, PostgreSQL with
--sink postgres://…, in a fresh schema dropped at the end), produces keyed
ledger commands at a steady rate for --duration, and injects faults of the
selected kinds at seeded random intervals (rounds of every kind in a seeded
order, 0.5–2 s apart; one fault at a time):

  pause        SIGSTOP a worker past its session timeout, then SIGCONT: armed to
               freeze between transactions and resumed before or after the new
               owner's first write, or stopped at a random moment
  kill         SIGKILL a worker, then start a new process in its place
  heartbeat    hold back one member's heartbeats at the broker (no reply) for
               1.5× the session timeout while it keeps working
  broker-conn  close all of one worker's broker connections, or stall them for
               1.5× the session timeout (a wrapping kgo.Dialer in the worker)
  sink-conn    PostgreSQL: pg_terminate_backend on a worker's connections, in a
               transaction if possible; SQLite (no connection to cut): cancel a
               worker's transaction after its first effect, mid-transaction
  coordinator  answer one member's heartbeats and offset commits with
               NOT_COORDINATOR, REBALANCE_IN_PROGRESS or no reply for 1–2.5 s
  poison       a foreign producer (a plain Kafka client, not the router) writes,
               between the good commands, a record that is not a command, one
               with a null key, one with two type headers, one of a type without
               a handler and one the ledger's handler refuses; then, with a
               transactional client, poison records right after a commit
               marker and right after an aborted transaction (whose records
               must be neither applied nor dead-lettered); each poison record
               must be dead-lettered exactly once
  broker-restart  SIGKILL the broker process and start it again on the same
               address and data dir: nothing acknowledged may be lost, and every
               worker must claim again
  resend       the producer sends 5–20 commands the broker had acknowledged again,
               with their command IDs, as an application retrying Send after an
               ambiguous error whose first attempt had landed: the workers must
               skip every copy as a duplicate
  churn        all along the run: an extra member joins, stays 1–5 s, leaves
               (SIGTERM); the next joins 1–5 s later

When the duration is up it stops producing, waits until lag is zero with every
acknowledged command applied, reads the sink's own records and checks the
invariants of docs/design.md#invariants: F (no stale write accepted after a newer claim),
L (nothing acknowledged lost), O (per-key order: per account, in the order the
postings were applied, also with --key-concurrency lanes), X (no command ID applied twice
— a command that entered the log twice, re-sent or written twice by the broker
across a restart, is skipped as a duplicate — and balances match), V (lag back to zero, and no committed offset ahead of the
sink's checkpoint in samples taken every 1–2 s all along the run), D (every
skipped record has exactly one dead letter, nothing else was skipped, no
record both dead-lettered and applied). It prints a table and a final line

  chaos: faults=<n> kinds=<k> commands=<c> stale_rejected=<r> dead_letters=<d> gap_dead_letters=<g> duplicates_skipped=<u> v_samples=<s> violations=<v>

and exits non-zero if any invariant was violated, a requested kind never
fired, no stale write was rejected although pause, heartbeat or
partition-broker ran, a worker dialled a broker outside its links, a broker
restart lost an acknowledged record or not every worker came back, V was
never sampled, poison ran and no poison record was dead-lettered right
after an offset gap, resend ran and no duplicate was skipped, or the sink's
count of duplicates skipped is not the number of records in the log that repeat
a command ID.

--kafka-nodes 3 runs it on a cluster of three Apache Kafka 4.4 nodes (each a
broker and a KRaft controller, started with the classpath Maven caches, on free
ports of 127.0.0.1, stopped at the end) instead of the embedded broker: the
topic has 3 replicas and min.insync.replicas=2, the producers are idempotent
with acks=all, and four kinds act on the nodes, each counted only when the
cluster reports that it moved what it had to move:

  leader-kill  SIGKILL the leader of a partition a worker is applying; counted
               when the metadata names another leader; the node is started
               again and the run waits until every replica is in sync
  controller-kill  SIGKILL the active KRaft controller; counted when the
               metadata quorum (DescribeQuorum) names another leader at a
               newer epoch; started again as above
  broker-pause SIGSTOP the leader of a partition a worker is applying past its
               broker session (6 s at least); counted when the controller
               fenced it (another node leads the partition); then SIGCONT
  coordinator-restart  stop (SIGTERM) the node coordinating the workers'
               group; counted when FindCoordinator names another node; then
               started again

and one more when named (--faults partition-broker-node), which starts the
cluster with every client, replication and controller path to a node through a
proxy of the harness's:

  partition-broker-node  cut the leader of a partition a worker is applying
               off from the other nodes and from its clients, both ways,
               for 6 s at least; counted when the other nodes name another
               leader and its replication, controller and client links each
               dropped bytes while cut; then healed

heartbeat, coordinator and broker-restart need the embedded broker and do not
run there (the run says so); every other kind does ("all", the default).

--brokers runs it on an external cluster (plaintext), on a topic of its own,
with the kinds that need no broker of the harness's (pause, kill, broker-conn,
sink-conn, resend, churn: the default there).

Four network kinds run only when named in --faults (not in "all"), wherever the
run goes: each worker then reaches every broker address and its sink through
TCP proxies of its own (toxiproxy, in the harness's process):

  partition-broker  cut one worker's broker links both ways past its session
               timeout while its sink link works and it holds a batch; once
               another member claimed that batch's partition, release the
               batch (the sink must refuse its write), then heal
  partition-sink  cut one worker's sink link (PostgreSQL or Redis) for 1.5×
               the session timeout, then heal: nothing lost, nothing twice
  one-way      drop the replies on one worker's sink link (its requests still
               reach the sink) for 1.5× the session timeout, then heal: the
               worker sees its sink operation fail and retries it
  slow-link    delay one worker's broker links by 300 ms ± 100 ms each way
               (above the 200 ms heartbeat interval) for 1.5× the session
               timeout, then heal`,
		Example: `  workrouter-lab chaos --duration 2m --seed 1
  workrouter-lab chaos --faults pause,heartbeat --duration 1m
  workrouter-lab chaos --protocol kip848 --seed 7
  workrouter-lab chaos --key-concurrency 8 --duration 90s
  workrouter-lab chaos --duration 30s --report chaos.html
  workrouter-lab chaos --kafka-nodes 3 --duration 5m --seed 1
  workrouter-lab chaos --sink postgres://postgres@127.0.0.1:5432/test
  workrouter-lab chaos --faults partition-broker,partition-sink,one-way,slow-link --sink postgres://postgres@127.0.0.1:5432/test`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ks, err := chaos.ParseKinds(kinds)
			if err != nil {
				return err
			}
			cfg.Kinds = ks
			if len(cfg.Brokers) > 0 {
				if cfg.Brokers, err = cli.CleanBrokers(cfg.Brokers); err != nil {
					return err
				}
			}
			if cfg.Kafka, err = cli.KafkaHarnessSink(sink); err != nil {
				return err
			} else if !cfg.Kafka {
				if cfg.PostgresDSN, cfg.SinkPath, cfg.RedisURL, err = cli.LedgerSink(sink); err != nil {
					return err
				}
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("chaos: cannot find its own executable to start workers: %w", err)
			}
			cfg.Worker = cluster.Binary{Argv: []string{exe}}
			out := cmd.OutOrStdout()
			if !asJSON {
				cfg.Out = out
			}
			res, err := chaos.Run(cmd.Context(), cfg)
			if res.Requested != nil {
				// A run that stopped before its check has only zeros to
				// sum up (a "violations=0" line it did not earn): its
				// error says what happened.
				if res.Checked && asJSON {
					_ = json.NewEncoder(out).Encode(res)
				} else if res.Checked {
					fmt.Fprintf(out, "\n%s\n%s\n", res.Table(), res.Line())
				}
				if report != "" {
					err = errors.Join(err, writeReport(cmd, report, timeline.FromChaos(res)))
				}
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long to produce commands and inject faults")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fault schedule and the commands")
	fl.StringVar(&kinds, "faults", "all", "fault kinds, comma-separated: pause,kill,heartbeat,broker-conn,sink-conn,coordinator,poison,broker-restart,resend,churn (the embedded broker), leader-kill,controller-kill,broker-pause,coordinator-restart (--kafka-nodes), partition-broker,partition-sink,one-way,slow-link (named only), partition-broker-node (--kafka-nodes, named only), or all: every kind that applies where the run goes but the network ones")
	fl.IntVar(&cfg.Workers, "workers", 3, "worker processes (at least 2)")
	fl.Int32Var(&cfg.Partitions, "partitions", 6, "topic partitions")
	fl.IntVar(&cfg.Accounts, "accounts", 200, "distinct accounts (keys)")
	fl.IntVar(&cfg.Rate, "rate", 200, "commands produced per second")
	fl.StringVar(&sink, "sink", "", "sqlite:PATH, postgres://…, redis://… or kafka (default: an SQLite file in a temporary directory; PostgreSQL runs in a fresh schema dropped at the end; kafka: the decisions as events in transactions on the run's broker, checked with read_committed, without the resend and broker-restart kinds)")
	fl.StringVar(&cfg.Protocol, "protocol", "cooperative", "group protocol: cooperative or kip848")
	fl.DurationVar(&cfg.SessionTimeout, "session-timeout", 2*time.Second, "the workers' session timeout")
	fl.DurationVar(&cfg.RebalanceTimeout, "rebalance-timeout", 0, "the workers' rebalance timeout (default 2.5× the session timeout: the embedded broker restarts a rebalance's timer on every join)")
	fl.IntVar(&cfg.KeyConcurrency, "key-concurrency", 1, "lanes per partition in each worker (the worker's --key-concurrency): one account's commands in one lane, in offset order")
	fl.DurationVar(&cfg.RecoverTimeout, "recover-timeout", 2*time.Minute, "how long lag may take to return to zero after the faults")
	fl.StringSliceVar(&cfg.Brokers, "brokers", nil, "run on this cluster (plaintext) instead of an in-process broker")
	fl.IntVar(&cfg.KafkaNodes, "kafka-nodes", 0, "start this many Apache Kafka nodes (at least 3; needs java, and mvn the first time) and run on them instead of the embedded broker")
	fl.StringVar(&cfg.LogDir, "log-dir", "", "write each worker's log and the broker's to this existing directory")
	fl.BoolVar(&asJSON, "json", false, "print the result as one JSON object instead of the timeline and table")
	fl.StringVar(&report, "report", "", "also write the run as one self-contained HTML page to this file: per partition its owners' tenures, the faults, the refused stale writes, the dead letters, the applied rate and the lag")
	return cmd
}
