package consumer

import (
	"context"
	"errors"
	"log/slog"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// NewLogObserver returns an Observer that logs every event to logger, with
// the token's group, topic, partition, epoch and member as attributes:
// assignments, claims, revokes and losses at INFO; stalls, fetch errors
// and misrouted records at WARN; fenced claims and applies, and a Worker that stopped by itself,
// at ERROR; applied batches, commits and lag at DEBUG. The messages are
// for people: programs should observe the events themselves (or their
// consumer/eventlog stream), never parse the log. It may be used from any
// goroutine.
func NewLogObserver(logger *slog.Logger) Observer { return logObserver{logger} }

type logObserver struct{ l *slog.Logger }

func tokenAttrs(t epochs.Token, more ...any) []any {
	return append([]any{"group", t.Group, "topic", t.Topic, "partition", t.Partition, "epoch", t.Epoch, "member", t.Member}, more...)
}

// Observe logs e.
func (o logObserver) Observe(e Event) {
	l := o.l
	switch e := e.(type) {
	case Assigned:
		l.Info("partition assigned", tokenAttrs(e.Token)...)
	case Claimed:
		l.Info("partition claimed", tokenAttrs(e.Token, "next_offset", e.NextOffset)...)
	case Applied:
		if l.Enabled(context.Background(), slog.LevelDebug) {
			l.Debug("batch applied", tokenAttrs(e.Token, "first_offset", e.FirstOffset, "next_offset", e.NextOffset,
				"records", e.Records, "applied", e.Applied, "skipped", e.Skipped, "duration", e.Duration)...)
		}
	case Fenced:
		if e.Op == sink.OpClaim {
			l.Error("claim fenced; partition stopped", tokenAttrs(e.Token, "err", e.Err)...)
		} else {
			l.Error("apply fenced; partition stopped", tokenAttrs(e.Token, "err", e.Err, "first_offset", e.FirstOffset, "records", e.Records)...)
		}
	case Stalled:
		if e.Op == sink.OpClaim {
			l.Warn("claim failed; retrying", tokenAttrs(e.Token, "err", e.Err, "attempt", e.Attempt, "since", e.Since, "backoff", e.Backoff)...)
		} else {
			l.Warn("apply failed; retrying batch", tokenAttrs(e.Token, "err", e.Err, "cause", e.Cause, "first_offset", e.FirstOffset,
				"attempt", e.Attempt, "since", e.Since, "backoff", e.Backoff)...)
		}
	case Revoked:
		if e.TimedOut {
			l.Warn("in-flight batch exceeded revoke timeout; cancelled it", tokenAttrs(e.Token)...)
		}
		l.Info("partition revoked", tokenAttrs(e.Token, "next_offset", e.NextOffset)...)
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
		l.Warn("fetch error", "topic", e.Topic, "partition", e.Partition, "err", e.Err)
	case Lag:
		l.Debug("lag", "topic", e.Topic, "lag", e.Lag)
	case Misrouted:
		msg := "misrouted record: its key maps to another partition, so a producer partitions keys differently and the key's commands may be applied out of order; applied anyway"
		if e.Refused {
			msg = "misrouted record: its key maps to another partition, so a producer partitions keys differently; refused (the partition stalls)"
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
