package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
)

// routingReport is status's check of recent records' keys against the
// partitioner the workers use (docs/design.md#hazard-11).
type routingReport struct {
	Partitioner string `json:"partitioner"`
	// Checked is how many keyed records were read.
	Checked int `json:"checked"`
	// Misrouted is how many of them sit on another partition than the one
	// the partitioner maps their key to.
	Misrouted int `json:"misrouted"`
	// ByPartition counts the misrouted records by the partition they are on.
	ByPartition map[int32]int `json:"misrouted_by_partition,omitempty"`
	// Example is the first misrouted record found.
	Example *misroutedExample `json:"example,omitempty"`
	// Partial says the check ran out of time before reading every record
	// it meant to.
	Partial bool `json:"partial,omitempty"`
}

type misroutedExample struct {
	Key       string `json:"key"`
	Partition int32  `json:"partition"`
	Expected  int32  `json:"expected"`
}

// line is status's one-line summary of the check.
func (r routingReport) line() string {
	partial := ""
	if r.Partial {
		partial = " (partial: not every record could be read in time)"
	}
	if r.Misrouted == 0 {
		return fmt.Sprintf("routing: %d recent records checked against %s: every key is on its partition%s", r.Checked, r.Partitioner, partial)
	}
	parts := make([]int32, 0, len(r.ByPartition))
	for p := range r.ByPartition {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	return fmt.Sprintf("routing: %d of %d recent records are MISROUTED under %s (on partitions %s; e.g. key %q is on %d, %s maps it to %d): "+
		"a producer partitions keys differently, so one key's commands can be applied out of order; see --partitioner%s",
		r.Misrouted, r.Checked, r.Partitioner, joinInt32(parts), r.Example.Key, r.Example.Partition, r.Partitioner, r.Example.Expected, partial)
}

// checkRouting reads the last n records of every partition of rep's topic
// (with a client built from opts) and checks their keys against p. It
// gives up reading, and marks the report partial, after a few seconds or
// when ctx ends.
func checkRouting(ctx context.Context, opts []kgo.Opt, rep *statusReport, p envelope.Partitioner, n int) error {
	count := int32(len(rep.Partitions))
	r := &routingReport{Partitioner: p.String(), ByPartition: map[int32]int{}}
	rep.Routing = r
	from := map[int32]kgo.Offset{}
	want := map[int32]int64{} // partition → end offset still to reach
	for _, sp := range rep.Partitions {
		if sp.EndOffset <= sp.StartOffset {
			continue
		}
		start := max(sp.StartOffset, sp.EndOffset-int64(n))
		from[sp.Partition] = kgo.NewOffset().At(start)
		want[sp.Partition] = sp.EndOffset
	}
	if len(from) == 0 || count == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{rep.Topic: from}))...)
	if err != nil {
		return fmt.Errorf("checking keys: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for len(want) > 0 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(rec *kgo.Record) {
			if end, ok := want[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(want, rec.Partition)
			}
			if len(rec.Key) == 0 {
				return
			}
			r.Checked++
			if e := p.Partition(rec.Key, count); e != rec.Partition {
				r.Misrouted++
				r.ByPartition[rec.Partition]++
				if r.Example == nil {
					r.Example = &misroutedExample{Key: string(rec.Key), Partition: rec.Partition, Expected: e}
				}
			}
		})
	}
	r.Partial = len(want) > 0
	if len(r.ByPartition) == 0 {
		r.ByPartition = nil
	}
	return nil
}
