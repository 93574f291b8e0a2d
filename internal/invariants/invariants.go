// Package invariants is workrouter's one checker of the invariants of
// docs/design.md#invariants, computed from what a sink recorded: the
// writes it applied (with the token each was applied under), its history
// of claims and resets, the records the broker acknowledged, the dead
// letters, and where each partition's checkpoint ended. The demo, the chaos
// harness, the process-level fault tests and the sinks' own tests (sink/memory's
// Verify) all call Check, so that every one of them judges a run by the
// same rules as the sink itself (epochs.Token.CanClaim).
//
//   - F: no write with a stale token landed after a newer claim: a write at
//     or past a claim's NextOffset (before the next reset) must carry a
//     token that may take over from the claim's — the claim's own, or a
//     newer one (a higher epoch, or the same epoch and the same member).
//     A claim of a gapped checkpoint (fenceadmin.Entry.Done) does not
//     judge the writes at offsets in its done spans: lanes of an earlier
//     tenure applied those before it (docs/design.md#gaps); every other
//     offset past its NextOffset, below or above the spans, is its own.
//     Also: every write carries the token of a claim accepted at or before
//     its offset, consecutive claims never go backwards without a reset
//     in between, and after a reset every claim was proven
//     (fenceadmin.Entry.Proven), but the holder's own re-claim.
//   - L: every acknowledged command (not marked poison) was applied.
//   - O: per key, in application order (Write.Order when the caller knows
//     it, else offset order), writes were applied in produce order and in
//     offset order, strictly: Seq grows, and so do the offsets of one
//     partition's log. Lanes (consumer.Config.KeyConcurrency) apply a
//     partition's keys out of offset order across keys, never within one.
//   - X: no command ID was applied twice, strict: two writes with one
//     Write.ID are a violation whatever their positions (a command that
//     entered the log twice must be skipped as a duplicate the second
//     time, docs/design.md#command-ids); plus any extra mismatches the
//     caller found, such as ledger balances that do not match postings.
//   - V: the sink's checkpoint and Kafka's committed offset reached the
//     end of every partition (lag returned to zero after the faults), and
//     no committed offset was ahead of the sink's NextOffset on the same
//     log: neither at the end nor in any sample taken while the system ran
//     (Sample).
//   - D: every record that was skipped (the acknowledged records marked
//     poison) has exactly one dead-letter row, and nothing else has one;
//     no record has both a dead-letter row and an effect row; a record of
//     an aborted transaction has neither. Offsets without a record
//     (transaction markers, aborted records) are normal: D and L judge the
//     records the caller names, never the offsets between them.
//
// It is internal: its input types follow the harnesses' needs.
package invariants

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// Write is one record whose effects a sink applied, as the sink recorded
// it.
type Write struct {
	// Log is the identity of the log the record was read from (Kafka's
	// topic ID); empty if unknown. Positions are unique per log only.
	Log       string
	Partition int32
	Offset    int64
	// Epoch and Member are the token the write was applied under.
	Epoch  int32
	Member string
	// ID identifies the command, for X and L; empty means the record's
	// position (partition/offset).
	ID string
	// Key and Seq give the produce order per key, for O; an empty Key
	// leaves the write out of O.
	Key string
	Seq int64
	// Order is the order the sink applied the write in, if known (for
	// O: a posting row's id); when every Order is zero, writes are taken
	// in (partition, log, offset) order — logs in the order the
	// partition's history first names them — which is the application
	// order of one partition without lanes, and per key with them.
	Order int64
}

// Acked is a record the broker acknowledged.
type Acked struct {
	ID        string
	Partition int32
	Offset    int64
	// Poison marks a record that must be dead-lettered, not applied
	// (a record that is not a command, or that its handler refuses for
	// good).
	Poison bool
}

// DeadLetter is one dead-letter row of a sink.
type DeadLetter struct {
	ID string
	// Log is the identity of the log the record was read from; empty if
	// unknown (it then matches any log).
	Log       string
	Partition int32
	Offset    int64
}

// Position is a record's place: its log (empty if unknown), partition and
// offset.
type Position struct {
	Log       string
	Partition int32
	Offset    int64
}

