package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/workrouter/workrouter/cmd/internal/bench"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// benchJSON is `workrouter bench --json` output.
type benchJSON struct {
	Results []benchJSONResult `json:"results"`
	Ratios  map[string]any    `json:"ratios"` // name → ratio, or null if not measured
	Line    string            `json:"line"`
}

type benchJSONResult struct {
	ID           string  `json:"id"`
	Name         string  `json:"name"`
	Records      int     `json:"records"`
	Seconds      float64 `json:"seconds"`
	RecordsPerS  float64 `json:"records_per_s"`
	CPUMicrosRec float64 `json:"cpu_us_per_record"`
	PeakRSSMiB   float64 `json:"peak_rss_mib"`
	Extra        string  `json:"extra,omitempty"`
	Skipped      string  `json:"skipped,omitempty"`
}

func newBenchCmd() *cobra.Command {
	var (
		cfg    bench.SetupConfig
		only   []string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure workrouter against raw franz-go, Sarama and unfenced writes in one run",
		Long: `bench pre-loads a topic of 100-byte keyed commands over 12 partitions
(1,000,000 commands; 300,000 with --quick) on an embedded broker (or --brokers),
then runs each workload and its baseline in this process:

  B0 raw kgo PollFetches loop, no work      W1 worker, no-op handler, memory sink
  B1 raw kgo goroutine per partition        B2 IBM/sarama ConsumerGroup
  W3 worker, 1ms simulated I/O per record   B3/W2 unfenced/fenced SQLite and PostgreSQL upserts
  B4 raw kgo produce                        W4 produce through the router
  W5 end-to-end latency at half W1's rate   W6 pause-to-takeover

It prints a table (throughput, CPU per record, peak RSS), whether each target
ratio was met, and a final line of throughput ratios:

  bench: router_vs_raw=<W1/B1> fenced_vs_unfenced_pg=<W2/B3> fenced_vs_unfenced_sqlite=<W2/B3> produce_vs_raw=<W4/B4> router_vs_sarama=<W1/B2>

A ratio whose inputs were not run is n/a. A missed target does not make bench
fail; a workload that errors does (after the report).`,
		Example: `  workrouter bench --quick
  workrouter bench --quick --only W1,B1
  workrouter bench --postgres postgres://postgres@127.0.0.1:5432/test
  workrouter bench --brokers kafka-1:9092 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			repeats := bench.FullRepeats
			if cfg.Quick {
				repeats = bench.QuickRepeats
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
			defer cleanup()
			results, runErr := bench.Run(ctx, env, entries, errOut)
			out := cmd.OutOrStdout()
			if asJSON {
				err = writeBenchJSON(cmd, results)
			} else {
				fmt.Fprintf(out, "workrouter bench: %d records of %d bytes, %d partitions, %d keys, brokers %v\n\n",
					env.Records, env.Size, env.Partitions, env.Keys, env.Brokers)
				err = bench.WriteReport(out, results)
			}
			return errors.Join(runErr, err)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&cfg.Quick, "quick", false, "run the scaled-down set (300,000 pre-loaded commands)")
	fl.StringSliceVar(&cfg.Brokers, "brokers", nil, "run against this cluster instead of an embedded broker")
	fl.StringVar(&cfg.PostgresDSN, "postgres", "", "PostgreSQL DSN for W2/B3 on PostgreSQL (skipped without it)")
	fl.StringSliceVar(&only, "only", nil, "run only these workloads, e.g. W1,B1 (default: all)")
	fl.BoolVar(&asJSON, "json", false, "print the results as one JSON object instead of the table")
	fl.IntVar(&cfg.Records, "records", 0, "pre-loaded commands (default 1,000,000, or 300,000 with --quick)")
	_ = fl.MarkHidden("records")
	return cmd
}

// writeBenchJSON writes results, ratios and the final line as one JSON
// object.
func writeBenchJSON(cmd *cobra.Command, results []bench.Result) error {
	ratios := bench.Ratios(results)
	doc := benchJSON{Ratios: map[string]any{}, Line: bench.FinalLine(ratios), Results: []benchJSONResult{}}
	for _, r := range ratios {
		if r.OK {
			doc.Ratios[r.Name] = r.Value
		} else {
			doc.Ratios[r.Name] = nil
		}
	}
	for _, r := range results {
		doc.Results = append(doc.Results, benchJSONResult{
			ID: r.ID, Name: r.Name, Records: r.Records, Seconds: r.Elapsed.Seconds(),
			RecordsPerS: r.Throughput(), CPUMicrosRec: float64(r.CPUPerRecord()) / float64(time.Microsecond),
			PeakRSSMiB: float64(r.PeakRSS) / (1 << 20), Extra: r.Extra, Skipped: r.Skipped,
		})
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
