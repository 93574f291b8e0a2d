package timeline

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/workrouter/workrouter/cmd/internal/chaos"
	"github.com/workrouter/workrouter/cmd/internal/demo"
)

// FromDemo is the report of a demo run: its summary, the checker's
// counts and its trace. Call it after demo.Run returned, from any
// goroutine.
func FromDemo(s demo.Summary) Report {
	r := Report{Title: "workrouter demo", Final: s.Line(), OK: s.OK(), Invariants: s.Invariants, Notes: s.Violations,
		Trace: s.Trace, Lines: s.Timeline}
	r.Settings = settings(s.Trace.Topic, s.Trace.Partitions, len(s.Trace.Workers))
	kinds := make([]string, 0, len(s.Faults))
	for k := range s.Faults {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		r.Faults = append(r.Faults, Count{Kind: k, N: s.Faults[k]})
	}
	n := strconv.Itoa
	r.Figures = []Figure{
		{"produced", "commands produced", n(s.Produced)},
		{"applied", "commands applied (sink postings)", n(s.Applied)},
		{"stale_rejected", "stale writes rejected", n(s.StaleRejected)},
		{"stale_accepted", "stale writes accepted", n(s.StaleAccepted)},
		{"duplicates", "duplicates", n(s.Duplicates)},
		{"lost", "lost", n(s.Lost)},
		{"order_violations", "order violations", n(s.OrderViolations)},
		{"not_converged", "partitions whose lag did not return to zero", n(s.NotConverged)},
	}
	return r
}

// FromChaos is the report of a chaos run: its result, the checker's
// counts and its trace. Call it after chaos.Run returned, from any
// goroutine.
func FromChaos(res chaos.Result) Report {
	r := Report{Title: "workrouter chaos", Final: res.Line(), OK: res.OK(), Invariants: res.Violations, Notes: res.Notes,
		Trace: res.Trace}
	r.Settings = fmt.Sprintf("seed %d, protocol %s, %d lane(s) per partition, %s", res.Seed, res.Protocol, res.KeyConcurrency,
		settings(res.Trace.Topic, res.Trace.Partitions, len(res.Trace.Workers)))
	for _, k := range chaos.Kinds() {
		c := Count{Kind: string(k), N: res.Faults[k]}
		if !slices.Contains(res.Requested, k) {
			c.N = -1
		}
		r.Faults = append(r.Faults, c)
	}
	dead := 0
	for _, c := range res.DeadLetters {
		dead += c
	}
	n := strconv.Itoa
	rec := "never"
	if res.Violations.V == 0 || res.Recover > 0 {
		rec = res.Recover.String()
	}
	r.Figures = []Figure{
		{"commands", "commands produced (acknowledged)", n(res.Produced)},
		{"applied", "commands applied (sink postings)", n(res.Applied)},
		{"stale_rejected", "stale writes rejected", n(res.StaleRejected)},
		{"dead_letters", "dead letters in the sink", n(dead)},
		{"gap_dead_letters", "dead letters right after an offset gap", n(res.DeadLettersAfterGap)},
		{"duplicates_skipped", "duplicates skipped", n(res.DuplicatesSkipped)},
		{"v_samples", "V samples compared", n(res.VSamples)},
		{"recover", "time to recover after the last fault", rec},
		{"worker_errors", "worker errors reported", n(res.WorkerErrors)},
		{"crashes", "workers that exited by themselves", n(res.Crashes)},
	}
	return r
}

func settings(topic string, partitions int32, workers int) string {
	return fmt.Sprintf("topic %s with %d partitions, %d worker processes", topic, partitions, workers)
}
