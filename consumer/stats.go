package consumer

import (
	"sync/atomic"

	"github.com/workrouter/workrouter/sink"
)

// Stats are cumulative counts of a Worker's events: the Worker records
// its work once, as events, and Stats is derived from them by an
// Observer the Worker installs ahead of every other one (Config.Logger's
// and Config.Observers). Each field is fed by exactly one kind of event,
// named in its comment, so that a count of that event stream (package
// consumer/eventlog) or of the series fed by it (package
// consumer/consumerprom) gives the same number. An event is counted
// before any Observer receives it: an Observer that calls Worker.Stats
// from its Observe sees the event it is given counted.
type Stats struct {
	// Assigned counts Assigned events: partitions assigned.
	Assigned int64
	// Revoked counts Revoked events: partitions revoked, each counted
	// once its tenure finished (or, past RevokeTimeout, was cancelled in)
	// its in-flight batch, before its final offsets are committed.
	Revoked int64
	// Lost counts Lost events: partitions lost, each counted as Revoked
	// is.
	Lost int64
	// Claims counts Claimed events: claims the sink accepted for a
	// tenure that was still its partition's, takeovers included.
	Claims int64
	// Takeovers counts the Claimed events with TookOver set: claims
	// accepted as a proven takeover from a holder of an earlier
	// incarnation of the group.
	Takeovers int64
	// FencedClaims counts Fenced events with Op sink.OpClaim: claims the
	// sink refused because a newer tenure holds the partition. A refusal
	// by a holder of an earlier incarnation of the group is not one: it
	// ends in a takeover (Takeovers) or a Blocked event (cause
	// BlockEpochRegressed).
	FencedClaims int64
	// FencedApplies counts Fenced events with Op sink.OpApply or
	// sink.OpDeadLetter: batches and dead letters refused because a
	// newer tenure holds the partition (by the sink, or by a resource
	// the handler called once the group moved the partition).
	FencedApplies int64
	// FenceResets counts Blocked events with cause BlockFenceReset:
	// writes the sink refused because an operator reset the fence under
	// the tenure, which then claimed again. (A tenure released before
	// the refusal came reports a Discarded event instead.)
	FenceResets int64
	// ResourceRefusals counts Blocked events with cause
	// BlockResourceFenced: batches refused by a resource the handler
	// called (ErrResourceFenced), each of which blocked the partition
	// until its next re-claim.
	ResourceRefusals int64
	// MemberChanges counts Blocked events with cause BlockMemberChanged:
	// tenures the sink refused because their token names a member ID
	// this client left (it rejoined under a new one and kept the
	// partition), each of which was claimed again with the current token.
	MemberChanges int64
	// Batches counts Applied events: batches applied.
	Batches int64
	// Records sums Applied.Applied: records whose effects were applied.
	Records int64
	// Skipped sums Applied.Skipped: records the sink skipped as already
	// applied.
	Skipped int64
	// Duplicates sums Applied.Duplicates: records the sink did not run
	// because their command ID was applied already. Each of them is also
	// a DuplicateSkipped event.
	Duplicates int64
	// RedrivesSkipped sums Applied.OtherGroup: redrives for another
	// group, skipped without calling a handler. Each of them is also a
	// RedriveSkipped event.
	RedrivesSkipped int64
	// WithoutID sums Applied.WithoutID: applied records that carried no
	// command ID, applied exactly once per offset only.
	WithoutID int64
	// Retries counts Stalled events: failed claim, batch and dead-letter
	// attempts that are retried (after Stalled.Backoff; at once, after
	// its good prefix, for a batch whose handler failed behind one).
	Retries int64
	// Pauses counts Paused events: times a partition's fetching was
	// paused because its queue was full.
	Pauses int64
	// DeadLettered counts DeadLettered events: records the sink stored
	// as dead letters.
	DeadLettered int64
	// LogChanged counts LogChanged events: claims refused because the
	// log under the checkpoint changed.
	LogChanged int64
	// LostToRetention sums LogChanged.NewlyLost: records deleted before
	// they were applied, as refused claims found them
	// (docs/design.md#log-identity), each once: a blocked partition's
	// re-claims do not count it again.
	LostToRetention int64
	// Misrouted counts Misrouted events: records whose key maps to
	// another partition under Config.Partitioner.
	Misrouted int64
	// Discarded counts Discarded events: the sink's answers to claims
	// (and refused writes) of tenures that were no longer their
	// partition's when the answer came (revoked, lost or replaced
	// meanwhile): a tenure that is gone never acts, so each is dropped.
	Discarded int64
}

