package kafka_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/kafka"
)

// BenchmarkConsumeTransformProduce measures consume-transform-produce,
// exactly once, of benchRecords commands over 4 partitions, each turned
// into one output record: by a consumer.Worker on this sink ("sink"),
// its MaxBatch 256 (the default) or 4096 (batch=N), and by franz-go's
// GroupTransactSession, one transaction per poll ("gts"). Each iteration runs both on topics and groups of their own,
// alternating which goes first so that background load hits both alike,
// and times each from its start until the group's committed offsets are
// past every input. It reports both rates and sink/gts, and each side's
// transactions per run (the sink's counted by Stats.Transactions: its
// Applies, sink-applies/run, share them), records per transaction and
// the time from its start to its first record handled (startup-ms). On the real
// cluster when WORKROUTER_TEST_BROKERS is set, on kfake otherwise.
func BenchmarkConsumeTransformProduce(b *testing.B) {
	for _, n := range []int{256, 4096} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) { benchCTP(b, n) })
	}
}

func benchCTP(b *testing.B, maxBatch int) {
	var br *broker
	if env := os.Getenv("WORKROUTER_TEST_BROKERS"); env != "" {
		br = &broker{name: "kafka", addrs: strings.Split(env, ","), sfx: suffix()}
	} else {
		br = newFake(b)
	}
	var sinkTime, gtsTime time.Duration
	var sinkShape, gtsShape benchShape
	for i := 0; b.Loop(); i++ {
		runs := []func() time.Duration{func() time.Duration { return benchSink(b, br, maxBatch, &sinkShape) }, func() time.Duration { return benchGTS(b, br, &gtsShape) }}
		if i%2 == 1 {
			gtsTime += runs[1]()
			sinkTime += runs[0]()
		} else {
			sinkTime += runs[0]()
			gtsTime += runs[1]()
		}
	}
	sinkRate := float64(b.N*benchRecords) / sinkTime.Seconds()
	gtsRate := float64(b.N*benchRecords) / gtsTime.Seconds()
	b.ReportMetric(sinkRate, "sink-records/s")
	b.ReportMetric(gtsRate, "gts-records/s")
	b.ReportMetric(sinkRate/gtsRate, "sink/gts")
	sinkShape.report(b, "sink")
	gtsShape.report(b, "gts")
}

// benchShape counts what one side did over all iterations: its
// transactions and the time from its start to its first record handled
// (the group join, the producers' InitProducerID, the claims).
type benchShape struct {
	txns    atomic.Int64
	applies atomic.Int64 // the sink's Applies (each a Tx of its own); 0 for gts
	startup atomic.Int64 // nanoseconds, summed over iterations
	iters   int64
}

func (s *benchShape) report(b *testing.B, side string) {
	if s.iters == 0 {
		return
	}
	txns := float64(s.txns.Load()) / float64(s.iters)
	b.ReportMetric(txns, side+"-txns/run")
	b.ReportMetric(benchRecords/txns, side+"-records/txn")
	if n := s.applies.Load(); n > 0 {
		b.ReportMetric(float64(n)/float64(s.iters), side+"-applies/run")
	}
	b.ReportMetric(float64(s.startup.Load())/float64(s.iters)/1e6, side+"-startup-ms")
}

const (
	benchRecords    = 20000
	benchPartitions = 4
)

// benchInput makes an input topic of its own with benchRecords commands
// and returns it with the output topic and a group name.
func benchInput(b *testing.B, br *broker) (in, out, group string, tp sinkTopics) {
	b.Helper()
	one := &broker{name: br.name, addrs: br.addrs, kf: br.kf, sfx: suffix()}
	in = one.topic(b, "bin", benchPartitions, nil)
	tp = one.sinkTopics(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.addrs...), kgo.DefaultProduceTopic(in))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, benchRecords)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte{byte(i), byte(i >> 8)}, Value: []byte("payload"),
			Headers: []kgo.RecordHeader{{Key: "workrouter-type", Value: []byte("order")}}}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	return in, tp.out, "wr-kafkasink-bench-" + one.sfx, tp
}

// waitCommitted waits until group's committed offsets of in sum to
// benchRecords.
func waitCommitted(b *testing.B, adm *kadm.Client, group, in string) {
	b.Helper()
	testwait.For(b, 10*time.Minute, "the group to commit every input", func() bool {
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return false
		}
		var sum int64
		for p := range int32(benchPartitions) {
			if o, ok := offs.Lookup(in, p); ok {
				sum += o.At
			}
		}
		return sum == benchRecords
	})
}

func benchSink(b *testing.B, br *broker, maxBatch int, shape *benchShape) time.Duration {
	in, out, group, tp := benchInput(b, br)
	adm := br.admin(b)
	start := time.Now()
	var first sync.Once
	var txs sync.Map // each Apply makes a Tx of its own
	// The package's test sinks have 2 producers; the benchmark measures
	// the default (4), one per input partition.
	s := br.newSink(b, tp, func(c *kafka.Config) { c.Producers = 0 })
	w, err := consumer.New(context.Background(), consumer.Config[*kafka.Tx]{
		Brokers: br.addrs, Group: group, Topic: in, Sink: s, MaxBatch: maxBatch,
		Handlers: map[string]consumer.Handler[*kafka.Tx]{
			"order": func(ctx context.Context, tx *kafka.Tx, cmd consumer.Command) error {
				first.Do(func() { shape.startup.Add(int64(time.Since(start))) })
				if _, loaded := txs.LoadOrStore(tx, true); !loaded {
					shape.applies.Add(1)
				}
				return tx.Produce(ctx, kafka.Record{Topic: out, Key: cmd.Key, Value: cmd.Payload})
			},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	s.BindMember(w.Member)
	waitCommitted(b, adm, group, in)
	d := time.Since(start)
	shape.iters++
	w.Close()
	// The Kafka transactions, which the Applies share (the group commit).
	shape.txns.Add(s.Stats().Transactions)
	s.Close()
	return d
}

func benchGTS(b *testing.B, br *broker, shape *benchShape) time.Duration {
	in, out, group, _ := benchInput(b, br)
	adm := br.admin(b)
	start := time.Now()
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(br.addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(in),
		kgo.TransactionalID("wr-kafkasink-bench-gts-"+suffix()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RequireStableFetchOffsets())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var first sync.Once
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := sess.PollFetches(ctx)
			if fs.Empty() {
				continue
			}
			first.Do(func() { shape.startup.Add(int64(time.Since(start))) })
			shape.txns.Add(1)
			if err := sess.Begin(); err != nil {
				b.Error(err)
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				sess.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value}, nil)
			})
			if _, err := sess.End(ctx, kgo.TryCommit); err != nil && ctx.Err() == nil {
				b.Error(err)
				return
			}
		}
	}()
	waitCommitted(b, adm, group, in)
	d := time.Since(start)
	shape.iters++
	cancel()
	<-done
	sess.Close()
	return d
}
