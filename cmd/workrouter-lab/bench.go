package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/workrouter/workrouter/cmd/internal/bench"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// benchJSON is `workrouter-lab bench --json` output.
type benchJSON struct {
	Quick   bool              `json:"quick"`   // --quick: the ratios decide no target
	Repeats int               `json:"repeats"` // measured runs per throughput row
	Results []benchJSONResult `json:"results"`
	Ratios  map[string]any    `json:"ratios"` // name → median ratio, or null if not measured
	Targets []benchJSONTarget `json:"targets"`
	// Latencies are the latency targets (W9's send_p50, send_p99).
	Latencies []benchJSONLatency `json:"latencies"`
	Line      string             `json:"line"`
}

// benchJSONLatency is one latency target: the median over the runs of
// each run's percentile, their min–max, in milliseconds.
type benchJSONLatency struct {
	Name     string    `json:"name"`
	Row      string    `json:"row"`
	TargetMs float64   `json:"target_ms"` // the median must stay below it
	MedianMs *float64  `json:"median_ms"` // null if not measured
	MinMs    *float64  `json:"min_ms"`
	MaxMs    *float64  `json:"max_ms"`
	RunsMs   []float64 `json:"runs_ms"`
	Met      bool      `json:"met"` // never under --quick
	Verdict  string    `json:"verdict"`
}

// benchJSONResult is one row: the median run's figures, the throughput's
// median and min–max over the measured runs, and every run.
type benchJSONResult struct {
	ID             string         `json:"id"`
	Name           string         `json:"name"`
	Records        int            `json:"records"`
	Repeats        int            `json:"repeats"`  // runs planned
	Measured       int            `json:"measured"` // runs that measured something
	Seconds        float64        `json:"seconds"`
	RecordsPerS    float64        `json:"records_per_s"` // median
	RecordsPerSMin float64        `json:"records_per_s_min"`
	RecordsPerSMax float64        `json:"records_per_s_max"`
	CPUMicrosRec   float64        `json:"cpu_us_per_record"`
	PeakRSSMiB     float64        `json:"peak_rss_mib"`
	Extra          string         `json:"extra,omitempty"`
	Skipped        string         `json:"skipped,omitempty"`  // no run measured anything: why
	Problems       string         `json:"problems,omitempty"` // planned runs that measured nothing, and why
	Runs           []benchJSONRun `json:"runs"`
}

// benchJSONRun is one run of a row, in run order.
type benchJSONRun struct {
	Records      int     `json:"records"`
	Seconds      float64 `json:"seconds"`
	RecordsPerS  float64 `json:"records_per_s"`
	CPUMicrosRec float64 `json:"cpu_us_per_record"`
	Extra        string  `json:"extra,omitempty"`
	Skipped      string  `json:"skipped,omitempty"` // "failed: …" if it failed
}

// benchJSONTarget is one target line.
type benchJSONTarget struct {
	Name         string    `json:"name"`
	Num          string    `json:"num"`
	Den          string    `json:"den"`
	Target       float64   `json:"target"` // 0: no target, the ratio is only reported
	CPU          bool      `json:"cpu"`    // a ratio of CPU per record, the baseline's over workrouter's, not of throughput
	Ratio        *float64  `json:"ratio"`  // median(num)/median(den) (cpu: median(den)/median(num)); null if not measured
	PairMin      *float64  `json:"pair_min"`
	PairMax      *float64  `json:"pair_max"`
	Pairs        []float64 `json:"pairs"` // run i of num / run i of den (cpu: den over num)
	Met          bool      `json:"met"`   // the median ratio reached the target (never under --quick, never without a target)
	EveryPairMet bool      `json:"every_pair_met"`
	Verdict      string    `json:"verdict"`
}

