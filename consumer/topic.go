package consumer

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TopicMissingErrorAfter is how long a Worker's topic may be missing before
// the logging observer (NewLogObserver) reports it at ERROR instead of WARN.
// A topic that does not exist right after a deployment is usually one
// that is still being created; one that is still missing a minute later is
// a mistake (a typo in the topic name, the wrong brokers, a topic that was
// never created) that nothing will fix by itself.
const TopicMissingErrorAfter = time.Minute

// MinTopicCheckInterval is the shortest time between two checks of whether
// the Worker's topic exists, whatever Config.LagInterval is: it bounds how
// often TopicMissing is reported (and logged).
const MinTopicCheckInterval = 5 * time.Second

// topicWatch remembers what the Worker's last checks of its topic found.
// Only the lag loop's goroutine uses it.
type topicWatch struct {
	last     time.Time // when the topic was last checked (zero: never)
	missing  bool
	since    time.Time // first check that found it missing, in this streak
	attempts int       // checks that found it missing, in this streak
}

// watchTopic checks, at most every MinTopicCheckInterval, whether the
// Worker's topic exists, from the brokers' metadata. While it does not, it
// reports TopicMissing at every check; once it exists again it reports
// TopicFound. A check that cannot reach the brokers says nothing about the
// topic (the lag loop reports that failure itself). It is called from the
// lag loop's goroutine: once when the Worker starts, then every
// LagInterval.
func (w *Worker[Tx]) watchTopic(adm *kadm.Client, tw *topicWatch) {
	now := time.Now()
	if !tw.last.IsZero() && now.Sub(tw.last) < MinTopicCheckInterval {
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, max(w.cfg.LagInterval, MinTopicCheckInterval))
	topics, err := adm.ListTopics(ctx, w.cfg.Topic)
	cancel()
	if err != nil {
		return
	}
	td, ok := topics[w.cfg.Topic]
	missing := !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition)
	if !missing && td.Err != nil {
		return // some other error (authorization, a leader election): not a verdict
	}

	tw.last = now
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
