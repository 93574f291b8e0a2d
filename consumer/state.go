package consumer

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/workrouter/workrouter/epochs"
)

// PartitionState is what a partition assigned to a Worker is doing.
type PartitionState string

// The states of a partition.
const (
	// StateClaiming: assigned, its claim not accepted yet.
	StateClaiming PartitionState = "claiming"
	// StateRunning: claimed, applying what arrives.
	StateRunning PartitionState = "running"
	// StateStalled: an attempt failed and is being retried; no progress
	// since Since.
	StateStalled PartitionState = "stalled"
	// StateBlocked: its claim was refused for a reason an operator must
	// resolve (the log changed, the epochs went backwards); claimed again
	// every Config.ReclaimInterval.
	StateBlocked PartitionState = "blocked"
	// StateFenced: a newer tenure holds it; it is stopped until the group
	// takes it back.
	StateFenced PartitionState = "fenced"
)

// PartitionStatus is one assigned partition's state, for status pages and
// readiness probes.
type PartitionStatus struct {
	Token epochs.Token
	State PartitionState
	// NextOffset is the next offset to apply (-1 before the claim).
	NextOffset int64
	// Since is when the state began (a stall: its first failure).
	Since time.Time
	// Attempts counts the failed attempts of a stall; LastErr is the last
	// error of a stall or a block.
	Attempts int
	LastErr  error
}

// Partitions returns the state of every partition assigned to the Worker,
// by partition. It may be called from any goroutine.
func (w *Worker[Tx]) Partitions() []PartitionStatus {
	w.mu.Lock()
	ts := make([]*tenure[Tx], 0, len(w.tenures))
	for _, t := range w.tenures {
		ts = append(ts, t)
	}
	w.mu.Unlock()
	out := make([]PartitionStatus, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.status())
	}
	slices.SortFunc(out, func(a, b PartitionStatus) int { return cmp.Compare(a.Token.Partition, b.Token.Partition) })
	return out
}

// StalledLongerThan reports whether a partition of the Worker has been
// stalled (or blocked) for longer than d: for a readiness probe that
// should fail while a partition makes no progress. It may be called from
// any goroutine.
func (w *Worker[Tx]) StalledLongerThan(d time.Duration) bool {
	for _, p := range w.Partitions() {
		if (p.State == StateStalled || p.State == StateBlocked) && time.Since(p.Since) > d {
			return true
		}
	}
	return false
}

// stallState is the part of a tenure's state that Partitions reports.
type stallState struct {
	state    PartitionState
	since    time.Time
	attempts int
	lastErr  error
}

func (t *tenure[Tx]) status() PartitionStatus {
	t.smu.Lock()
	defer t.smu.Unlock()
	st := PartitionStatus{Token: t.tok, State: t.st.state, Since: t.st.since, Attempts: t.st.attempts, LastErr: t.st.lastErr, NextOffset: -1}
	switch {
	case t.fenced.Load():
		st.State = StateFenced
	case st.State == "" && t.started.Load():
		st.State = StateRunning
	case st.State == "":
		st.State = StateClaiming
	}
	if t.started.Load() {
		st.NextOffset = t.next()
	}
	return st
}

// stalled records a failed attempt; it returns the attempt's number and
// when the stall began.
func (t *tenure[Tx]) stalled(err error) (int, time.Time) {
	return t.failedIn(StateStalled, err)
}

// failedIn records a failed attempt in state (stalled or blocked), which
// begins now unless the tenure is in it already; it returns the attempt's
// number and when the state began.
func (t *tenure[Tx]) failedIn(state PartitionState, err error) (int, time.Time) {
	t.smu.Lock()
	defer t.smu.Unlock()
	if t.st.state != state {
		t.st.state, t.st.since, t.st.attempts = state, time.Now(), 0
	}
	t.st.attempts++
	t.st.lastErr = err
	return t.st.attempts, t.st.since
}

// progressed records that the partition moved on. The budget of a
// failing record is its applier's, and is kept (see recordFailure).
func (t *tenure[Tx]) progressed() {
	t.smu.Lock()
	wasStalled := t.st.state != StateRunning && t.st.state != ""
	t.st = stallState{state: StateRunning, since: time.Now()}
	t.smu.Unlock()
	if wasStalled {
		t.w.reportRunning(t)
	}
}

// refused returns when the row of refusals by a resource the handler
// called began (zero: the tenure is not in one).
func (t *tenure[Tx]) refused() time.Time {
	t.smu.Lock()
	defer t.smu.Unlock()
	return t.refusedSince
}

