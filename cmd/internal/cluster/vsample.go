package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/internal/invariants"
	"github.com/workrouter/workrouter/internal/topicid"
	"github.com/workrouter/workrouter/sink"
)

// ErrLogChanged is matched by the error of SampleCommitted (and Check) when
// the topic's ID changed while the committed offsets were read: they may
// be of either log, so they are not compared with anything.
var ErrLogChanged = errors.New("cluster: the topic's ID changed while its committed offsets were read")

// readCommitted reads group's committed offsets of topic, by partition,
// between two reads of the topic's ID from the brokers; it returns that ID
// (empty for a broker without topic IDs), or fails with ErrLogChanged if
// the two reads differ.
func readCommitted(ctx context.Context, cl *kgo.Client, group, topic string) (string, map[int32]int64, error) {
	before, err := topicid.Read(ctx, cl, topic)
	if err != nil {
		return "", nil, fmt.Errorf("cluster: %w", err)
	}
	fetched, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err == nil {
		err = fetched.Error()
	}
	if err != nil {
		return "", nil, fmt.Errorf("cluster: fetching committed offsets: %w", err)
	}
	after, err := topicid.Read(ctx, cl, topic)
	if err != nil {
		return "", nil, fmt.Errorf("cluster: %w", err)
	}
	if after != before {
		return "", nil, fmt.Errorf("%w: %s, then %s", ErrLogChanged, topicid.Format(before), topicid.Format(after))
	}
	out := map[int32]int64{}
	fetched.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	log := ""
	if before != ([16]byte{}) {
		log = topicid.Format(before)
	}
	return log, out, nil
}

// SampleCommitted observes V's "no committed offset ahead of the sink's
// NextOffset" once: it reads group's committed offsets of topic through cl
// (with the topic's ID, read before and after them), then the sink's fence
// rows, in that order (see invariants.Sample), and returns one sample per
// partition that has a committed offset, stamped with the time of the
// committed read. A partition the sink has no fence for is sampled with
// NextOffset 0 on an unknown log. It fails with ErrLogChanged when the
// topic's ID changed during the read. Any goroutine may call it.
func (s *Store) SampleCommitted(ctx context.Context, cl *kgo.Client, group, topic string) ([]invariants.Sample, error) {
	at := time.Now()
	log, committed, err := readCommitted(ctx, cl, group, topic)
	if err != nil {
		return nil, err
	}
	fences, err := s.Fences(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: reading fences: %w", err)
	}
	next := map[int32]sink.Fence{}
	for _, f := range fences {
		if f.Scope.Group == group && f.Scope.Topic == topic {
			next[f.Scope.Partition] = f
		}
	}
	var out []invariants.Sample
	for _, p := range slices.Sorted(maps.Keys(committed)) {
		c, f := committed[p], next[p]
		out = append(out, invariants.Sample{At: at, Partition: p, Committed: c, Next: f.NextOffset, CommittedLog: log, NextLog: f.TopicID})
	}
	return out, nil
}