func newBenchCmd() *cobra.Command {
	var (
		cfg        bench.SetupConfig
		only       []string
		asJSON     bool
		repeats    int
		cpuProfile string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure workrouter against raw franz-go, Sarama and unfenced writes in one run",
		Long: `bench pre-loads a topic of 100-byte keyed commands over 12 partitions
(1,000,000 commands; 300,000 with --quick) on an embedded broker (or --brokers),
then runs each workload and its baseline in this process:

  B0 raw kgo PollFetches loop, no work      W1 worker, no-op handler, memory sink
  B1 raw kgo goroutine per partition        B2 IBM/sarama ConsumerGroup (-tags sarama)
  W3 worker, 1ms simulated I/O per record   B3/W2 unfenced/fenced SQLite and PostgreSQL upserts
  B4 raw kgo produce                        W4 produce through the router
  B5 kcat -P -l FILE, whole process         W8 workrouter produce --file FILE, whole process
  W9 lone router.Send latency, 2,000 sequential sends (p50, p99)
  W5 end-to-end latency, produce to commit, at half the maximum rate it
     measures (median of 3 runs): memory sink; W5-sqlite: SQLite sink
  W6 pause-to-takeover
  W1n W1 with deduplication off (no ratio: what the command IDs cost W1)
  W7 W3's handler with 16 lanes per partition (KeyConcurrency 16) over 1,200
     keys on a topic of its own, memory sink; W7-pg: PostgreSQL sink
  B3-kafka/W2-kafka consume-transform-produce, exactly once, one output
     record per command, over the first 300,000 commands: franz-go's
     GroupTransactSession (a transaction per poll) and the worker on the
     Kafka sink (batches of the sink's preferred 2,048, several partitions'
     batches a transaction; W2-kafka-b4096: 4,096)

B5 and W8 send the same commands as W4 (the pre-loaded count of them: key,
workrouter-type header, 100-byte payload), from files written before the
runs, each as a whole process to a fresh topic of the embedded broker,
connection setup included; B5 is skipped if kcat is not installed.

The pre-loaded commands carry command IDs as the router generates them. The
fenced W2 rows deduplicate them (the worker applies each batch with its
IDs); each has a twin with deduplication off, the same workload on a
sink wrapped to declare no dedupe window: W2-sqlite/W2n-sqlite and W2-pg/W2n-pg at
batch 256, W2-sqlite-b1/W2n-sqlite-b1 and W2-pg-b1/W2n-pg-b1 at batch 1
(4,000 and 3,000 records: one commit per record). The PostgreSQL fence alone
is W2n-pg against B3-pg at batch 256, W2n-pg-b1 against B3-pg-b1 at batch 1
and W2n-pg-b16 against B3-pg-b16 at batch 16 (32,000 records). W2u-pg is
W2n-pg's worker and handler with the fence taken out (a diagnostic sink
with no fence row and no checkpoint, not one to run): it splits the batch-256
ratio into the worker's plumbing (W2u-pg/B3-pg) and the fence inside the
worker (W2n-pg/W2u-pg).

Every throughput workload and baseline (all but W5, W5-sqlite and W6)
runs 5 times (3 with --quick; --repeats sets it). The runs of a workload and its baselines alternate, so that
warm-up, leftover garbage and background load favour neither side:
B1,W1,W1n,B2,B1,W1,W1n,B2,… then W3,W7,W7-pg,… B3-sqlite,W2-sqlite,W2n-sqlite,…
W2-sqlite-b1,W2n-sqlite-b1,… B3-pg,W2-pg,W2n-pg,W2u-pg,… B3-pg-b1,W2-pg-b1,W2n-pg-b1,…
B3-pg-b16,W2n-pg-b16,… B3-redis,W2-redis,… B3-kafka,W2-kafka,W2-kafka-b4096,… B4,W4,B4,W4,…
B5,W8,B5,W8,…
(--only runs just the selected ones, interleaved the same way). Each of these
groups starts with one unreported warm-up run of its first member (the first
produce run of a process is often slow). B0 and W9 run their repeats back to back;
W5, W5-sqlite and W6 run once.

A consuming row's clock runs from its consumer's start (group join included)
to its n-th applied record; the worker's graceful Close comes after it (a
raw consumer stops by cancelling, a few milliseconds that stay on its clock).

The table gives each row's median records/s over its runs and their min–max,
with CPU per record and peak RSS; a run that failed or was skipped is counted
and named in its row. Each target line gives the median ratio
(median workload / median baseline) and the min–max of the per-pair ratios
(workload run i / baseline run i, which ran next to each other):

  target produce_vs_raw=0.97 [0.95–0.99 over 5 pairs] (W4/B4, want >= 0.95): met (every pair)

A target is met if the median ratio reaches it; "met (median; worst pair
0.88)" says that some pair did not, so a re-run may miss it. The targets:
router_vs_raw >= 0.90, fenced_vs_unfenced_pg >= 0.90 and
fenced_vs_unfenced_sqlite >= 0.90 (fenced with deduplication on against
unfenced), dedupe_on_vs_off_pg >= 0.90 and dedupe_on_vs_off_sqlite >= 0.90
(W2/W2n at batch 256), produce_vs_raw >= 0.95, produce_file_vs_kcat >= 0.5
(W8/B5), router_vs_sarama >= 2.0, fenced_vs_unfenced_redis >= 0.90
(W2-redis/B3-redis, with --redis), kafka_sink_vs_gts >= 0.90
(W2-kafka/B3-kafka); fence_vs_unfenced_pg_b1 >= 0.90,
fence_vs_unfenced_pg_b16 >= 0.90 and fence_vs_unfenced_pg_b256 >= 0.95
(deduplication off: the same writes); keys_vs_serial >= 8 (W7/W3) and
keys_vs_serial_pg >= 4 (W7-pg/W3); kafka_sink_vs_gts_b4096
(W2-kafka-b4096/B3-kafka), dedupe_on_vs_off_pg_b1 and
dedupe_on_vs_off_sqlite_b1 (batch 1), worker_vs_raw_pg (W2u-pg/B3-pg) and
fence_in_worker_pg (W2n-pg/W2u-pg) are reported without a target. Two
latency targets take the median over W9's runs of each run's percentile:
send_p50 < 1ms and send_p99 < 5ms. Three CPU ratios, without a target,
compare CPU per record instead of throughput, the baseline's over the
worker's so that higher is better here too: router_vs_raw_cpu (B1 over
W1), router_vs_sarama_cpu (B2 over W1) and kafka_sink_vs_gts_cpu
(B3-kafka over W2-kafka). A run's CPU is this whole
process's user+system time while it ran, the embedded broker's included
(with --brokers, only the client side). The last line gives the median
ratios and latencies:

  bench: router_vs_raw=<W1/B1> fenced_vs_unfenced_pg=<W2/B3> fenced_vs_unfenced_sqlite=<W2/B3>
    dedupe_on_vs_off_pg=<W2/W2n> dedupe_on_vs_off_sqlite=<W2/W2n> dedupe_on_vs_off_pg_b1=<W2/W2n>
    dedupe_on_vs_off_sqlite_b1=<W2/W2n> fence_vs_unfenced_pg_b1=<W2n/B3> fence_vs_unfenced_pg_b16=<W2n/B3>
    fence_vs_unfenced_pg_b256=<W2n/B3> worker_vs_raw_pg=<W2u/B3> fence_in_worker_pg=<W2n/W2u>
    produce_vs_raw=<W4/B4> produce_file_vs_kcat=<W8/B5>
    router_vs_sarama=<W1/B2> fenced_vs_unfenced_redis=<W2/B3>
    kafka_sink_vs_gts=<W2-kafka/B3-kafka> kafka_sink_vs_gts_b4096=<W2-kafka-b4096/B3-kafka>
    keys_vs_serial=<W7/W3> keys_vs_serial_pg=<W7-pg/W3>
    router_vs_raw_cpu=<B1/W1 CPU> router_vs_sarama_cpu=<B2/W1 CPU>
    kafka_sink_vs_gts_cpu=<B3-kafka/W2-kafka CPU>
    send_p50=<W9 ms> send_p99=<W9 ms>

(one line).

--quick pre-loads fewer records, so group join and start-up weigh more and a
--quick run's ratios can differ from a full run's: they are indicative only
and decide no target (each target line says "indicative (--quick decides no
target)"). A ratio whose inputs were not run is n/a. A missed target does not make bench fail; a run that errors
does (after the report).`,
		Example: `  workrouter-lab bench --quick
  workrouter-lab bench --quick --only W1,B1
  workrouter-lab bench --only B3-sqlite,W2-sqlite,W2n-sqlite,W2-sqlite-b1,W2n-sqlite-b1
  workrouter-lab bench --repeats 9 --only B4,W4
  workrouter-lab bench --only B5,W8,W9
  workrouter-lab bench --only W3,W7
  workrouter-lab bench --only B3-kafka,W2-kafka
  workrouter-lab bench --postgres postgres://postgres@127.0.0.1:5432/test
  workrouter-lab bench --brokers kafka-1:9092 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if repeats < 0 {
				return fmt.Errorf("bench: --repeats %d is negative", repeats)
			}
			if repeats == 0 {
				repeats = bench.FullRepeats
				if cfg.Quick {
					repeats = bench.QuickRepeats
				}
			}
			entries, err := bench.Select(bench.All(repeats), only)
			if err != nil {
				return err
			}
			if len(entries) == 0 {
				return errors.New("bench: --only selects no workload")
			}
			if cfg.Records < 0 {
				return fmt.Errorf("bench: --records %d is negative", cfg.Records)
			}
			// W6 freezes a real `workrouter worker` process: this binary.
			if exe, err := os.Executable(); err == nil {
				cfg.Worker = cluster.Binary{Argv: []string{exe}}
			}
			ctx := cmd.Context()
			errOut := cmd.ErrOrStderr()
			fmt.Fprintf(errOut, "bench: pre-loading commands\n")
			env, cleanup, err := bench.Setup(ctx, cfg)
			if err != nil {
				return err
			}
			defer func() {
				if err := cleanup(); err != nil {
					fmt.Fprintf(errOut, "%v\n", err)
				}
			}()
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("bench: --cpuprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("bench: --cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			rows, runErr := bench.Run(ctx, env, entries, errOut)
			out := cmd.OutOrStdout()
			if asJSON {
				err = writeBenchJSON(cmd, rows, cfg.Quick, repeats)
			} else {
				fmt.Fprintf(out, "workrouter bench: %d records of %d bytes, %d partitions, %d keys, brokers %v\n",
					env.Records, env.Size, env.Partitions, env.Keys, env.Brokers)
				fmt.Fprintf(out, "%d interleaved %s per throughput row; records/s is the median, min–max over the runs\n",
					repeats, plural(repeats, "run", "runs"))
				if cfg.Quick {
					fmt.Fprintln(out, "--quick: the ratios are indicative only and decide no target")
				}
				fmt.Fprintln(out)
				err = bench.WriteReport(out, rows, cfg.Quick)
			}
			return errors.Join(runErr, err)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&cfg.Quick, "quick", false, "run the scaled-down set (300,000 pre-loaded commands); its ratios decide no target")
	fl.IntVar(&repeats, "repeats", 0, fmt.Sprintf("measured runs of each throughput workload and baseline, interleaved (default %d)", bench.FullRepeats))
	fl.StringSliceVar(&cfg.Brokers, "brokers", nil, "run against this cluster instead of an embedded broker")
	fl.StringVar(&cfg.PostgresDSN, "postgres", "", "PostgreSQL DSN for W2/B3 on PostgreSQL (skipped without it)")
	fl.StringVar(&cfg.RedisURL, "redis", "", "Redis URL (redis://HOST:PORT/DB) for W2/B3 on Redis (skipped without it)")
	fl.StringSliceVar(&only, "only", nil, "run only these workloads, e.g. W1,B1 (default: all)")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the measured workloads (after the pre-load) to this file, for go tool pprof")
	fl.BoolVar(&asJSON, "json", false, "print the results as one JSON object instead of the table")
	fl.IntVar(&cfg.Records, "records", 0, "pre-loaded commands (default 1,000,000, or 300,000 with --quick)")
	_ = fl.MarkHidden("records")
	return cmd
}

// writeBenchJSON writes every row with its runs, the ratios with their
// per-pair spread and verdicts, and the final line as one JSON object.
func writeBenchJSON(cmd *cobra.Command, rows []bench.Row, quick bool, repeats int) error {
	ratios, lats := bench.Ratios(rows), bench.Latencies(rows)
	doc := benchJSON{Quick: quick, Repeats: repeats, Ratios: map[string]any{}, Line: bench.FinalLine(ratios, lats...),
		Results: []benchJSONResult{}, Targets: []benchJSONTarget{}, Latencies: []benchJSONLatency{}}
	for _, l := range lats {
		s := l.Spread()
		j := benchJSONLatency{Name: l.Name, Row: l.Row, TargetMs: float64(l.Target) / float64(time.Millisecond),
			RunsMs: []float64{}, Met: !quick && l.Met(), Verdict: l.Verdict(quick)}
		for _, d := range l.Runs {
			j.RunsMs = append(j.RunsMs, float64(d)/float64(time.Millisecond))
		}
		if s.N > 0 {
			j.MedianMs, j.MinMs, j.MaxMs = &s.Median, &s.Min, &s.Max
		}
		doc.Latencies = append(doc.Latencies, j)
	}
	for _, r := range ratios {
		t := benchJSONTarget{Name: r.Name, Num: r.Num, Den: r.Den, Target: r.Target, CPU: r.CPU, Pairs: r.Pairs,
			Met: !quick && r.Met(), EveryPairMet: !quick && r.EveryPairMet(), Verdict: r.Verdict(quick)}
		if t.Pairs == nil {
			t.Pairs = []float64{}
		}
		if r.OK {
			doc.Ratios[r.Name] = r.Value
			t.Ratio = &r.Value
		} else {
			doc.Ratios[r.Name] = nil
		}
		if ps := r.PairSpread(); ps.N > 0 {
			t.PairMin, t.PairMax = &ps.Min, &ps.Max
		}
		doc.Targets = append(doc.Targets, t)
	}
	for _, row := range rows {
		s, ok := row.Summary()
		tp := row.Throughput()
		res := benchJSONResult{
			ID: row.ID, Name: s.Name, Repeats: row.Repeats, Measured: tp.N, Runs: []benchJSONRun{},
			RecordsPerS: tp.Median, RecordsPerSMin: tp.Min, RecordsPerSMax: tp.Max,
			PeakRSSMiB: mib(s.PeakRSS), Problems: row.Problems(),
		}
		if ok {
			res.Records, res.Seconds, res.CPUMicrosRec, res.Extra = s.Records, s.Elapsed.Seconds(), micros(s), s.Extra
		} else {
			res.Skipped = "not run"
			if len(row.Runs) > 0 {
				res.Skipped = row.Runs[0].Skipped
			}
		}
		for _, r := range row.Runs {
			res.Runs = append(res.Runs, benchJSONRun{Records: r.Records, Seconds: r.Elapsed.Seconds(),
				RecordsPerS: r.Throughput(), CPUMicrosRec: micros(r), Extra: r.Extra, Skipped: r.Skipped})
		}
		doc.Results = append(doc.Results, res)
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func micros(r bench.Result) float64 { return float64(r.CPUPerRecord()) / float64(time.Microsecond) }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
