package memory

import (
	"fmt"
	"strings"

	"github.com/workrouter/workrouter/epochs"
)

// Violation is one breach of an invariant found by [Sink.Verify].
type Violation struct {
	// Invariant is "F", "O" or "X" (DESIGN.md §7).
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
// invariant. It lists every violation, in Seq order. Per scope, over the
// accepted events in Seq order:
//
//   - F: every accepted Apply carries exactly the token of the latest
//     accepted Claim since the last Reset (no stale write after a newer
//     claim, no write without a claim); and an accepted Claim never lowers
//     the epoch, nor takes an equal epoch from another member, unless a
//     Reset came in between.
//   - O: the offsets applied are strictly increasing.
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

// scopeTrack is what verifyEvents remembers of one scope.
type scopeTrack struct {
	holder     epochs.Token // latest accepted claimer; zero after a reset
	lastClaim  epochs.Token // latest accepted claimer ever
	resetSince bool         // a reset came after lastClaim
	maxApplied int64        // highest applied offset, -1 if none
	applied    map[int64]uint64
}

// verifyEvents checks invariants F, O and X over events, which must be in
// Seq order, and returns every violation found.
func verifyEvents(events []Event) []Violation {
	tracks := make(map[epochs.Scope]*scopeTrack)
	var out []Violation
	add := func(inv string, ev Event, format string, args ...any) {
		out = append(out, Violation{Invariant: inv, Scope: ev.Scope, Seq: ev.Seq, Detail: fmt.Sprintf(format, args...)})
	}
	for _, ev := range events {
		if !ev.Accepted {
			continue
		}
		tr := tracks[ev.Scope]
		if tr == nil {
			tr = &scopeTrack{maxApplied: -1, applied: make(map[int64]uint64)}
			tracks[ev.Scope] = tr
		}
		switch ev.Kind {
		case Claim:
			prev := tr.lastClaim
			if !prev.IsZero() && !tr.resetSince && !ev.Token.CanClaim(prev) {
				if ev.Token.Epoch < prev.Epoch {
					add("F", ev, "claim by %s lowered the epoch from %d without a reset", ev.Token, prev.Epoch)
				} else {
					add("F", ev, "claim by %s took epoch %d from member %q without a reset", ev.Token, prev.Epoch, prev.Member)
				}
			}
			tr.holder, tr.lastClaim, tr.resetSince = ev.Token, ev.Token, false
		case Reset:
			tr.holder, tr.resetSince = epochs.Token{}, true
		case Apply:
			if !ev.Token.Holds(tr.holder) {
				if tr.holder.IsZero() {
					add("F", ev, "apply by %s accepted with no claimed holder", ev.Token)
				} else {
					add("F", ev, "apply by %s accepted while the latest claimer was %s", ev.Token, tr.holder)
				}
			}
			for _, o := range ev.Offsets {
				if first, dup := tr.applied[o]; dup {
					add("X", ev, "offset %d applied again (first applied by event %d)", o, first)
					continue
				}
				if o <= tr.maxApplied {
					add("O", ev, "offset %d applied after offset %d", o, tr.maxApplied)
				}
				tr.applied[o] = ev.Seq
				tr.maxApplied = max(tr.maxApplied, o)
			}
		}
	}
	return out
}
