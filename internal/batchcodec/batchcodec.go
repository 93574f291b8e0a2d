// Package batchcodec reads which compression codec each record batch of a
// topic was stored with, from a raw Fetch: clients decompress
// transparently, so only the batches' attributes show what a producer put
// on the wire. For tests of the producers' compression.
package batchcodec

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Names are the codecs of a batch's attributes (bits 0-2), by number.
var Names = map[int8]string{0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

// Count fetches every partition of topic from offset 0 (up to 16 MiB a
// partition) and returns how many batches, and records in them, were
// stored with each codec (by Names).
func Count(ctx context.Context, cl *kgo.Client, topic string) (batches, records map[string]int, err error) {
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		return nil, nil, fmt.Errorf("batchcodec: topic %s: %v", topic, td.Err)
	}
	batches, records = map[string]int{}, map[string]int{}
	for _, p := range td.Partitions {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxBytes = 16 << 20
		req.MaxWaitMillis = 0
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, td.ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p.Partition, 0, 16<<20
		rp.CurrentLeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(p.Leader)))
		if err != nil {
			return nil, nil, err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return nil, nil, err
		}
		for _, t := range resp.Topics {
			for _, fp := range t.Partitions {
				if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
					return nil, nil, fmt.Errorf("batchcodec: %s/%d: %w", topic, fp.Partition, err)
				}
				b := fp.RecordBatches
				for len(b) >= 12 {
					n := int(int32(binary.BigEndian.Uint32(b[8:12]))) + 12
					if n > len(b) {
						break // a partial batch at the end of the response
					}
					var rb kmsg.RecordBatch
					if err := rb.ReadFrom(b[:n]); err != nil {
						return nil, nil, fmt.Errorf("batchcodec: %s/%d: %w", topic, fp.Partition, err)
					}
					name := Names[int8(rb.Attributes&0x07)]
					batches[name]++
					records[name] += int(rb.NumRecords)
					b = b[n:]
				}
			}
		}
	}
	return batches, records, nil
}