// Sample is one observation of a partition, taken while the system ran:
// Kafka's committed offset, read first, and then the sink's NextOffset.
// In that order a commit or an Apply between the two reads can only make
// Next larger (a worker commits an offset only after the sink applied up
// to it, and NextOffset never goes back on one log without an admin
// reset), so Committed > Next is a violation (V) and never a race of the
// reads. The two are compared only when they may refer to the same log.
type Sample struct {
	// At is when the sample was taken.
	At        time.Time
	Partition int32
	Committed int64
	Next      int64
	// CommittedLog is the topic's ID while the committed offset was read,
	// NextLog the log the sink's NextOffset refers to (the fence's topic
	// ID); empty if unknown, which matches any log.
	CommittedLog, NextLog string
}

// Input is what Check reads, for one group and topic.
type Input struct {
	Writes []Write
	// History is each partition's history of accepted claims and resets,
	// in order (fenceadmin.Historian). A partition without history is not
	// checked for F.
	History map[int32][]fenceadmin.Entry
	// Acked are the records the broker acknowledged (for L and D); nil
	// skips L and D.
	Acked []Acked
	// DeadLetters are the sink's dead-letter rows (for D).
	DeadLetters []DeadLetter
	// Aborted are the records written in transactions that were aborted
	// (for D): they are not acknowledged (so L does not expect them), and
	// none may have an effect row or a dead-letter row.
	Aborted []Position
	// Ends are the partitions' end offsets, Checkpoints the sink's
	// NextOffset and Committed Kafka's committed offset per partition,
	// for V; a partition missing from Ends is not checked for lag. A
	// committed offset ahead of the partition's checkpoint is a violation
	// too: read Committed before Checkpoints (see Sample).
	Ends, Checkpoints, Committed map[int32]int64
	// CheckpointLogs is the log each checkpoint refers to (the fence's
	// topic ID) and CommittedLog the topic's ID when Committed was read;
	// a committed offset is compared with a checkpoint only when the two
	// may be the same log (an empty or missing one is unknown and matches
	// any).
	CheckpointLogs map[int32]string
	CommittedLog   string
	// Samples are the observations of committed offsets and NextOffsets
	// taken while the system ran (V).
	Samples []Sample
	// NotConverged reports that the run's wait for lag zero timed out
	// (V, at least 1).
	NotConverged bool
	// Temporal reports that the writes' Order and the history entries'
	// Seq are positions in one sequence, the sink's own log of decisions
	// (sink/memory keeps one). F is then checked as the sink decides,
	// write by write: a write must carry exactly the token of the latest
	// claim since the last reset. Without it F is checked from offsets:
	// see the package documentation.
	Temporal bool
	// ExtraX counts X violations the caller found itself (ledger balances
	// that do not match their postings), described by ExtraXNote.
	ExtraX     int
	ExtraXNote string
}

// Violations counts the violations of each invariant.
type Violations struct {
	F int `json:"F"`
	L int `json:"L"`
	O int `json:"O"`
	X int `json:"X"`
	V int `json:"V"`
	D int `json:"D"`
}

// Total is the sum of all violations.
func (v Violations) Total() int { return v.F + v.L + v.O + v.X + v.V + v.D }

// Finding is one violation.
type Finding struct {
	// Invariant is "F", "L", "O", "X", "V" or "D".
	Invariant string
	Partition int32
	Offset    int64
	// Order is the offending write's Order, when it is about a write.
	Order int64
	// At is when the offending Sample was taken, when it is about one.
	At time.Time
	// Detail describes it.
	Detail string
}

// String returns "F: detail".
func (f Finding) String() string { return f.Invariant + ": " + f.Detail }

// Report is Check's result.
type Report struct {
	Violations
	// Findings lists every violation, by invariant (F, L, O, X, V, D)
	// and then in the order found.
	Findings []Finding
	// Samples counts the Input's samples that compared a committed offset
	// with a NextOffset on the same log; SamplesSkipped those that were
	// not compared because the two referred to different logs.
	Samples, SamplesSkipped int
}

// Notes returns at most n findings as strings.
func (r Report) Notes(n int) []string {
	var out []string
	for _, f := range r.Findings[:min(n, len(r.Findings))] {
		out = append(out, f.String())
	}
	return out
}

