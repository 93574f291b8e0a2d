package chaos

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/internal/invariants"
)

// Result is the outcome of a run: faults injected, figures read from the
// sink and the workers' logs, and violations found by the checker.
//
// Run fills it on its own goroutine; read it after Run returned.
type Result struct {
	// Seed, Protocol and KeyConcurrency (the workers' lanes per
	// partition) are the run's.
	Seed           uint64 `json:"seed"`
	Protocol       string `json:"protocol"`
	KeyConcurrency int    `json:"key_concurrency"`
	// Requested are the fault kinds the run was asked to inject.
	Requested []Kind `json:"requested"`
	// Checked says the run reached its check of the sink's records: the
	// counts below are the run's. A run that stopped before (a setup
	// error, a cancel) has only zeros to sum up, and its error says what
	// happened.
	Checked bool `json:"-"`
	// Excluded are the kinds that do not apply where the run went, and
	// why (see Excluded).
	Excluded map[Kind]string `json:"excluded,omitempty"`
	// KafkaNodes is the number of Apache Kafka nodes the run started (0
	// on the embedded broker or an external cluster).
	KafkaNodes int `json:"kafka_nodes,omitempty"`
	// NodeFaults are the faults of Kafka nodes, in order, those that did
	// not move what they had to move among them (not counted in Faults).
	NodeFaults []NodeFault `json:"node_faults,omitempty"`
	// Faults counts, per kind, the faults that really happened (with
	// evidence: a stopped process, a held heartbeat, a log line…).
	Faults map[Kind]int `json:"faults"`
	// Sent is how many commands were produced through the router;
	// Produced how many commands the broker acknowledged that must be
	// applied: those of the router, and the good commands the poison
	// producer wrote in committed transactions and after them.
	Sent     int `json:"sent"`
	Produced int `json:"produced"`
	// Applied is the number of postings in the sink.
	Applied int `json:"applied"`
	// StaleRejected counts fenced claims and applies the workers logged.
	StaleRejected int `json:"stale_rejected"`
	// UnmappedDials counts the broker addresses the workers dialled
	// outside their network links (with NetKinds): connections a broker
	// partition would not have cut.
	UnmappedDials int                   `json:"unmapped_dials,omitempty"`
	Violations    invariants.Violations `json:"violations"`
	// Recover is the time from the later of the last fault's end and the
	// last command produced until lag was zero with every acknowledged
	// command applied (zero if never: see Violations.V).
	Recover time.Duration `json:"recover_ns"`
	// Watched counts the pauses, kills, heartbeat faults and broker
	// connection stalls that began while their victim held partitions;
	// Takeovers holds, for those whose every partition was claimed again
	// at a newer epoch before the run ended, the time that took from the
	// fault's start (in the order they completed).
	Watched   int             `json:"watched"`
	Takeovers []time.Duration `json:"takeovers_ns"`
	// WorkerErrors counts the errors the workers reported (a worker that
	// stopped by itself, a malformed event); informational, listed in the
	// timeline.
	WorkerErrors int `json:"worker_errors"`
	// Crashes counts worker processes that exited without the harness
	// ending them; informational, listed in the timeline.
	Crashes int `json:"crashes"`
	// Poisoned counts, per kind, the poison records the broker
	// acknowledged (those of a transaction if it committed);
	// PoisonUnconfirmed counts those sent without an acknowledgement or in
	// a transaction whose outcome is unknown. PoisonTxn counts the poison
	// records of committed transactions, Aborted the records of aborted
	// transactions (none may be applied or dead-lettered).
	Poisoned          map[cluster.PoisonKind]int `json:"poisoned,omitempty"`
	PoisonUnconfirmed int                        `json:"poison_unconfirmed,omitempty"`
	PoisonTxn         int                        `json:"poison_txn,omitempty"`
	Aborted           int                        `json:"aborted,omitempty"`
	// DeadLetters counts the sink's dead letters by reason;
	// DeadLettersAfterGap those of a record right after an offset without
	// a record (a transaction marker, an aborted record), which the worker
	// reached with its checkpoint below the record (cluster.LogScan).
	DeadLetters         map[string]int `json:"dead_letters,omitempty"`
	DeadLettersAfterGap int            `json:"dead_letters_after_gap,omitempty"`
	// VSamples counts V's comparisons, taken every 1–2 s while the run went
	// on, of a partition's committed offset with the sink's NextOffset on
	// the same log (invariants.Sample); VSkipped those not compared (the
	// two referred to different logs, or the topic's ID changed during the
	// reading), VReadsFailed the readings that failed (the broker down
	// during a restart).
	VSamples     int `json:"v_samples"`
	VSkipped     int `json:"v_skipped,omitempty"`
	VReadsFailed int `json:"v_reads_failed,omitempty"`
	// Restarts are the broker restarts, in order.
	Restarts []Restart `json:"restarts,omitempty"`
	// LogCopies counts the records of the log that repeat an earlier
	// record's command ID (cluster.LogScan.Copies): the resend fault's
	// copies, and batches the broker wrote twice (a producer's retry
	// across a broker restart). The workers must skip each as a
	// duplicate: a second posting of a command ID is X.
	LogCopies int `json:"log_copies,omitempty"`
	// Resent counts the copies of acknowledged commands the resend fault
	// had acknowledged (cluster.Producer.Resend).
	Resent int `json:"resent,omitempty"`
	// DuplicatesSkipped counts the records the workers skipped because
	// their command ID was applied already, as the sink counted them in
	// the fenced units that skipped them (sink.Fence.Duplicates, summed
	// over the group's partitions). Every copy in the log must be skipped
	// once, so it must equal LogCopies. DuplicateEvents counts the
	// workers' duplicate_skipped events (a worker killed between a commit
	// and its events leaves a few out).
	DuplicatesSkipped int `json:"duplicates_skipped"`
	DuplicateEvents   int `json:"duplicate_events"`
	// Notes are examples of the violations found.
	Notes []string `json:"notes,omitempty"`
	// Trace is the run's typed events and fault spans (one per fault
	// counted in Faults), for its report (package timeline); not in the
	// JSON result.
	Trace cluster.Trace `json:"-"`
}

