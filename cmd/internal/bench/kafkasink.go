package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/sink/kafka"
)

// KafkaSinkMaxRecords caps the records of the Kafka sink rows (W2-kafka,
// B3-kafka), stated in the result's Name.
const KafkaSinkMaxRecords = 300_000

// kafkaOutIDHeader is the header of every output record of W2-kafka and
// B3-kafka: the ID of the command it was made from, so that a check can
// tell each input's output apart (the keys repeat).
const kafkaOutIDHeader = "bench-command-id"

// kafkaSinkTopics are the topics of one Kafka sink row's run: the output
// topic (env.Partitions partitions) and, for the sink, its compacted
// checkpoint topic (one partition).
type kafkaSinkTopics struct {
	out, checkpoint string
}

// newKafkaSinkTopics creates a run's output and checkpoint topics,
// prefixed with prefix, and waits until the metadata serves them with a
// leader for every partition. The returned function deletes them: a kept
// topic would grow the embedded broker's heap run by run.
func newKafkaSinkTopics(ctx context.Context, env *Env, prefix string) (kafkaSinkTopics, func(), error) {
	tp := kafkaSinkTopics{out: UniqueName(prefix + "-out"), checkpoint: UniqueName(prefix + "-checkpoint")}
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		return tp, nil, err
	}
	drop := func() {
		dropTopics(env, adm, tp.out, tp.checkpoint)
		adm.Close()
	}
	compact := "compact"
	for _, t := range []struct {
		name       string
		partitions int32
		configs    map[string]*string
	}{{tp.out, env.Partitions, nil}, {tp.checkpoint, 1, map[string]*string{"cleanup.policy": &compact}}} {
		resp, err := adm.CreateTopic(ctx, t.partitions, -1, t.configs, t.name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			drop()
			return tp, nil, fmt.Errorf("creating topic %s: %w", t.name, err)
		}
	}
	if err := waitLeaders(ctx, adm, tp.out, tp.checkpoint); err != nil {
		drop()
		return tp, nil, err
	}
	return tp, drop, nil
}