func writeID(w Write) string {
	if w.ID != "" {
		return w.ID
	}
	id := strconv.Itoa(int(w.Partition)) + "/" + strconv.FormatInt(w.Offset, 10)
	if w.Log != "" {
		id = w.Log + "/" + id
	}
	return id
}

// sameLog reports whether two log identities may be the same log (an
// empty one is unknown and matches any).
func sameLog(a, b string) bool { return a == "" || b == "" || a == b }

func (w Write) token(h epochs.Token) epochs.Token {
	return epochs.Token{Group: h.Group, Topic: h.Topic, Partition: h.Partition, Epoch: w.Epoch, Member: w.Member}
}

// claimEra is an accepted claim and the offset its era ends at: the
// NextOffset of the first reset after it (writes at or past it belong to a
// later era, except those in the reset's done spans, which lanes of this
// era or an earlier one applied before the reset), or -1 if none.
type claimEra struct {
	e   fenceadmin.Entry
	end int64
	// done are the claim's done spans, endDone the ending reset's.
	done, endDone sink.Checkpoint
}

// covers reports whether a write at offset off on log is judged by the
// claim of c: on the claim's log, at or past its NextOffset, outside its
// done spans (written before it), and before the era's end.
func (c *claimEra) covers(log string, off int64) bool {
	if !sameLog(c.e.TopicID, log) || off < c.e.NextOffset || c.done.Contains(off) {
		return false
	}
	return c.end < 0 || off < c.end || c.endDone.Contains(off)
}

