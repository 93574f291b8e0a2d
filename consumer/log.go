package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// NewLogObserver returns an Observer that logs every event to logger, with
// the token's group, topic, partition, epoch and member as attributes:
// assignments, claims, revokes and losses, skipped redrives for another
// group, and skipped duplicates (one line per batch that had any; each
// duplicate's offset and ID at DEBUG) at INFO; stalls, dead letters,
// misrouted records, fetch errors and a missing topic at WARN (a stall at ERROR once it lasts
// a minute, a missing topic once it has been missing for a minute; its
// reappearance at INFO); fenced claims and
// applies, changed logs, blocked partitions, a recreated topic and a
// Worker that stopped by itself at ERROR; applied batches, commits, lag
// and fetch pauses at DEBUG. What repeats is rate-limited, never dropped silently: a stall,
// a blocked partition or a fetch error is logged for its first three
// occurrences, then at most once per 30 s with the count not logged in
// between. The messages are for people: programs should observe the
// events themselves (or their consumer/eventlog stream), never parse the
// log. It may be used from any goroutine.
func NewLogObserver(logger *slog.Logger) Observer {
	return &logObserver{l: logger, last: map[int32]time.Time{}, muted: map[int32]int{}, repeats: map[string]repeat{}}
}

// A stall is logged at WARN, then at ERROR once it lasts stallEscalation;
// after its first stallVerbose attempts it is logged at most once per
// stallEvery (with the number of attempts not logged in between). Blocked
// claims (retried every ReclaimInterval) are logged at most once per
// stallEvery too.
const (
	stallEscalation = time.Minute
	stallVerbose    = 3
	stallEvery      = 30 * time.Second
)

type logObserver struct {
	l *slog.Logger

	mu    sync.Mutex
	last  map[int32]time.Time // partition → when its stall or block was last logged
	muted map[int32]int       // partition → attempts not logged since
	// repeats counts events that repeat under a key (fetch errors).
	repeats map[string]repeat
}

// repeat is how often an event under one key was seen and logged.
type repeat struct {
	n, muted int
	last     time.Time
}

// admit reports whether a stall's attempt of partition p is logged now,
// and how many were not logged before it.
func (o *logObserver) admit(p int32, attempt int) (bool, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if attempt <= stallVerbose || time.Since(o.last[p]) >= stallEvery {
		o.last[p] = time.Now()
		muted := o.muted[p]
		o.muted[p] = 0
		return true, muted
	}
	o.muted[p]++
	return false, 0
}

// admitKey reports whether an event repeating under key (a fetch error of
// one partition) is logged now, and how many repeats were not logged
// before it: the first stallVerbose, then one per stallEvery.
func (o *logObserver) admitKey(key string) (bool, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.repeats) >= 1024 { // bounded: errors whose text varies without end
		clear(o.repeats)
	}
	r := o.repeats[key]
	r.n++
	if r.n <= stallVerbose || time.Since(r.last) >= stallEvery {
		muted := r.muted
		r.last, r.muted = time.Now(), 0
		o.repeats[key] = r
		return true, muted
	}
	r.muted++
	o.repeats[key] = r
	return false, 0
}

func tokenAttrs(t epochs.Token, more ...any) []any {
	return append([]any{"group", t.Group, "topic", t.Topic, "partition", t.Partition, "epoch", t.Epoch, "member", t.Member}, more...)
}

