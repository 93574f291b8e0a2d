package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaSinkRowsExactlyOnce runs W2-kafka, W2-kafka-b4096 and B3-kafka small on the
// embedded broker and checks what they measure is the same work, done
// exactly once: every pre-loaded command made exactly one output record
// that a read_committed reader sees (by the command ID each output
// carries), and no other record; the group's committed offsets are past
// every input.
func TestKafkaSinkRowsExactlyOnce(t *testing.T) {
	const n = 3000
	env, _ := extraEnv(t, n)
	for _, tc := range []struct {
		id  string
		run func(ctx context.Context, tp kafkaSinkTopics) (Result, error)
	}{
		{"W2-kafka", func(ctx context.Context, tp kafkaSinkTopics) (Result, error) {
			return w2Kafka(ctx, env, "W2-kafka", sqlMaxBatch, n, "", tp)
		}},
		{"W2-kafka-b4096", func(ctx context.Context, tp kafkaSinkTopics) (Result, error) {
			return w2Kafka(ctx, env, "W2-kafka-b4096", KafkaSinkBigBatch, n, "", tp)
		}},
		{"B3-kafka", func(ctx context.Context, tp kafkaSinkTopics) (Result, error) { return b3Kafka(ctx, env, n, "", tp.out) }},
	} {
		t.Run(tc.id, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			tp, drop, err := newKafkaSinkTopics(ctx, env, "test-"+strings.ToLower(tc.id))
			if err != nil {
				t.Fatal(err)
			}
			defer drop()
			r, err := tc.run(ctx, tp)
			if err != nil {
				t.Fatalf("%s: %v", tc.id, err)
			}
			t.Logf("%s %q: records=%d elapsed=%s extra=%q", r.ID, r.Name, r.Records, r.Elapsed, r.Extra)
			if r.ID != tc.id || r.Records != n || r.Skipped != "" || r.Throughput() <= 0 {
				t.Fatalf("%s: got %+v, want %d records", tc.id, r, n)
			}
			outs := readCommittedAll(t, ctx, env, tp.out)
			seen := map[string]int{}
			for _, rec := range outs {
				id := ""
				for _, h := range rec.Headers {
					if h.Key == kafkaOutIDHeader {
						id = string(h.Value)
					}
				}
				seen[id]++
			}
			if len(outs) != n {
				t.Errorf("%s: a read_committed reader sees %d output records, want %d", tc.id, len(outs), n)
			}
			for i := range n {
				if id := CommandID(env, i); seen[id] != 1 {
					t.Errorf("%s: command %d (%s) has %d outputs, want 1", tc.id, i, id, seen[id])
				}
				delete(seen, CommandID(env, i))
			}
			if len(seen) != 0 {
				t.Errorf("%s: outputs of no pre-loaded command: %v", tc.id, seen)
			}
		})
	}
}

// readCommittedAll returns every record of topic that a read_committed
// consumer sees: it produces a sentinel record to each partition after
// the writers are done and reads up to every sentinel, so that no record
// of a transaction that ended before is missed (an open transaction would
// block the read until ctx ends).
func readCommittedAll(t *testing.T, ctx context.Context, env *Env, topic string) []*kgo.Record {
	t.Helper()
	const sentinel = "\x00bench-sentinel"
	pcl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	adm := kadm.NewClient(pcl)
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	parts := td[topic].Partitions.Numbers()
	for _, p := range parts {
		if err := pcl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(sentinel)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for done := map[int32]bool{}; len(done) < len(parts); {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s read_committed: %v (sentinels of %d of %d partitions seen)", topic, err, len(done), len(parts))
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("reading %s partition %d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == sentinel {
				done[r.Partition] = true
				return
			}
			out = append(out, r)
		})
	}
	if len(parts) == 0 {
		t.Fatalf("topic %s has no partitions", topic)
	}
	return out
}

// TestKafkaSinkRowsCommitOffsets checks that both rows' groups commit
// their offsets past every input (the offsets are part of the measured
// transactions, not a separate commit after the clock stops).
func TestKafkaSinkRowsCommitOffsets(t *testing.T) {
	const n = 1200
	env, _ := extraEnv(t, n)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	for _, id := range []string{"W2-kafka", "B3-kafka"} {
		before := groupsOf(t, ctx, adm)
		var r Result
		if id == "W2-kafka" {
			r, err = W2Kafka(ctx, env)
		} else {
			r, err = B3Kafka(ctx, env)
		}
		if err != nil || r.Records != n {
			t.Fatalf("%s: %+v, %v", id, r, err)
		}
		var group string
		for g := range groupsOf(t, ctx, adm) {
			if !before[g] && strings.HasPrefix(g, "bench-"+id) {
				group = g
			}
		}
		if group == "" {
			t.Fatalf("%s: no new group bench-%s-…", id, id)
		}
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == env.Topic {
				sum += o.At
			}
		})
		if sum != n {
			t.Errorf("%s: group %s committed offsets summing to %d, want %d", id, group, sum, n)
		}
	}
}

func groupsOf(t *testing.T, ctx context.Context, adm *kadm.Client) map[string]bool {
	t.Helper()
	gs, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, g := range gs.Groups() {
		out[g] = true
	}
	return out
}