// Check computes every invariant over in. Any goroutine may call it.
func Check(in Input) Report {
	var r Report
	add := func(f Finding) { r.Findings = append(r.Findings, f) }
	writes := slices.Clone(in.Writes)
	ordered := slices.ContainsFunc(writes, func(w Write) bool { return w.Order != 0 })
	// Without an Order, a partition's writes are taken log by log, in the
	// order its history first names each log (a reset onto a new log
	// restarts the offsets), then by offset.
	logRank := map[int32]map[string]int{}
	for p, hs := range in.History {
		m := map[string]int{}
		for _, e := range hs {
			if _, seen := m[e.TopicID]; e.TopicID != "" && !seen {
				m[e.TopicID] = len(m) + 1
			}
		}
		logRank[p] = m
	}
	slices.SortStableFunc(writes, func(a, b Write) int {
		if ordered {
			return cmp.Compare(a.Order, b.Order)
		}
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(logRank[a.Partition][a.Log], logRank[b.Partition][b.Log]),
			cmp.Compare(a.Offset, b.Offset))
	})

	// F.
	eras := map[int32][]claimEra{}
	for _, p := range slices.Sorted(maps.Keys(in.History)) {
		var prev *fenceadmin.Entry
		var list []claimEra
		// wasReset: a reset came earlier in the partition's history; from
		// then on every claim must have been proven, but the holder's own
		// re-claim (docs/design.md#admin-reset).
		wasReset := false
		for _, e := range in.History[p] {
			switch e.Kind {
			case fenceadmin.KindReset:
				// The reset ends the era of the claims before it on the
				// same log (a reset onto a new log leaves the old log's
				// positions to the old claims).
				for i := range list {
					if list[i].end < 0 && sameLog(list[i].e.TopicID, e.TopicID) {
						list[i].end = e.NextOffset
						list[i].endDone = sink.Checkpoint{Done: e.Done}
					}
				}
				prev, wasReset = nil, true
			case fenceadmin.KindClaim:
				if wasReset && !e.Proven && (prev == nil || e.Token != prev.Token) {
					r.F++
					add(Finding{Invariant: "F", Partition: p, Offset: e.NextOffset, Order: e.Seq,
						Detail: fmt.Sprintf("partition %d: claim by %s accepted without a proof of membership after a reset", p, e.Token)})
				}
				if prev != nil && !e.Token.CanClaim(prev.Token) {
					r.F++
					add(Finding{Invariant: "F", Partition: p, Offset: e.NextOffset, Order: e.Seq,
						Detail: fmt.Sprintf("partition %d: claim by %s accepted after the claim by %s without a reset", p, e.Token, prev.Token)})
				}
				list = append(list, claimEra{e: e, end: -1, done: sink.Checkpoint{Done: e.Done}})
				prev = &list[len(list)-1].e
			}
		}
		eras[p] = list
	}
	if in.Temporal {
		r.F += checkTemporal(in.History, writes, add)
	} else {
		r.F += checkOffsets(eras, writes, add)
	}

	// L: acknowledged commands applied.
	applied := map[string]int{}
	for _, w := range writes {
		applied[writeID(w)]++
	}
	for _, a := range in.Acked {
		if !a.Poison && applied[a.ID] == 0 {
			r.L++
			add(Finding{Invariant: "L", Partition: a.Partition, Offset: a.Offset,
				Detail: fmt.Sprintf("acknowledged command %s (partition %d offset %d) was never applied", a.ID, a.Partition, a.Offset)})
		}
	}

	// O: per key, in application order, Seq grows and so do the offsets
	// of one partition's log (a repeated command is X's, not O's).
	type keyLog struct {
		key, log string
		p        int32
	}
	last := map[string]int64{}
	lastOff := map[keyLog]int64{}
	once := map[string]bool{}
	for _, w := range writes {
		id := writeID(w)
		if w.Key == "" || once[id] {
			continue
		}
		once[id] = true
		kl := keyLog{w.Key, w.Log, w.Partition}
		if prev, ok := last[w.Key]; ok && w.Seq <= prev {
			r.O++
			add(Finding{Invariant: "O", Partition: w.Partition, Offset: w.Offset, Order: w.Order,
				Detail: fmt.Sprintf("key %s: seq %d applied at partition %d offset %d after seq %d", w.Key, w.Seq, w.Partition, w.Offset, prev)})
		} else if prev, ok := lastOff[kl]; ok && w.Offset <= prev {
			r.O++
			add(Finding{Invariant: "O", Partition: w.Partition, Offset: w.Offset, Order: w.Order,
				Detail: fmt.Sprintf("key %s: partition %d offset %d (seq %d) applied after offset %d of the same log", w.Key, w.Partition, w.Offset, w.Seq, prev)})
		}
		if prev, ok := last[w.Key]; !ok || w.Seq > prev {
			last[w.Key] = w.Seq
		}
		if prev, ok := lastOff[kl]; !ok || w.Offset > prev {
			lastOff[kl] = w.Offset
		}
	}

	// X: applied once.
	seen := map[string]bool{}
	for _, w := range writes {
		id := writeID(w)
		if seen[id] {
			r.X++
			add(Finding{Invariant: "X", Partition: w.Partition, Offset: w.Offset, Order: w.Order,
				Detail: fmt.Sprintf("command %s applied again at partition %d offset %d", id, w.Partition, w.Offset)})
		}
		seen[id] = true
	}
	if in.ExtraX > 0 {
		r.X += in.ExtraX
		add(Finding{Invariant: "X", Partition: -1, Detail: in.ExtraXNote})
	}

	// V: lag returned to zero.
	for _, p := range slices.Sorted(maps.Keys(in.Ends)) {
		end := in.Ends[p]
		if next, ok := in.Checkpoints[p]; ok && next < end {
			r.V++
			add(Finding{Invariant: "V", Partition: p, Offset: next,
				Detail: fmt.Sprintf("partition %d: the sink's checkpoint is %d, the log ends at %d", p, next, end)})
		} else if c, ok := in.Committed[p]; ok && c < end {
			r.V++
			add(Finding{Invariant: "V", Partition: p, Offset: c,
				Detail: fmt.Sprintf("partition %d: Kafka's committed offset is %d, the log ends at %d", p, c, end)})
		}
	}
	if in.NotConverged && r.V == 0 {
		r.V = 1
		add(Finding{Invariant: "V", Partition: -1, Detail: "lag did not return to zero within the recovery timeout"})
	}
	// V: no committed offset ahead of the sink's NextOffset, at the end
	// and in every sample.
	for _, p := range slices.Sorted(maps.Keys(in.Committed)) {
		c := in.Committed[p]
		if next, ok := in.Checkpoints[p]; ok && c > next && sameLog(in.CommittedLog, in.CheckpointLogs[p]) {
			r.V++
			add(Finding{Invariant: "V", Partition: p, Offset: c,
				Detail: fmt.Sprintf("partition %d: Kafka's committed offset %d is ahead of the sink's NextOffset %d", p, c, next)})
		}
	}
	for _, smp := range in.Samples {
		if !sameLog(smp.CommittedLog, smp.NextLog) {
			r.SamplesSkipped++
			continue
		}
		r.Samples++
		if smp.Committed > smp.Next {
			r.V++
			add(Finding{Invariant: "V", Partition: smp.Partition, Offset: smp.Committed, At: smp.At,
				Detail: fmt.Sprintf("partition %d at %s: Kafka's committed offset %d was ahead of the sink's NextOffset %d",
					smp.Partition, smp.At.Format("15:04:05.000"), smp.Committed, smp.Next)})
		}
	}

	// D: dead letters.
	if in.Acked != nil || in.DeadLetters != nil || in.Aborted != nil {
		poison := map[string]Acked{}
		for _, a := range in.Acked {
			if a.Poison {
				poison[a.ID] = a
			}
		}
		// The logs of the writes at each position, for the rows a record
		// must never have both of.
		type pos struct {
			p int32
			o int64
		}
		effects := map[pos][]Write{}
		for _, w := range writes {
			effects[pos{w.Partition, w.Offset}] = append(effects[pos{w.Partition, w.Offset}], w)
		}
		effectAt := func(log string, p int32, o int64) (Write, bool) {
			for _, w := range effects[pos{p, o}] {
				if sameLog(w.Log, log) {
					return w, true
				}
			}
			return Write{}, false
		}
		aborted := map[pos][]string{}
		for _, a := range in.Aborted {
			aborted[pos{a.Partition, a.Offset}] = append(aborted[pos{a.Partition, a.Offset}], a.Log)
		}
		isAborted := func(log string, p int32, o int64) bool {
			return slices.ContainsFunc(aborted[pos{p, o}], func(l string) bool { return sameLog(l, log) })
		}
		rows := map[string]int{}
		for _, d := range in.DeadLetters {
			rows[d.ID]++
			if _, ok := poison[d.ID]; !ok {
				r.D++
				what := "is not poison"
				if isAborted(d.Log, d.Partition, d.Offset) {
					what = "was written in an aborted transaction"
				}
				add(Finding{Invariant: "D", Partition: d.Partition, Offset: d.Offset,
					Detail: fmt.Sprintf("record %s (partition %d offset %d) was dead-lettered but %s", d.ID, d.Partition, d.Offset, what)})
			}
			if w, ok := effectAt(d.Log, d.Partition, d.Offset); ok {
				r.D++
				add(Finding{Invariant: "D", Partition: d.Partition, Offset: d.Offset, Order: w.Order,
					Detail: fmt.Sprintf("record at partition %d offset %d has both a dead-letter row (%s) and an effect row (%s)",
						d.Partition, d.Offset, d.ID, writeID(w))})
			}
		}
		for _, a := range in.Aborted {
			if w, ok := effectAt(a.Log, a.Partition, a.Offset); ok {
				r.D++
				add(Finding{Invariant: "D", Partition: a.Partition, Offset: a.Offset, Order: w.Order,
					Detail: fmt.Sprintf("record at partition %d offset %d was written in an aborted transaction but has an effect row (%s)",
						a.Partition, a.Offset, writeID(w))})
			}
		}
		for _, id := range slices.Sorted(maps.Keys(poison)) {
			a := poison[id]
			switch n := rows[id]; {
			case n == 0 && applied[id] == 0:
				r.D++
				add(Finding{Invariant: "D", Partition: a.Partition, Offset: a.Offset,
					Detail: fmt.Sprintf("poison record %s (partition %d offset %d) was skipped without a dead-letter row", id, a.Partition, a.Offset)})
			case n > 1:
				r.D += n - 1
				add(Finding{Invariant: "D", Partition: a.Partition, Offset: a.Offset,
					Detail: fmt.Sprintf("poison record %s (partition %d offset %d) has %d dead-letter rows", id, a.Partition, a.Offset, n)})
			}
		}
	}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int { return cmp.Compare(rank(a.Invariant), rank(b.Invariant)) })
	return r
}