// statsObserver derives a Worker's Stats from its events. The Worker
// installs it first, ahead of every other Observer.
type statsObserver struct {
	assigned, revoked, lost, claims, takeovers                 atomic.Int64
	fencedClaims, fencedApplies, fenceResets, resourceRefusals atomic.Int64
	memberChanges                                              atomic.Int64
	batches, records, skipped, duplicates, redrives, withoutID atomic.Int64
	retries, pauses, deadLettered, logChanged, lostToRetention atomic.Int64
	misrouted, discarded                                       atomic.Int64
}

// Observe counts e into the field (or fields) it feeds: see Stats.
func (s *statsObserver) Observe(e Event) {
	switch e := e.(type) {
	case Assigned:
		s.assigned.Add(1)
	case Revoked:
		s.revoked.Add(1)
	case Lost:
		s.lost.Add(1)
	case Claimed:
		s.claims.Add(1)
		if e.TookOver != nil {
			s.takeovers.Add(1)
		}
	case Fenced:
		if e.Op == sink.OpClaim {
			s.fencedClaims.Add(1)
		} else {
			s.fencedApplies.Add(1)
		}
	case Blocked:
		switch e.Cause {
		case BlockFenceReset:
			s.fenceResets.Add(1)
		case BlockResourceFenced:
			s.resourceRefusals.Add(1)
		case BlockMemberChanged:
			s.memberChanges.Add(1)
		}
	case Applied:
		s.batches.Add(1)
		s.records.Add(int64(e.Applied))
		s.skipped.Add(int64(e.Skipped))
		s.duplicates.Add(int64(e.Duplicates))
		s.redrives.Add(int64(e.OtherGroup))
		s.withoutID.Add(int64(e.WithoutID))
	case Stalled:
		s.retries.Add(1)
	case Paused:
		s.pauses.Add(1)
	case DeadLettered:
		s.deadLettered.Add(1)
	case LogChanged:
		s.logChanged.Add(1)
		s.lostToRetention.Add(e.NewlyLost)
	case Misrouted:
		s.misrouted.Add(1)
	case Discarded:
		s.discarded.Add(1)
	}
}

// stats returns the counts so far.
func (s *statsObserver) stats() Stats {
	return Stats{
		Assigned: s.assigned.Load(), Revoked: s.revoked.Load(), Lost: s.lost.Load(),
		Claims: s.claims.Load(), Takeovers: s.takeovers.Load(),
		FencedClaims: s.fencedClaims.Load(), FencedApplies: s.fencedApplies.Load(),
		FenceResets: s.fenceResets.Load(), ResourceRefusals: s.resourceRefusals.Load(),
		MemberChanges: s.memberChanges.Load(),
		Batches:       s.batches.Load(), Records: s.records.Load(), Skipped: s.skipped.Load(),
		Duplicates: s.duplicates.Load(), RedrivesSkipped: s.redrives.Load(), WithoutID: s.withoutID.Load(),
		Retries: s.retries.Load(), Pauses: s.pauses.Load(), DeadLettered: s.deadLettered.Load(),
		LogChanged: s.logChanged.Load(), LostToRetention: s.lostToRetention.Load(),
		Misrouted: s.misrouted.Load(), Discarded: s.discarded.Load(),
	}
}

// Stats returns the Worker's cumulative counts of its events (see Stats
// for which event feeds which field).
func (w *Worker[Tx]) Stats() Stats { return w.stats.stats() }
