package consumer

import (
	"fmt"
	"time"

	"github.com/workrouter/workrouter/epochs"
)

// rejoined handles a refusal err (matching sink.ErrFenced) of t's token
// when this client rejoined the group under another member ID and still
// owns t's partition: the coordinator forgot the member (a broker that
// lost its group state, a member expired while it rejoined) and answered
// its rejoin with UNKNOWN_MEMBER_ID; kgo joined again under a new member
// ID and, cooperative, kept its partitions without an assignment callback
// for them, so their tenures kept the old member's token, which a sink
// that checks the member (the Kafka sink's ErrMemberChanged) refuses.
//
// The partition is provably this client's under its current member when
// t is still its partition's tenure (never revoked or lost) and the last
// assignment (onAssigned) ran under the current member ID and generation:
// kgo revokes a session's lost partitions before its assignment callback.
// (A join under way has moved the generation already, before its sync
// says which partitions stay: then t is not renewed until that
// assignment has run.) Then t ends and a fresh tenure with the current
// token (member ID and generation) takes its place, blocked with cause
// BlockMemberChanged, which reclaimLoop claims at once: the sink's fence
// decides that claim as any other, so a newer holder still fences it. It returns false, and does
// nothing, otherwise: t's member ID is still the client's (the refusal is
// a newer tenure's: t is a zombie), the client has no member ID now, or
// its assignment under the current member ID and generation has not run
// yet (onAssigned then renews t if it is still the partition's and
// fenced, see renewKept).
func (w *Worker[Tx]) rejoined(t *tenure[Tx], err error) bool {
	cause := fmt.Errorf("%w (tenure %s): %w", ErrMemberRejoined, t.tok, err)
	if !w.replaceBlockedAs(t, func() (epochs.Token, bool) { return w.renewedToken(t) }, BlockMemberChanged, cause, time.Time{}) {
		return false
	}
	t.stop() // a tenure that never started (a re-claim) has no goroutine to close done
	return true
}

// renewedToken returns the token of a tenure that replaces t, kept by
// this client under the member ID it rejoined with, and whether t is one
// (see rejoined). It is called under w.mu.
func (w *Worker[Tx]) renewedToken(t *tenure[Tx]) (epochs.Token, bool) {
	member, gen := w.cl.GroupMetadata()
	if member == "" || member == t.tok.Member || w.synced != member || w.syncedEpoch != gen {
		return epochs.Token{}, false
	}
	tok := t.tok
	tok.Member, tok.Epoch = member, gen
	return tok, true
}

// renewKept runs at the end of onAssigned under member: a partition kept
// across a rejoin whose tenure, of an earlier member ID, was fenced before
// this assignment ran (rejoined refused to act then) is renewed now.
func (w *Worker[Tx]) renewKept(member string) {
	var fenced []*tenure[Tx]
	w.mu.Lock()
	for _, t := range w.tenures {
		if t.fenced.Load() && t.tok.Member != member {
			fenced = append(fenced, t)
		}
	}
	w.mu.Unlock()
	for _, t := range fenced {
		w.rejoined(t, fmt.Errorf("fenced before the assignment under member %s ran", member))
	}
}