// total sums a map's counts.
func total[K comparable](m map[K]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// restartsOK reports whether every broker restart lost nothing
// acknowledged and saw every worker come back.
func (r Result) restartsOK() bool {
	for _, rs := range r.Restarts {
		if rs.Lost > 0 || rs.Back < rs.Workers {
			return false
		}
	}
	return true
}

// TotalFaults is the number of faults that happened.
func (r Result) TotalFaults() int {
	n := 0
	for _, c := range r.Faults {
		n += c
	}
	return n
}

// Missing returns the requested kinds that never fired.
func (r Result) Missing() []Kind {
	var out []Kind
	for _, k := range r.Requested {
		if r.Faults[k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

// needsStale reports whether the run must show a rejected stale write.
func (r Result) needsStale() bool {
	return slices.Contains(r.Requested, Pause) || slices.Contains(r.Requested, Heartbeat) || slices.Contains(r.Requested, PartitionBroker)
}

// Failures says why the run did not pass, one reason a string (none when
// OK).
func (r Result) Failures() []string {
	var out []string
	if v := r.Violations; v.Total() > 0 {
		out = append(out, fmt.Sprintf("%d violations (F %d, L %d, O %d, X %d, V %d, D %d)", v.Total(), v.F, v.L, v.O, v.X, v.V, v.D))
	}
	if m := r.Missing(); len(m) > 0 {
		out = append(out, fmt.Sprintf("kinds that never fired: %v", m))
	}
	if r.needsStale() && r.StaleRejected == 0 {
		out = append(out, "no stale write was rejected although pauses, heartbeat faults or broker partitions ran")
	}
	if r.UnmappedDials > 0 {
		out = append(out, fmt.Sprintf("workers dialled %d broker addresses outside their network links: a partition did not cut every connection", r.UnmappedDials))
	}
	var lost int64
	back, of := 0, 0
	for _, rs := range r.Restarts {
		lost, back, of = lost+rs.Lost, back+rs.Back, of+rs.Workers
	}
	if lost > 0 {
		out = append(out, fmt.Sprintf("broker restarts lost %d acknowledged records", lost))
	}
	if back < of {
		out = append(out, fmt.Sprintf("%d of %d workers did not come back after a broker restart", of-back, of))
	}
	if r.VSamples == 0 {
		out = append(out, "V was never sampled while the run went on (no committed offset compared with the sink's NextOffset)")
	}
	if r.needsGap() && r.DeadLettersAfterGap == 0 {
		out = append(out, "poison ran, but no poison record was dead-lettered right after an offset gap")
	}
	if r.needsDuplicates() && r.DuplicatesSkipped == 0 {
		out = append(out, "resend ran, but no duplicate was skipped")
	}
	if r.DuplicatesSkipped != r.LogCopies {
		out = append(out, fmt.Sprintf("the sink counted %d duplicates skipped, but the log holds %d records that repeat a command ID", r.DuplicatesSkipped, r.LogCopies))
	}
	return out
}

// needsDuplicates reports whether the run must show a skipped duplicate:
// resend faults happened.
func (r Result) needsDuplicates() bool { return r.Faults[Resend] > 0 }

// needsGap reports whether the run must show a poison record
// dead-lettered right after an offset gap: poison faults happened.
func (r Result) needsGap() bool { return r.Faults[Poison] > 0 }

// OK reports whether the run passed: no violation, every requested kind
// fired, a stale write rejected if pauses or heartbeat faults ran, every
// broker restart lost nothing acknowledged and saw every worker come back,
// V sampled at least once while the run went on, if poison faults ran, a
// poison record dead-lettered right after an offset gap, if resend faults
// ran, a duplicate skipped, and as many duplicates skipped as the log holds
// copies of commands.
func (r Result) OK() bool { return len(r.Failures()) == 0 }

// Line is the run's final line.
func (r Result) Line() string {
	kinds := 0
	for _, c := range r.Faults {
		if c > 0 {
			kinds++
		}
	}
	return fmt.Sprintf("chaos: faults=%d kinds=%d commands=%d stale_rejected=%d dead_letters=%d gap_dead_letters=%d duplicates_skipped=%d v_samples=%d violations=%d",
		r.TotalFaults(), kinds, r.Produced, r.StaleRejected, total(r.DeadLetters), r.DeadLettersAfterGap, r.DuplicatesSkipped, r.VSamples, r.Violations.Total())
}

// Table is the run's figures as an aligned text table.
func (r Result) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "fault\tinjected\n")
	for _, k := range Kinds() {
		if slices.Contains(r.Requested, k) {
			fmt.Fprintf(tw, "%s\t%d\n", k, r.Faults[k])
		} else if why, ok := r.Excluded[k]; ok {
			fmt.Fprintf(tw, "%s\t- (does not apply here: it %s)\n", k, why)
		} else {
			fmt.Fprintf(tw, "%s\t-\n", k)
		}
	}
	fmt.Fprintf(tw, "total\t%d\n", r.TotalFaults())
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "lanes per partition (--key-concurrency)\t%d\n", r.KeyConcurrency)
	fmt.Fprintf(tw, "commands produced (acknowledged)\t%d\n", r.Produced)
	fmt.Fprintf(tw, "commands applied (sink postings)\t%d\n", r.Applied)
	fmt.Fprintf(tw, "stale writes rejected\t%d\n", r.StaleRejected)
	v := r.Violations
	fmt.Fprintf(tw, "violations F (stale write accepted)\t%d\n", v.F)
	fmt.Fprintf(tw, "violations L (acknowledged, never applied)\t%d\n", v.L)
	fmt.Fprintf(tw, "violations O (per-key order)\t%d\n", v.O)
	fmt.Fprintf(tw, "violations X (a command ID applied twice, balance)\t%d\n", v.X)
	fmt.Fprintf(tw, "violations V (lag not back to zero, committed offset ahead of NextOffset)\t%d\n", v.V)
	fmt.Fprintf(tw, "violations D (a record without exactly one dead letter or effect)\t%d\n", v.D)
	rec := "never"
	if v.V == 0 || r.Recover > 0 { // V also counts samples: lag may have returned to zero
		rec = r.Recover.String()
	}
	fmt.Fprintf(tw, "V samples: compared / skipped / readings failed\t%d / %d / %d\n", r.VSamples, r.VSkipped, r.VReadsFailed)
	fmt.Fprintf(tw, "time to recover after the last fault\t%s\n", rec)
	fmt.Fprintf(tw, "takeover after a fault (p50 / max)\t%s\n", r.takeoverSummary())
	fmt.Fprintf(tw, "poison records acknowledged\t%s\n", counts(r.Poisoned))
	if r.PoisonUnconfirmed > 0 {
		fmt.Fprintf(tw, "poison records not acknowledged\t%d\n", r.PoisonUnconfirmed)
	}
	fmt.Fprintf(tw, "poison records in committed transactions\t%d\n", r.PoisonTxn)
	fmt.Fprintf(tw, "records of aborted transactions\t%d\n", r.Aborted)
	fmt.Fprintf(tw, "dead letters in the sink (by reason)\t%s\n", counts(r.DeadLetters))
	fmt.Fprintf(tw, "dead letters right after an offset gap\t%d\n", r.DeadLettersAfterGap)
	if slices.Contains(r.Requested, Resend) {
		fmt.Fprintf(tw, "acknowledged commands re-sent with their IDs\t%d\n", r.Resent)
	}
	fmt.Fprintf(tw, "records in the log repeating a command ID\t%d\n", r.LogCopies)
	fmt.Fprintf(tw, "duplicates skipped (sink's count / workers' events)\t%d / %d\n", r.DuplicatesSkipped, r.DuplicateEvents)
	if len(r.Restarts) > 0 {
		fmt.Fprintf(tw, "broker restarts: down, p50 / max\t%s\n", r.restartSummary(func(rs Restart) time.Duration { return rs.Down }))
		fmt.Fprintf(tw, "broker restarts: recovery, p50 / max\t%s\n", r.restartSummary(func(rs Restart) time.Duration { return rs.Recovery }))
		back, of := 0, 0
		var lost int64
		for _, rs := range r.Restarts {
			back, of, lost = back+rs.Back, of+rs.Workers, lost+rs.Lost
		}
		fmt.Fprintf(tw, "broker restarts: workers back\t%d of %d\n", back, of)
		fmt.Fprintf(tw, "broker restarts: acknowledged records lost\t%d\n", lost)
	}
	if len(r.NodeFaults) > 0 {
		fmt.Fprintf(tw, "Kafka node faults: moved after, p50 / max\t%s\n", nodeSummary(r.NodeFaults, func(f NodeFault) time.Duration { return f.Moved }))
		fmt.Fprintf(tw, "Kafka node faults: back in sync after, p50 / max\t%s\n", nodeSummary(r.NodeFaults, func(f NodeFault) time.Duration { return f.Back }))
	}
	fmt.Fprintf(tw, "worker errors reported (not fenced)\t%d\n", r.WorkerErrors)
	fmt.Fprintf(tw, "workers that exited by themselves\t%d\n", r.Crashes)
	tw.Flush()
	if m := r.Missing(); len(m) > 0 {
		fmt.Fprintf(&b, "\nkinds that never fired: %v\n", m)
	}
	if r.needsStale() && r.StaleRejected == 0 {
		b.WriteString("\nno stale write was rejected although pauses, heartbeat faults or broker partitions ran\n")
	}
	if !r.restartsOK() {
		b.WriteString("\na broker restart lost acknowledged records or not every worker came back\n")
	}
	if r.VSamples == 0 {
		b.WriteString("\nV was never sampled while the run went on\n")
	}
	if r.needsGap() && r.DeadLettersAfterGap == 0 {
		b.WriteString("\npoison ran, but no poison record was dead-lettered right after an offset gap\n")
	}
	if r.needsDuplicates() && r.DuplicatesSkipped == 0 {
		b.WriteString("\nresend ran, but no duplicate was skipped\n")
	}
	if r.DuplicatesSkipped != r.LogCopies {
		fmt.Fprintf(&b, "\nthe sink counted %d duplicates skipped, but the log holds %d records that repeat a command ID\n", r.DuplicatesSkipped, r.LogCopies)
	}
	return b.String()
}

// takeoverSummary formats Takeovers as "p50 / max (n of m faults)".
func (r Result) takeoverSummary() string {
	if len(r.Takeovers) == 0 {
		return fmt.Sprintf("- (0 of %d faults)", r.Watched)
	}
	ts := slices.Clone(r.Takeovers)
	slices.Sort(ts)
	return fmt.Sprintf("%s / %s (%d of %d faults)", ts[(len(ts)-1)/2].Round(time.Millisecond), ts[len(ts)-1].Round(time.Millisecond), len(ts), r.Watched)
}

// counts formats a map of counts as "total (k1 n1, k2 n2)", keys sorted.
func counts[K ~string](m map[K]int) string {
	if len(m) == 0 {
		return "0"
	}
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return fmt.Sprintf("%d (%s)", total(m), strings.Join(parts, ", "))
}

// restartSummary formats one duration of the restarts that recovered as
// "p50 / max (n of m)".
func (r Result) restartSummary(of func(Restart) time.Duration) string {
	var ds []time.Duration
	for _, rs := range r.Restarts {
		if d := of(rs); d > 0 {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return fmt.Sprintf("- (0 of %d)", len(r.Restarts))
	}
	slices.Sort(ds)
	return fmt.Sprintf("%s / %s (%d of %d)", ds[(len(ds)-1)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds), len(r.Restarts))
}
