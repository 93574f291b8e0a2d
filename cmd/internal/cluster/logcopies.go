package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/router"
)

// LogCopies reads topic from the start to the end of every partition and
// returns the records that carry a ledger command already carried by an
// earlier record of the log, by position ("partition/offset", see
// PositionID) → command ID.
//
// The harnesses send each command ID once, so such a copy was written by
// the broker: a producer's retry of a batch that the broker had written
// but not acknowledged before it was killed, accepted again because the
// restarted broker (kfake) does not rebuild its idempotent-producer state
// from its log. Each copy is a record of its own, which a worker applies
// like any other; Check takes that into account (CheckConfig.LogCopies).
func LogCopies(ctx context.Context, brokers []string, topic string) (map[string]string, error) {
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	adm.Close()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: listing end offsets: %w", err)
	}
	remaining := map[int32]int64{}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
			start[topic][o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	out := map[string]string{}
	if len(remaining) == 0 {
		return out, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(start))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	seen := map[string]bool{}
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("cluster: reading the log: %w", err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, fmt.Errorf("cluster: reading the log: %w", ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= remaining[r.Partition] {
				delete(remaining, r.Partition)
			}
			cmd, err := router.Decode(r)
			if err != nil {
				return
			}
			var p struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(cmd.Payload, &p) != nil || p.ID == "" {
				return
			}
			if seen[p.ID] {
				out[PositionID(r.Partition, r.Offset)] = p.ID
			}
			seen[p.ID] = true
		})
	}
	return out, nil
}