// rank orders invariants as the package documentation lists them.
func rank(inv string) int {
	for i, c := range "FLOXVD" {
		if string(c) == inv {
			return i
		}
	}
	return 6
}

// checkOffsets checks F for writes against the claim eras of each
// partition, from offsets alone. A claim's done spans are the sink's word
// that lanes of earlier tenures applied those offsets before it, so the
// claim does not judge the writes in them; the word is checked too: a
// write in a claim's done spans must carry the token of a claim recorded
// before it (a done span whose write came from the claim's own tenure or
// a later one was not done when the claim said so).
func checkOffsets(eras map[int32][]claimEra, writes []Write, add func(Finding)) int {
	n := 0
	for _, w := range writes {
		list, ok := eras[w.Partition]
		if !ok {
			continue
		}
		if c, ok := doneNotBefore(list, w); ok {
			n++
			add(Finding{Invariant: "F", Partition: w.Partition, Offset: w.Offset, Order: w.Order,
				Detail: fmt.Sprintf("partition %d offset %d was done, said the claim at epoch %d by %s, but it was written at epoch %d by %s, which had not claimed before it",
					w.Partition, w.Offset, c.e.Token.Epoch, c.e.Token.Member, w.Epoch, w.Member)})
			continue
		}
		claimed := false
		for _, c := range list {
			if !c.covers(w.Log, w.Offset) {
				continue
			}
			tok := w.token(c.e.Token)
			if tok == c.e.Token {
				claimed = true
			}
			if !tok.CanClaim(c.e.Token) {
				n++
				add(Finding{Invariant: "F", Partition: w.Partition, Offset: w.Offset, Order: w.Order,
					Detail: fmt.Sprintf("partition %d offset %d written at epoch %d by %s after the claim at epoch %d by %s from offset %d",
						w.Partition, w.Offset, w.Epoch, w.Member, c.e.Token.Epoch, c.e.Token.Member, c.e.NextOffset)})
				claimed = true // one finding per write
				break
			}
		}
		if !claimed {
			n++
			add(Finding{Invariant: "F", Partition: w.Partition, Offset: w.Offset, Order: w.Order,
				Detail: fmt.Sprintf("partition %d offset %d written at epoch %d by %s, which never claimed the partition at or before that offset",
					w.Partition, w.Offset, w.Epoch, w.Member)})
		}
	}
	return n
}

