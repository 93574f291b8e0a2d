package cluster

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
)

// LogScan is what ScanLog found in a topic's log.
type LogScan struct {
	// Copies are the records that carry a command ID (envelope.IDHeader)
	// already carried by an earlier record of the log, by position
	// ("partition/offset", see PositionID) → command ID: a retried send
	// (Producer.Resend), or a producer's retry of a batch that the broker
	// had written but not acknowledged before it was killed, accepted
	// again because the restarted broker (kfake) does not rebuild its
	// idempotent-producer state from its log. A worker whose sink
	// deduplicates skips each of them as a duplicate (consumer's
	// DuplicateSkipped); Check counts any second posting of a command ID
	// as X.
	Copies map[string]string
	// AfterGap are the positions of the records right after an offset
	// without a record that a read_committed reader sees (a transaction
	// marker, an aborted record): a worker reaches such a record with its
	// checkpoint below the record's offset.
	AfterGap map[string]bool
}

// ScanLog reads topic from the start to the end of every partition as the
// workers do (read_committed), with the transaction markers, and returns
// what it found (LogScan).
func ScanLog(ctx context.Context, brokers []string, topic string) (LogScan, error) {
	out := LogScan{Copies: map[string]string{}, AfterGap: map[string]bool{}}
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return out, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	adm.Close()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return out, fmt.Errorf("cluster: listing end offsets: %w", err)
	}
	remaining := map[int32]int64{}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
			start[topic][o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(remaining) == 0 {
		return out, nil
	}
	// Control records are kept so that a partition whose log ends with a
	// marker is read to its end; aborted records are dropped, as the
	// workers drop them.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(start),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return out, err
	}
	defer cl.Close()
	seen := map[string]bool{}
	prev := map[int32]int64{} // the last data record's offset + 1 per partition
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("cluster: reading the log: %w", err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return out, fmt.Errorf("cluster: reading the log: %w", ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= remaining[r.Partition] {
				delete(remaining, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			if r.Offset != prev[r.Partition] {
				out.AfterGap[PositionID(r.Partition, r.Offset)] = true
			}
			prev[r.Partition] = r.Offset + 1
			cmd, err := envelope.Decode(r)
			if err != nil || cmd.ID == "" {
				return
			}
			if seen[cmd.ID] {
				out.Copies[PositionID(r.Partition, r.Offset)] = cmd.ID
			}
			seen[cmd.ID] = true
		})
	}
	return out, nil
}
