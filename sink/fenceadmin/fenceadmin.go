// Package fenceadmin is the administration of a sink's fences, beside the
// fenced write: listing them (Lister), their ordered history (Historian)
// and the explicit, audited reset (Resetter), for `workrouter fences`,
// `workrouter status`, package admin and the invariant checker
// (docs/design.md#admin-reset). A backend implements them as optional
// capabilities, found through wrappers with sink.As.
package fenceadmin

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// TakeoverReason is the reason a takeover's reset row records
// ([sink.Fence.CheckClaim]); its detail is [sink.Observed.TakeoverDetail], and its token the
// holder it cleared.
const TakeoverReason = "takeover: a proven member of the group claimed below a holder of an earlier incarnation of the group"

// AfterReset returns the fence that a reset by req leaves of f, the fence
// as the reset found it (docs/design.md#admin-reset): no holder, the
// NextOffset and topic ID req asks for (the stored ones when req leaves
// them unset), and ProofRequired set. The done spans of a gapped
// checkpoint (Fence.Done) stay when req keeps the checkpoint (the same
// log) and are cleared when it sets a new NextOffset (their offsets were
// the old log's). Version is f's: the backend that stores the reset
// moves it. Every backend's ResetFence stores it. It may be called from
// any goroutine.
func AfterReset(f sink.Fence, req ResetRequest) sink.Fence {
	after := sink.Fence{Scope: f.Scope, NextOffset: f.NextOffset, TopicID: f.TopicID, ProofRequired: true, Version: f.Version, Duplicates: f.Duplicates}
	if req.NextOffset != nil {
		// A new checkpoint on a new log: the done spans were offsets
		// of the old one.
		after.NextOffset = *req.NextOffset
	} else {
		// The same log: what lanes applied above the watermark stays
		// done.
		after.Done = slices.Clone(f.Done)
	}
	if req.TopicID != "" {
		after.TopicID = req.TopicID
	}
	return after
}

// Lister is an optional capability of a sink: reading its fence rows, for
// status and admin tools. Discover it by type assertion.
type Lister interface {
	// Fences returns the stored state of every scope the sink knows.
	Fences(ctx context.Context) ([]sink.Fence, error)
}

// Resetter is an optional capability of a sink: the explicit, audited admin
// reset of a scope's fence (docs/design.md#admin-reset), for epochs that
// went backwards (hazard 3) or a log that changed under the checkpoint
// (hazard 8). Never call it automatically: it lifts the fence. Package
// admin wraps it with the checks an operator needs.
type Resetter interface {
	// ResetFence, in one atomic unit, compares the stored fence with
	// req.Expect (holder, NextOffset and topic ID) and fails with an error
	// matching ErrConflict if it moved; otherwise it clears the
	// holder, sets NextOffset and the topic ID as req says, requires a
	// proof of membership from every later claim (Fence.ProofRequired),
	// storing the fence [AfterReset] returns, and appends a reset
	// row with req.Reason and req.Detail to the history (which moves
	// Fence.Version).
	// It returns the fence as it was. An empty Reason fails with
	// sink.ErrNoReason, an unknown scope with sink.ErrNotFound.
	ResetFence(ctx context.Context, req ResetRequest) (before sink.Fence, err error)
}

// ResetRequest is an admin reset of one scope's fence.
type ResetRequest struct {
	Scope epochs.Scope
	// Expect is the fence the operator saw; the reset is a compare-and-set
	// on its Holder, NextOffset and TopicID.
	Expect sink.Fence
	// NextOffset, if not nil, is the new checkpoint (the scope restarts
	// there, on a new log); nil keeps the checkpoint (the same log).
	NextOffset *int64
	// TopicID, if not empty, is the log identity the scope is reset onto;
	// empty keeps the stored one.
	TopicID string
	// Reason says why; required, recorded.
	Reason string
	// Detail records what the operator observed (the diagnosis), audited
	// with the reset.
	Detail string
}

// Historian is an optional capability of a sink: the ordered record of a
// scope's accepted claims and admin resets, which the invariant checkers
// (F needs every claim's epoch and NextOffset) and `workrouter fences
// history` read.
type Historian interface {
	// History returns the claims and resets of scope in order (empty for
	// a scope never claimed).
	History(ctx context.Context, scope epochs.Scope) ([]Entry, error)
}

// History entry kinds.
const (
	// KindClaim marks a [Entry] of an accepted claim.
	KindClaim = "claim"
	// KindReset marks a [Entry] of an admin reset.
	KindReset = "reset"
)

// Entry is one row of a scope's history: an accepted claim or an
// admin reset.
type Entry struct {
	// Seq orders the entries of the whole sink; it only grows (gaps are
	// possible).
	Seq int64
	// Kind is [KindClaim] or [KindReset].
	Kind string
	// Token is the claimed token for a claim, and for a reset the holder
	// the reset cleared (zero if the scope had no holder).
	Token epochs.Token
	// NextOffset is the scope's NextOffset at the claim (what Claim
	// returned) or the reset (which keeps it).
	NextOffset int64
	// Done are the done spans above NextOffset of a gapped checkpoint
	// ([Checkpoint.Done]): for a claim, the spans Claim returned
	// (offsets that lanes of an earlier tenure applied, which the new
	// owner skips); for a reset, the spans it left ([AfterReset]:
	// kept on the same log, none on a new one). Empty for a scope
	// without gaps. The invariant checker needs them for F: a write at
	// an offset in a claim's done spans was made before that claim.
	Done []sink.Span
	// Reason is the operator's reason for a reset ([TakeoverReason] for
	// the reset a takeover records); empty for a claim.
	Reason string
	// TopicID is the log identity at the claim, or the one the reset left
	// the scope on.
	TopicID string
	// Detail is a reset's audited detail (what the operator observed and
	// what the reset changed); empty for a claim.
	Detail string
	// Proven reports, for a claim, that it came with a current proof of
	// membership (Observed.Proof at the fence's Version). Every claim
	// after a reset of the scope must have been proven, but the holder's
	// own re-claim; the invariant checker holds the history to it. False
	// for a reset.
	Proven bool
	// At is when the sink recorded the entry (informational only, never
	// used for fencing; the backend says whose clock).
	At time.Time
}

// Equal reports whether e and g are the same entry: every field equal,
// and the same done spans (a nil and an empty Done are the same).
// Entry holds a slice, so == does not compile on it. It may be
// called from any goroutine.
func (e Entry) Equal(g Entry) bool {
	return e.Seq == g.Seq && e.Kind == g.Kind && e.Token == g.Token && e.NextOffset == g.NextOffset && e.Reason == g.Reason &&
		e.TopicID == g.TopicID && e.Detail == g.Detail && e.Proven == g.Proven && e.At.Equal(g.At) && slices.Equal(e.Done, g.Done)
}

// ErrConflict is matched by the error ResetFence returns when the
// stored fence is no longer the one the operator saw (req.Expect).
var ErrConflict = errors.New("fenceadmin: the fence changed since it was inspected")