// doneNotBefore returns the first claim of list whose done spans hold w's
// offset (on w's log) while w's token claimed the partition only at or
// after that claim, or never: the claim reported as done an offset no
// earlier tenure had applied.
func doneNotBefore(list []claimEra, w Write) (claimEra, bool) {
	for i, c := range list {
		if !sameLog(c.e.TopicID, w.Log) || !c.done.Contains(w.Offset) {
			continue
		}
		tok := w.token(c.e.Token)
		if !slices.ContainsFunc(list[:i], func(b claimEra) bool { return b.e.Token == tok }) {
			return c, true
		}
	}
	return claimEra{}, false
}

// checkTemporal checks F for writes in one sequence with the history: each
// write must be by the latest claim since the last reset (the holder).
func checkTemporal(history map[int32][]fenceadmin.Entry, writes []Write, add func(Finding)) int {
	n := 0
	next := map[int32]int{} // index of the next history entry per partition
	holder := map[int32]epochs.Token{}
	for _, w := range writes {
		h, ok := history[w.Partition]
		if !ok {
			continue
		}
		for i := next[w.Partition]; i < len(h) && h[i].Seq < w.Order; i++ {
			switch h[i].Kind {
			case fenceadmin.KindClaim:
				holder[w.Partition] = h[i].Token
			case fenceadmin.KindReset:
				holder[w.Partition] = epochs.Token{}
			}
			next[w.Partition] = i + 1
		}
		cur := holder[w.Partition]
		switch {
		case cur.IsZero():
			n++
			add(Finding{Invariant: "F", Partition: w.Partition, Offset: w.Offset, Order: w.Order,
				Detail: fmt.Sprintf("partition %d offset %d written at epoch %d by %s with no claimed holder", w.Partition, w.Offset, w.Epoch, w.Member)})
		case !w.token(cur).Holds(cur):
			n++
			add(Finding{Invariant: "F", Partition: w.Partition, Offset: w.Offset, Order: w.Order,
				Detail: fmt.Sprintf("partition %d offset %d written at epoch %d by %s while the holder was %s", w.Partition, w.Offset, w.Epoch, w.Member, cur)})
		}
	}
	return n
}