// clearRefused ends the row of refusals: a batch applied.
func (t *tenure[Tx]) clearRefused() {
	t.smu.Lock()
	t.refusedSince = time.Time{}
	t.smu.Unlock()
}

// blocked records a claim refused for a reason an operator must resolve;
// it returns when the block began.
func (t *tenure[Tx]) blocked(err error) time.Time {
	_, since := t.failedIn(StateBlocked, err)
	return since
}

// isBlocked reports whether the tenure waits for a re-claim.
func (t *tenure[Tx]) isBlocked() bool {
	t.smu.Lock()
	defer t.smu.Unlock()
	return t.st.state == StateBlocked
}

// stateMetadata is the offset-commit metadata a Worker writes for a
// partition that is stalled or blocked, so that `workrouter status` (any
// admin client) can show it: Kafka keeps it with the committed offset.
type stateMetadata struct {
	State    PartitionState `json:"state"`
	Since    time.Time      `json:"since"`
	Attempts int            `json:"attempts"`
	Cause    string         `json:"cause,omitempty"`
	Error    string         `json:"error"`
	Member   string         `json:"member"`
	Epoch    int32          `json:"epoch"`
}

// StateMetadataPrefix starts the offset-commit metadata of a partition a
// Worker reported stalled or blocked; the JSON of its state follows. Any
// other metadata (franz-go commits the member ID) means the partition was
// running at its last commit.
const StateMetadataPrefix = "workrouter-state:"

// ParseStateMetadata decodes a committed offset's metadata written by a
// Worker for a stalled or blocked partition; ok is false for any other
// metadata.
func ParseStateMetadata(md string) (state PartitionState, since time.Time, attempts int, lastErr string, ok bool) {
	if len(md) <= len(StateMetadataPrefix) || md[:len(StateMetadataPrefix)] != StateMetadataPrefix {
		return "", time.Time{}, 0, "", false
	}
	var m stateMetadata
	if err := json.Unmarshal([]byte(md[len(StateMetadataPrefix):]), &m); err != nil {
		return "", time.Time{}, 0, "", false
	}
	return m.State, m.Since, m.Attempts, m.Error, true
}

// reportStall writes the partition's stall into its committed offset's
// metadata (at the offset already reached), so that status shows it
// within one retry. Failures are reported as CommitFailed events: the
// stall itself is already an event.
func (w *Worker[Tx]) reportStall(t *tenure[Tx], attempts int, since time.Time, cause string, err error) {
	if !t.started.Load() {
		return
	}
	md, _ := json.Marshal(stateMetadata{State: StateStalled, Since: since, Attempts: attempts, Cause: cause, Error: truncate(err.Error()), Member: t.tok.Member, Epoch: t.tok.Epoch})
	w.commitMetadata(t, t.next(), StateMetadataPrefix+string(md))
}

// reportBlocked writes into the committed offset's metadata that t's
// partition is blocked since since, so that status shows it (a blocked
// tenure that never started writes nothing: its predecessor t does).
func (w *Worker[Tx]) reportBlocked(t *tenure[Tx], since time.Time, err error) {
	if !t.started.Load() {
		return
	}
	md, _ := json.Marshal(stateMetadata{State: StateBlocked, Since: since, Attempts: 1, Error: truncate(err.Error()), Member: t.tok.Member, Epoch: t.tok.Epoch})
	w.commitMetadata(t, t.next(), StateMetadataPrefix+string(md))
}

// truncate cuts msg to at most 1000 bytes, at a rune boundary: the
// metadata of a committed offset is bounded by the broker.
func truncate(msg string) string {
	for len(msg) > 1000 {
		_, size := utf8.DecodeLastRuneInString(msg)
		msg = msg[:len(msg)-size]
	}
	return msg
}

// reportRunning clears a stall from the committed offset's metadata.
func (w *Worker[Tx]) reportRunning(t *tenure[Tx]) {
	if t.started.Load() {
		w.commitMetadata(t, t.next(), t.tok.Member)
	}
}

// commitMetadata commits next with metadata for t's partition, as t's
// member at the group's current generation.
func (w *Worker[Tx]) commitMetadata(t *tenure[Tx], next int64, metadata string) {
	if next < 0 {
		return
	}
	member, gen := w.cl.GroupMetadata()
	if member != t.tok.Member {
		return
	}
	if err := commitAs(t.ctx, w.cl, w.cfg.Group, member, gen, w.cfg.Topic, w.topicIDBytes(t), t.tok.Partition, next, metadata); err != nil && t.ctx.Err() == nil {
		w.obs.emit(CommitFailed{Group: w.cfg.Group, Topic: w.cfg.Topic, Offsets: map[int32]int64{t.tok.Partition: next}, Err: err})
	}
}
