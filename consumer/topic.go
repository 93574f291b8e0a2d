package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/workrouter/workrouter/internal/topicid"
)

// topicMissingErrorAfter is how long a Worker's topic may be missing before
// the logging observer (NewLogObserver) reports it at ERROR instead of WARN.
// A topic that does not exist right after a deployment is usually one
// that is still being created; one that is still missing a minute later is
// a mistake (a typo in the topic name, the wrong brokers, a topic that was
// never created) that nothing will fix by itself.
const topicMissingErrorAfter = time.Minute

// minTopicCheckInterval is the shortest time between two checks of whether
// the Worker's topic exists, whatever Config.LagInterval is: it bounds how
// often TopicMissing is reported (and logged).
const minTopicCheckInterval = 5 * time.Second

// topicWatch remembers what the Worker's last checks of its topic found.
// Only the lag loop's goroutine uses it.
type topicWatch struct {
	last     time.Time // when the topic was last checked (zero: never)
	missing  bool
	since    time.Time // first check that found it missing, in this streak
	attempts int       // checks that found it missing, in this streak
	// id is the topic ID the Worker's client consumes: the first one a
	// check saw, then the one it moved to after a recreation.
	id string
}

// watchTopic checks, at most every minTopicCheckInterval, whether the
// Worker's topic exists, from the brokers' metadata. While it does not, it
// reports TopicMissing at every check; once it exists again it reports
// TopicFound. A check that cannot reach the brokers says nothing about the
// topic (the lag loop reports that failure itself). It is called from the
// lag loop's goroutine: once when the Worker starts, then every
// LagInterval.
func (w *Worker[Tx]) watchTopic(tw *topicWatch) {
	now := time.Now()
	if !tw.last.IsZero() && now.Sub(tw.last) < w.cfg.topicCheckEvery {
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, max(w.cfg.LagInterval, minTopicCheckInterval))
	id, err := topicid.Read(ctx, w.cl, w.cfg.Topic)
	cancel()
	missing := errors.Is(err, kerr.UnknownTopicOrPartition)
	if err != nil && !missing {
		return // unreachable brokers, an authorization error, a leader election: not a verdict
	}

	tw.last = now
	if !missing && id != ([16]byte{}) {
		w.checkTopicID(tw, topicid.Format(id))
	}
	var e Event
	switch {
	case missing:
		if !tw.missing {
			tw.missing, tw.since, tw.attempts = true, now, 0
		}
		tw.attempts++
		e = TopicMissing{Topic: w.cfg.Topic, Brokers: slices.Clone(w.cfg.Brokers), Since: tw.since, Attempts: tw.attempts}
	case tw.missing:
		e = TopicFound{Topic: w.cfg.Topic, MissingSince: tw.since, Attempts: tw.attempts}
		tw.missing, tw.since, tw.attempts = false, time.Time{}, 0
	}
	if e != nil && w.ctx.Err() == nil {
		w.obs.emit(e)
	}
}

// checkTopicID compares the topic ID the brokers report now with the one
// the Worker's client consumes: the first it saw (kgo stays with the first
// instance of a topic and refuses to fetch from a new one, failing with
// UNKNOWN_TOPIC_ID). A different one means the topic was deleted and
// created again (docs/design.md#log-identity). The Worker reports
// TopicRecreated, forgets the old topic and consumes it again, which
// rejoins the group; each partition's claim then finds the changed log and
// waits for an operator's reset, after which the client fetches the new
// log. It is called from the lag loop's goroutine only (tw is its state).
func (w *Worker[Tx]) checkTopicID(tw *topicWatch, id string) {
	if tw.id == "" || tw.id == id {
		tw.id = id
		w.clientTopic.Store(&id)
		return
	}
	if w.ctx.Err() != nil {
		return
	}
	old := tw.id
	tw.id = id
	defer w.clientTopic.Store(&id) // once the client moved
	w.mu.Lock()
	parts := make([]int32, 0, len(w.tenures))
	for p, t := range w.tenures {
		if t.topicID == old {
			parts = append(parts, p)
		}
	}
	w.mu.Unlock()
	slices.Sort(parts)
	w.obs.emit(TopicRecreated{Topic: w.cfg.Topic, OldID: old, NewID: id, Partitions: parts})
	w.cl.PurgeTopicsFromClient(w.cfg.Topic)
	w.cl.AddConsumeTopics(w.cfg.Topic)
}

// topicIDUnknown is called by the poll loop when a fetch of the Worker's
// topic fails with UNKNOWN_TOPIC_ID (a sign the topic was recreated): it
// asks the lag loop to check the topic now rather than at its next tick.
func (w *Worker[Tx]) topicIDUnknown() {
	select {
	case w.topicSig <- struct{}{}:
	default:
	}
}

// checkDeadLetterTopic fails with ErrDeadLetterTopicMissing when the
// brokers say Config.DeadLetterTopic does not exist, and with the
// metadata request's error when they cannot say.
func (w *Worker[Tx]) checkDeadLetterTopic(ctx context.Context) error {
	topic := w.cfg.DeadLetterTopic
	topics, err := kadm.NewClient(w.cl).ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("consumer: cannot read the metadata of the dead-letter topic %q from %v: %w", topic, w.cfg.Brokers, err)
	}
	td, ok := topics[topic]
	switch {
	case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("%w (DeadLetterTopic %q on %v); create it first", ErrDeadLetterTopicMissing, topic, w.cfg.Brokers)
	case td.Err != nil:
		return fmt.Errorf("consumer: cannot read the metadata of the dead-letter topic %q from %v: %w", topic, w.cfg.Brokers, td.Err)
	}
	return nil
}