// Observe logs e.
func (o *logObserver) Observe(e Event) {
	l := o.l
	switch e := e.(type) {
	case Assigned:
		l.Info("partition assigned", tokenAttrs(e.Token)...)
	case Claimed:
		if e.TookOver != nil {
			l.Warn("partition taken over from a holder of an earlier incarnation of the group (a proven claim, audited in the fence history as a reset)",
				tokenAttrs(e.Token, "next_offset", e.NextOffset, "cleared_holder", e.TookOver.Fenced.Stored.String(),
					"group_epoch", e.TookOver.GroupEpoch, "evidence", e.TookOver.Evidence)...)
			break
		}
		l.Info("partition claimed", tokenAttrs(e.Token, "next_offset", e.NextOffset)...)
	case Applied:
		o.mu.Lock()
		delete(o.last, e.Token.Partition)
		o.mu.Unlock()
		if l.Enabled(context.Background(), slog.LevelDebug) {
			l.Debug("batch applied", tokenAttrs(e.Token, "first_offset", e.FirstOffset, "next_offset", e.NextOffset,
				"records", e.Records, "applied", e.Applied, "skipped", e.Skipped, "duplicates", e.Duplicates,
				"other_group", e.OtherGroup, "without_id", e.WithoutID, "duration", e.Duration)...)
		}
		if e.Duplicates > 0 {
			// One line per batch; each record's offset and ID are at DEBUG.
			l.Info("duplicate commands skipped: their IDs were applied already in this partition's scope; the partition goes on",
				tokenAttrs(e.Token, "duplicates", e.Duplicates, "first_offset", e.FirstOffset, "next_offset", e.NextOffset)...)
		}
	case DuplicateSkipped:
		// The batch's Applied event says how many at INFO.
		l.Debug("duplicate command skipped", tokenAttrs(e.Token, "offset", e.Offset, "id", e.ID)...)
	case RedriveSkipped:
		l.Info("redrive for another consumer group skipped: no handler called, its ID not recorded; the partition goes on",
			tokenAttrs(e.Token, "offset", e.Offset, "id", e.ID, "redrive_for", e.For)...)
	case Fenced:
		if e.Op == sink.OpClaim {
			l.Error("claim fenced; partition stopped", tokenAttrs(e.Token, "err", e.Err)...)
		} else {
			l.Error("apply fenced; partition stopped", tokenAttrs(e.Token, "err", e.Err, "first_offset", e.FirstOffset, "records", e.Records)...)
		}
	case Stalled:
		ok, muted := o.admit(e.Token.Partition, e.Attempt)
		if !ok {
			return
		}
		level := slog.LevelWarn
		if time.Since(e.Since) >= stallEscalation {
			level = slog.LevelError
		}
		msg := map[sink.Op]string{sink.OpClaim: "claim failed; retrying", sink.OpApply: "apply failed; retrying",
			sink.OpDeadLetter: "dead letter failed; retrying"}[e.Op]
		attrs := []any{"err", e.Err, "cause", e.Cause, "offset", e.FirstOffset,
			"attempt", e.Attempt, "since", e.Since, "stalled_for", time.Since(e.Since).Round(time.Millisecond), "backoff", e.Backoff,
			"attempts_not_logged", muted}
		if e.Prefix > 0 {
			msg = "apply failed on a record behind a good prefix; applying the prefix, then retrying the record alone"
			attrs = append(attrs, "prefix", e.Prefix)
		}
		l.Log(context.Background(), level, msg, tokenAttrs(e.Token, attrs...)...)
	case DeadLettered:
		l.Warn("record dead-lettered; the partition goes on", tokenAttrs(e.Token, "offset", e.Offset, "key", string(e.Key), "type", e.Type,
			"reason", e.Reason, "err", e.Err, "attempts", e.Attempts, "dead_letter_id", e.ID)...)
	case LogChanged:
		l.Error("claim refused: the log under the checkpoint changed; the partition waits for an operator to reset its fence (admin.Reset, docs/design.md#admin-reset), and is claimed again periodically",
			tokenAttrs(e.Token, "err", e.Err, "records_lost", e.Err.Lost())...)
	case Blocked:
		if e.Cause == BlockMemberChanged {
			l.Warn("the sink refused a tenure of a member ID this client left (it rejoined the group under a new one and kept the partition); claiming the partition again with the current token",
				tokenAttrs(e.Token, "err", e.Err, "cause", e.Cause)...)
		} else if ok, _ := o.admit(e.Token.Partition, stallVerbose+1); ok {
			l.Error("partition blocked: its claim is refused until an operator acts; claiming again periodically",
				tokenAttrs(e.Token, "err", e.Err, "cause", e.Cause, "since", e.Since, "blocked_for", time.Since(e.Since).Round(time.Millisecond))...)
		}
	case Paused:
		l.Debug("partition's queue full; fetching it paused", tokenAttrs(e.Token, "queued", e.Queued)...)
	case Resumed:
		l.Debug("partition's queue drained to half; fetching it resumed", tokenAttrs(e.Token, "queued", e.Queued)...)
	case Discarded:
		l.Warn("answer of the sink to a tenure that is gone (revoked, lost or replaced meanwhile) discarded; the partition's current tenure claims for itself",
			tokenAttrs(e.Token, "op", string(e.Op), "err", e.Err)...)
	case Revoked:
		if e.TimedOut {
			l.Warn("in-flight batch exceeded revoke timeout; cancelled it", tokenAttrs(e.Token)...)
		}
		if e.NextOffset >= 0 {
			l.Info("partition revoked", tokenAttrs(e.Token, "next_offset", e.NextOffset)...)
		} else {
			l.Info("partition revoked before its tenure claimed it", tokenAttrs(e.Token)...)
		}
	case Lost:
		if e.TimedOut {
			l.Warn("in-flight batch exceeded revoke timeout; cancelled it", tokenAttrs(e.Token)...)
		}
		l.Info("partition lost", tokenAttrs(e.Token)...)
	case Committed:
		l.Debug("offsets committed", "group", e.Group, "topic", e.Topic, "offsets", e.Offsets)
	case CommitFailed:
		l.Debug("offset commit not accepted; retrying for partitions still owned", "group", e.Group, "topic", e.Topic, "offsets", e.Offsets, "err", e.Err)
	case FetchFailed:
		if ok, muted := o.admitKey(fmt.Sprintf("fetch/%d/%v", e.Partition, e.Err)); ok {
			switch {
			case e.Topic == "":
				l.Warn("consumer group or client error (joining, syncing or heartbeating)", "err", e.Err, "repeats_not_logged", muted)
			case e.Partition < 0:
				l.Warn("fetch error", "topic", e.Topic, "err", e.Err, "repeats_not_logged", muted)
			default:
				l.Warn("fetch error", "topic", e.Topic, "partition", e.Partition, "err", e.Err, "repeats_not_logged", muted)
			}
		}
	case Lag:
		l.Debug("lag", "topic", e.Topic, "lag", e.Lag)
	case TopicMissing:
		logTopicMissing(l, e)
	case TopicRecreated:
		l.Error("topic deleted and created again under this worker: its partitions stop and the worker rejoins; each waits for an operator's fence reset that restarts it on the new log (admin.Reset, docs/design.md#admin-reset)",
			"topic", e.Topic, "old_topic_id", e.OldID, "new_topic_id", e.NewID, "partitions", e.Partitions)
	case TopicFound:
		l.Info("topic now exists; consuming it", "topic", e.Topic, "missing_since", e.MissingSince, "checks", e.Attempts)
	case Misrouted:
		msg := "misrouted record: its key maps to another partition, so a producer partitions keys differently and the key's commands may be applied out of order; applied anyway"
		if e.Refused {
			msg = "misrouted record: its key maps to another partition, so a producer partitions keys differently; refused: dead-lettered, or the partition stalls where the sink stores no dead letters"
		}
		l.Warn(msg, tokenAttrs(e.Token, "offset", e.Offset, "key", string(e.Key), "expected_partition", e.Expected,
			"partitioner", e.Partitioner.String(), "partitions", e.Partitions)...)
	case Stopped:
		if errors.Is(e.Err, ErrClosed) {
			l.Info("worker stopped", "reason", e.Err)
		} else {
			l.Error("worker stopped by itself", "err", e.Err)
		}
	}
}

// logTopicMissing logs a TopicMissing event: at WARN at first, at ERROR
// once the topic has been missing for topicMissingErrorAfter.
func logTopicMissing(l *slog.Logger, e TopicMissing) {
	level := slog.LevelWarn
	missing := time.Since(e.Since)
	if missing >= topicMissingErrorAfter {
		level = slog.LevelError
	}
	l.Log(context.Background(), level, "topic does not exist; the worker waits for it and consumes nothing",
		"topic", e.Topic, "brokers", strings.Join(e.Brokers, ","), "missing_for", missing.Round(time.Second), "checks", e.Attempts,
		"hint", "create the topic, or check the worker's topic name and brokers")
}