// waitLeaders waits until the metadata serves topics, each partition with
// a leader (a real cluster's brokers learn of a new topic a moment after
// CreateTopics answers; the sink's New checks its topics exist).
func waitLeaders(ctx context.Context, adm *kadm.Client, topics ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		md, err := adm.Metadata(ctx, topics...)
		if err == nil {
			err = md.Topics.Error()
		}
		if err == nil {
			for _, t := range topics {
				td, ok := md.Topics[t]
				if !ok || len(td.Partitions) == 0 {
					err = fmt.Errorf("topic %s not in the metadata yet", t)
					break
				}
				for _, p := range td.Partitions {
					if p.Leader < 0 || p.Err != nil {
						err = fmt.Errorf("topic %s partition %d has no leader yet", t, p.Partition)
					}
				}
			}
		}
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for topics %v: %w (last: %w)", topics, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// W2Kafka is consume-transform-produce, exactly once, through workrouter:
// a consumer.Worker (MaxBatch left zero: the sink's preferred batch,
// kafka.PreferredBatch) on the sink/kafka Sink
// (its default 4 transactional producers), whose handler produces one
// record per command to an output topic of env.Partitions partitions
// (the command's key and payload, its ID in a header). Each batch is one
// Kafka transaction that commits the input offsets too. The clock runs
// from the sink's New (its producers' InitProducerId) through the
// worker's start to the n-th record applied, that is committed, over at
// most KafkaSinkMaxRecords records. Its baseline is B3Kafka.
func W2Kafka(ctx context.Context, env *Env) (Result, error) {
	return w2KafkaBatch("W2-kafka", 0)(ctx, env)
}

// KafkaSinkBigBatch is the MaxBatch of W2-kafka-b4096, W2-kafka with
// fewer, bigger transactions: the ratio kafka_sink_vs_gts_b4096 (no
// target) shows how much of kafka_sink_vs_gts is the transactions' count.
const KafkaSinkBigBatch = 4096

// w2KafkaBatch returns W2Kafka as row id at MaxBatch maxBatch (0: left
// to the sink's preference).
func w2KafkaBatch(id string, maxBatch int) Workload {
	return func(ctx context.Context, env *Env) (Result, error) {
		n, note := capRecords(env, KafkaSinkMaxRecords)
		tp, drop, err := newKafkaSinkTopics(ctx, env, "bench-"+strings.ToLower(id))
		if err != nil {
			return Result{ID: id}, fmt.Errorf("%s: %w", id, err)
		}
		defer drop()
		return w2Kafka(ctx, env, id, maxBatch, n, note, tp)
	}
}

// w2Kafka is W2Kafka's run as row id at MaxBatch maxBatch of n records on
// the topics tp.
func w2Kafka(ctx context.Context, env *Env, id string, maxBatch, n int, note string, tp kafkaSinkTopics) (Result, error) {
	batches := fmt.Sprintf("batches of %d", maxBatch)
	if maxBatch == 0 {
		batches = fmt.Sprintf("batches of %d, the sink's preference", kafka.PreferredBatch)
	}
	name := fmt.Sprintf("worker, one output record per command, Kafka sink (%s, several partitions' batches a transaction), exactly once", batches) + note
	var (
		s   *kafka.Sink
		w   *consumer.Worker[*kafka.Tx]
		got int64
	)
	// As in measureWorker, the Worker's graceful Close comes after the
	// measured part; the Sink closes after the Worker.
	defer func() {
		if w != nil {
			w.Close()
		}
		if s != nil {
			s.Close()
		}
	}()
	var (
		start time.Time
		first firstAt
	)
	h := func(ctx context.Context, tx *kafka.Tx, cmd consumer.Command) error {
		first.mark(start)
		return tx.Produce(ctx, kafka.Record{Topic: tp.out, Key: cmd.Key, Value: cmd.Payload,
			Headers: []kafka.Header{{Key: kafkaOutIDHeader, Value: []byte(cmd.ID)}}})
	}
	r, err := Measure(id, name, n, func() error {
		start = time.Now()
		var err error
		s, err = kafka.New(ctx, kafka.Config{Brokers: env.Brokers, CheckpointTopic: tp.checkpoint,
			TransactionalID: UniqueName("bench-" + strings.ToLower(id))})
		if err != nil {
			return err
		}
		w, err = consumer.New(ctx, consumer.Config[*kafka.Tx]{
			Brokers:  env.Brokers,
			Group:    UniqueName("bench-" + id),
			Topic:    env.Topic,
			Sink:     s,
			Handlers: handlersFor([]string{CommandType}, h),
			MaxBatch: maxBatch,
		})
		if err != nil {
			return err
		}
		s.BindMember(w.Member)
		return waitUntil(ctx, func() bool { got = w.Stats().Records; return got >= int64(n) }, nil)
	})
	r.Records = int(got)
	if w != nil {
		st := w.Stats()
		r.Extra = fmt.Sprintf("%d batches, %.0f records each, %d retried", st.Batches, float64(st.Records)/float64(max(st.Batches, 1)), st.Retries)
		if s != nil { // the group commit: batches of several partitions share a transaction
			ss := s.Stats()
			r.Extra += fmt.Sprintf(", %d transactions (%d batches shared one)", ss.Transactions, ss.SharedCalls)
			if ss.Transactions > 0 && ss.Calls > 0 {
				// Where a transaction's time went, and how long a
				// batch waited for its own.
				per := func(d time.Duration, n int64) string {
					return fmt.Sprintf("%.1f", float64(d)/float64(n)/float64(time.Millisecond))
				}
				r.Extra += fmt.Sprintf(", a transaction %s ms (produce %s, offset commit %s, end %s), a batch's commit waited %s ms",
					per(ss.ProduceTime+ss.OffsetCommitTime+ss.EndTime, ss.Transactions), per(ss.ProduceTime, ss.Transactions),
					per(ss.OffsetCommitTime, ss.Transactions), per(ss.EndTime, ss.Transactions), per(ss.CallTime, ss.Calls))
			}
		}
		r.Extra += fmt.Sprintf(", first record handled after %s", first.get())
	}
	return r, err
}

// B3Kafka is W2Kafka's baseline: franz-go's GroupTransactSession doing
// the same consume-transform-produce, exactly once, as its documentation
// shows it: a poll loop (the raw consumers' options: a fresh group from
// the start, the cooperative-sticky balancer; read_committed, stable
// offsets) that decodes each record (envelope.Decode, as the worker
// does) and produces the same output record, one transaction per poll,
// committing the input offsets in it (End with TryCommit). The clock runs
// from the session's creation to the end of the transaction that
// commits the n-th record; a transaction End aborts (a rebalance) counts
// nothing.
func B3Kafka(ctx context.Context, env *Env) (Result, error) {
	const id = "B3-kafka"
	n, note := capRecords(env, KafkaSinkMaxRecords)
	tp, drop, err := newKafkaSinkTopics(ctx, env, "bench-b3-kafka")
	if err != nil {
		return Result{ID: id}, fmt.Errorf("%s: %w", id, err)
	}
	defer drop()
	return b3Kafka(ctx, env, n, note, tp.out)
}

// b3Kafka is B3Kafka's run of n records producing to out.
func b3Kafka(ctx context.Context, env *Env, n int, note, out string) (Result, error) {
	const id = "B3-kafka"
	name := "raw kgo GroupTransactSession, one output record per record, a transaction per poll, exactly once" + note
	var (
		sess          *kgo.GroupTransactSession
		got           int
		txns, aborted int
	)
	defer func() {
		if sess != nil {
			sess.Close()
		}
	}()
	var (
		mu      sync.Mutex
		prodErr error
	)
	cb := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			prodErr = errors.Join(prodErr, err)
			mu.Unlock()
		}
	}
	var first firstAt
	r, err := Measure(id, name, n, func() error {
		start := time.Now()
		var err error
		opts := append(rawConsumerOpts(env, id),
			kgo.TransactionalID(UniqueName("bench-b3-kafka")),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.RequireStableFetchOffsets())
		if sess, err = kgo.NewGroupTransactSession(opts...); err != nil {
			return err
		}
		for got < n {
			fs := sess.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return err
			}
			var ferr error
			fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
			if ferr != nil {
				return ferr
			}
			if fs.Empty() {
				continue
			}
			first.mark(start)
			if err := sess.Begin(); err != nil {
				return err
			}
			var decErr error
			k := 0
			fs.EachRecord(func(rec *kgo.Record) {
				cmd, err := envelope.Decode(rec)
				if err != nil {
					decErr = errors.Join(decErr, err)
					return
				}
				sess.Produce(ctx, &kgo.Record{Topic: out, Key: cmd.Key, Value: cmd.Payload,
					Headers: []kgo.RecordHeader{{Key: kafkaOutIDHeader, Value: []byte(cmd.ID)}}}, cb)
				k++
			})
			end := kgo.TryCommit
			if decErr != nil {
				end = kgo.TryAbort
			}
			committed, err := sess.End(ctx, end)
			txns++
			mu.Lock()
			perr := prodErr
			mu.Unlock()
			switch {
			case decErr != nil:
				return fmt.Errorf("decode: %w", decErr)
			case err != nil:
				return fmt.Errorf("end transaction %d: %w", txns, err)
			case perr != nil:
				return fmt.Errorf("produce in transaction %d: %w", txns, perr)
			case committed:
				got += k
			default:
				// Aborted (a rebalance, a refused offset commit): the
				// records come again; counted, said in Extra.
				aborted++
			}
		}
		return nil
	})
	r.Records = got
	if txns > 0 {
		r.Extra = fmt.Sprintf("%d transactions, %.0f records each, %d aborted, first poll after %s",
			txns, float64(got)/float64(txns), aborted, first.get())
	}
	return r, err
}

// firstAt is the time from a run's start to its first record: the group
// join, the producers' InitProducerId, the claims (Extra of the Kafka sink
// rows, to tell start-up from the steady state).
type firstAt struct {
	once sync.Once
	d    time.Duration
	mu   sync.Mutex
}

func (f *firstAt) mark(start time.Time) {
	f.once.Do(func() {
		f.mu.Lock()
		f.d = time.Since(start).Round(time.Millisecond)
		f.mu.Unlock()
	})
}

func (f *firstAt) get() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.d
}
