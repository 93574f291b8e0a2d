package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/invariants"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// Violation is one breach of an invariant found by [Sink.Verify].
type Violation struct {
	// Invariant is "F", "O" or "X" (docs/design.md#invariants).
	Invariant string
	// Scope is the scope whose history breaks the invariant.
	Scope epochs.Scope
	// Seq is the Seq of the offending event.
	Seq uint64
	// Detail describes the breach.
	Detail string
}

// String returns a one-line description. It may be called from any
// goroutine.
func (v Violation) String() string {
	return fmt.Sprintf("%s: %s (event %d): %s", v.Invariant, v.Scope, v.Seq, v.Detail)
}

// VerifyError is returned by [Sink.Verify] when the history breaks an
// invariant. It lists every violation, by scope. Per scope, over the
// accepted events in Seq order (workrouter's one invariant checker, with
// the sink's own log of decisions as its clock):
//
//   - F: every accepted Apply carries exactly the token of the latest
//     accepted Claim since the last Reset (no stale write after a newer
//     claim, no write without a claim); and an accepted Claim never lowers
//     the epoch, nor takes an equal epoch from another member, unless a
//     Reset came in between.
//   - O: the offsets applied are strictly increasing, over the plain
//     applies, and within each gapped apply (a lane's batch,
//     [sink.Batch].From); lanes' batches are not ordered with each
//     other nor with the plain applies (the sink does not know the
//     records' keys: O per key is the chaos checker's).
//   - X: no offset is applied twice.
//
// Its methods may be called from any goroutine.
type VerifyError struct {
	Violations []Violation
}

// Error lists the violations, one per line. It may be called from any
// goroutine.
func (e *VerifyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "memory: %d invariant violation(s):", len(e.Violations))
	for _, v := range e.Violations {
		b.WriteString("\n\t")
		b.WriteString(v.String())
	}
	return b.String()
}

// verifyEvents checks invariants F, O and X over events, which must be in
// Seq order, scope by scope with the invariants package, and returns every
// violation found.
func verifyEvents(events []Event) []Violation {
	type scopeInput struct {
		history []fenceadmin.Entry
		writes  []invariants.Write
		log     string // the log identity of the latest claim or reset
	}
	scopes := map[epochs.Scope]*scopeInput{}
	var order []epochs.Scope
	for _, ev := range events {
		if !ev.Accepted {
			continue
		}
		in := scopes[ev.Scope]
		if in == nil {
			in = &scopeInput{}
			scopes[ev.Scope] = in
			order = append(order, ev.Scope)
		}
		seq := int64(ev.Seq)
		switch ev.Kind {
		case Claim, Reset:
			if ev.TopicID != "" {
				in.log = ev.TopicID
			}
		}
		switch ev.Kind {
		case Claim:
			in.history = append(in.history, fenceadmin.Entry{Seq: seq, Kind: fenceadmin.KindClaim, Token: ev.Token, NextOffset: ev.NextOffset, TopicID: ev.TopicID, Proven: ev.Proven})
		case Reset:
			in.history = append(in.history, fenceadmin.Entry{Seq: seq, Kind: fenceadmin.KindReset, Token: ev.Stored, NextOffset: ev.NextOffset, TopicID: ev.TopicID})
		case Apply:
			key := in.log + "/" + ev.Scope.String()
			if ev.Gapped {
				// A lane's batch: ascending within itself, not with
				// the other lanes' (the sink does not know the keys).
				key += fmt.Sprintf("#%d", ev.Seq)
			}
			for _, o := range ev.Offsets {
				in.writes = append(in.writes, invariants.Write{Partition: ev.Scope.Partition, Offset: o,
					Epoch: ev.Token.Epoch, Member: ev.Token.Member, Key: key, Seq: o, Order: seq, Log: in.log})
			}
		}
	}
	var out []Violation
	for _, scope := range order {
		in := scopes[scope]
		rep := invariants.Check(invariants.Input{Temporal: true, Writes: in.writes,
			History: map[int32][]fenceadmin.Entry{scope.Partition: in.history}})
		for _, f := range rep.Findings {
			out = append(out, Violation{Invariant: f.Invariant, Scope: scope, Seq: uint64(f.Order), Detail: f.Detail})
		}
	}
	slices.SortStableFunc(out, func(a, b Violation) int { return compareSeq(a.Seq, b.Seq) })
	return out
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// History returns the accepted claims and the resets of scope in order
// (ascending Seq), with the done spans each claim returned and each reset
// kept; nil for a scope never claimed. At is when the sink
// recorded each. It implements [fenceadmin.Historian] and may be called from any
// goroutine.
func (s *Sink) History(ctx context.Context, scope epochs.Scope) ([]fenceadmin.Entry, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: history %s: %w", scope, err)
	}
	var out []fenceadmin.Entry
	for _, ev := range s.Events() {
		if !ev.Accepted || ev.Scope != scope {
			continue
		}
		switch ev.Kind {
		case Claim:
			out = append(out, fenceadmin.Entry{Seq: int64(ev.Seq), Kind: fenceadmin.KindClaim, Token: ev.Token, NextOffset: ev.NextOffset, TopicID: ev.TopicID, At: ev.At,
				Done: slices.Clone(ev.Done), Proven: ev.Proven})
		case Reset:
			out = append(out, fenceadmin.Entry{Seq: int64(ev.Seq), Kind: fenceadmin.KindReset, Token: ev.Stored, NextOffset: ev.NextOffset, Reason: ev.Reason,
				TopicID: ev.TopicID, Detail: ev.Detail, At: ev.At, Done: slices.Clone(ev.Done)})
		}
	}
	return out, nil
}
