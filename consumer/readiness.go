package consumer

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Readiness is a Worker's answer to a readiness probe, with the reasons
// when it is not ready: Reason for the whole Worker (stopped, not yet a
// member, waiting for its assignment), else Blocking for each partition
// that holds it back.
type Readiness struct {
	// Ready is true when the Worker serves its share of the group.
	Ready bool
	// Reason, when not empty, is why the whole Worker is not ready;
	// Blocking is then empty.
	Reason string
	// Blocking lists, by partition, the partitions that make the Worker
	// not ready.
	Blocking []BlockingPartition
}

// BlockingPartition is a partition that makes a Worker not ready: it is
// not claimed yet, it is fenced, or it has been stalled or blocked longer
// than the probe allows.
type BlockingPartition struct {
	PartitionStatus
	// Reason says why, without the partition's number, for example
	// "stalled for 2m0s (7 attempts): <the last error>".
	Reason string
}

// String is the partition and its reason: "partition 3: <Reason>".
func (b BlockingPartition) String() string {
	return fmt.Sprintf("partition %d: %s", b.Token.Partition, b.Reason)
}

// String is "ready", the whole Worker's reason, or one line per blocking
// partition.
func (r Readiness) String() string {
	switch {
	case r.Ready:
		return "ready"
	case r.Reason != "":
		return r.Reason
	}
	lines := make([]string, len(r.Blocking))
	for i, b := range r.Blocking {
		lines[i] = b.String()
	}
	return strings.Join(lines, "\n")
}

// Readiness is the readiness rule of a Worker: it is ready when it has
// joined the group and received its assignment under its current member
// ID, it has not stopped, and every partition assigned to it is claimed in
// the sink and not fenced; with maxStall above 0, also no partition may
// have been stalled or blocked for longer than maxStall (0: stalls do not
// affect readiness). A member assigned no partition is ready once its
// (empty) assignment has arrived. It is cheap; any goroutine may call it.
func (w *Worker[Tx]) Readiness(maxStall time.Duration) Readiness {
	if w.ctx.Err() != nil {
		return Readiness{Reason: "the worker has stopped"}
	}
	member, gen := w.cl.GroupMetadata()
	if member == "" || gen < 0 {
		return Readiness{Reason: fmt.Sprintf("not a member of group %s yet", w.cfg.Group)}
	}
	w.mu.Lock()
	if w.synced != member {
		w.mu.Unlock()
		return Readiness{Reason: fmt.Sprintf("joined group %s, waiting for its partition assignment", w.cfg.Group)}
	}
	ts := make([]*tenure[Tx], 0, len(w.tenures))
	for _, t := range w.tenures {
		ts = append(ts, t)
	}
	w.mu.Unlock()
	var blocking []BlockingPartition
	for _, t := range ts {
		started := t.started.Load()
		st := t.status()
		var reason string
		switch {
		case st.State == StateFenced:
			reason = "fenced: a newer tenure holds it"
		case !started && (st.State == StateStalled || st.State == StateBlocked):
			reason = "not claimed yet, " + stallReason(st)
		case !started:
			reason = "not claimed yet"
		case maxStall > 0 && (st.State == StateStalled || st.State == StateBlocked) && time.Since(st.Since) > maxStall:
			reason = stallReason(st)
		default:
			continue
		}
		blocking = append(blocking, BlockingPartition{PartitionStatus: st, Reason: reason})
	}
	if len(blocking) == 0 {
		return Readiness{Ready: true}
	}
	slices.SortFunc(blocking, func(a, b BlockingPartition) int { return cmp.Compare(a.Token.Partition, b.Token.Partition) })
	return Readiness{Blocking: blocking}
}

// stallReason is "stalled for 2m0s (7 attempts): <cause>".
func stallReason(st PartitionStatus) string {
	d := time.Since(st.Since)
	if d >= time.Second {
		d = d.Truncate(time.Second)
	} else {
		d = d.Round(time.Millisecond)
	}
	attempts := "1 attempt"
	if st.Attempts != 1 {
		attempts = fmt.Sprintf("%d attempts", st.Attempts)
	}
	s := fmt.Sprintf("%s for %s (%s)", st.State, d, attempts)
	if st.LastErr != nil {
		s += ": " + st.LastErr.Error()
	}
	return s
}
