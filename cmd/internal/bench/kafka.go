package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// Tuning shared by the consuming workloads.
const (
	// WorkerMaxBatch is consumer.Config.MaxBatch in W1 and W3.
	WorkerMaxBatch = 1024
	// W3Records is how many records W3 applies (fewer if the topic holds
	// fewer): 12 partitions × 1,000 records/s × 3 s at the bound.
	W3Records = 12 * 1000 * 3
	// W3Sleep is W3's simulated I/O per record.
	W3Sleep = time.Millisecond
	// pollEvery is how often a workload checks whether it is done.
	pollEvery = time.Millisecond
)

// noopHandle is the benchmark's no-op command handler: it is what every
// consuming workload and baseline calls once per decoded command.
//
//go:noinline
func noopHandle(context.Context, router.Command) error { return nil }

// waitUntil polls done until it is true, ctx ends or failed returns an error.
func waitUntil(ctx context.Context, done func() bool, failed func() error) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for !done() {
		if failed != nil {
			if err := failed(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// runMemWorker consumes env's topic from the start with a fresh group through a
// consumer.Worker on a memory sink until n records were applied; the
// measured part spans from New to the n-th applied record. Without dedupe
// the sink declares no dedupe window (applyOnly), so that the worker
// applies without command IDs.
func runMemWorker(ctx context.Context, env *Env, id, name string, n int, dedupe bool, h consumer.Handler[*memory.Tx]) (Result, error) {
	var snk sink.Sink[*memory.Tx] = memory.New()
	if !dedupe {
		snk = applyOnly[*memory.Tx]{snk}
	}
	var w *consumer.Worker[*memory.Tx]
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	return Measure(id, name, n, func() error {
		var err error
		w, err = consumer.New(ctx, consumer.Config[*memory.Tx]{
			Brokers:  env.Brokers,
			Group:    UniqueName("bench-" + id),
			Topic:    env.Topic,
			Sink:     snk,
			Handlers: map[string]consumer.Handler[*memory.Tx]{CommandType: h},
			MaxBatch: WorkerMaxBatch,
		})
		if err != nil {
			return err
		}
		return waitUntil(ctx, func() bool { return w.Stats().Records >= int64(n) }, nil)
	})
}

// W1 consumes the pre-loaded topic through a consumer.Worker with a no-op
// handler on the memory sink (MaxBatch WorkerMaxBatch).
func W1(ctx context.Context, env *Env) (Result, error) {
	return runMemWorker(ctx, env, "W1", "worker, no-op handler, memory sink", env.Records, true, noopMemHandler)
}

// W1n is W1 with deduplication off: the same worker, handler and memory
// sink, the sink wrapped to declare no dedupe window (applyOnly, as in the
// W2n rows), so that the worker decodes the command IDs but applies
// without them. It has no ratio: beside W1 in one run, it shows what the
// IDs cost W1 (docs/performance.md#cpu-per-record-what-the-worker-costs-beyond-the-client).
func W1n(ctx context.Context, env *Env) (Result, error) {
	return runMemWorker(ctx, env, "W1n", "worker, no-op handler, memory sink, dedupe off", env.Records, false, noopMemHandler)
}

// noopMemHandler is W1's and W1n's handler: noopHandle.
func noopMemHandler(ctx context.Context, _ *memory.Tx, cmd consumer.Command) error {
	return noopHandle(ctx, cmd.Command)
}

// W3 applies min(W3Records, env.Records) pre-loaded commands through a
// consumer.Worker whose handler sleeps W3Sleep per record. Partition-serial
// processing bounds it at Partitions × 1,000 records/s; Extra reports the
// achieved share of that bound (group join included in the elapsed time).
func W3(ctx context.Context, env *Env) (Result, error) {
	n := min(W3Records, env.Records)
	var sl sleeper
	r, err := runMemWorker(ctx, env, "W3", "worker, 1ms simulated I/O per record", n, true, sleepHandler[*memory.Tx](&sl))
	bound := float64(env.Partitions) * float64(time.Second/W3Sleep)
	r.Extra = fmt.Sprintf("%.0f%% of %d×%d/s bound, %s", 100*r.Throughput()/bound, env.Partitions, time.Second/W3Sleep, sl.mean())
	return r, err
}

// rawConsumerOpts are the options of the raw kgo baselines' group
// consumers: the worker's balancer and start offset, kgo defaults otherwise.
func rawConsumerOpts(env *Env, id string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(env.Brokers...),
		kgo.ConsumerGroup(UniqueName("bench-" + id)),
		kgo.ConsumeTopics(env.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
	}
}

// B0 is the raw kgo baseline without work: a group consumer's PollFetches
// loop that only counts records.
func B0(ctx context.Context, env *Env) (Result, error) {
	var cl *kgo.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	return Measure("B0", "raw kgo PollFetches loop, no work", env.Records, func() error {
		var err error
		cl, err = kgo.NewClient(rawConsumerOpts(env, "B0")...)
		if err != nil {
			return err
		}
		n := 0
		for n < env.Records {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return err
			}
			var ferr error
			fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
			if ferr != nil {
				return ferr
			}
			n += fs.NumRecords()
		}
		return nil
	})
}

// splitConsumer is the franz-go goroutine-per-partition pattern (the
// autocommit_marks example): the poll loop hands each partition's records
// to that partition's goroutine, which handles them and marks them for
// commit.
type splitConsumer struct {
	cl      *kgo.Client
	ctx     context.Context
	handled atomic.Int64
	errs    chan error
	target  int64              // records to handle
	reached context.CancelFunc // called once target records were handled

	mu    sync.Mutex
	parts map[int32]*partConsumer
}

type partConsumer struct {
	recs chan []*kgo.Record
	done chan struct{}
}

func (s *splitConsumer) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ps := range assigned {
		for _, p := range ps {
			pc := &partConsumer{recs: make(chan []*kgo.Record, 5), done: make(chan struct{})}
			s.parts[p] = pc
			go s.consume(pc)
		}
	}
}

func (s *splitConsumer) consume(pc *partConsumer) {
	defer close(pc.done)
	for recs := range pc.recs {
		for _, r := range recs {
			cmd, err := envelope.Decode(r)
			if err == nil {
				err = noopHandle(s.ctx, cmd)
			}
			if err != nil {
				select {
				case s.errs <- err:
				default:
				}
				return
			}
		}
		s.cl.MarkCommitRecords(recs...)
		if s.handled.Add(int64(len(recs))) >= s.target {
			s.reached()
		}
	}
}

// revoked stops the revoked partitions' goroutines after they have handled
// what they were given.
func (s *splitConsumer) revoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.stop(revoked)
}

func (s *splitConsumer) stop(parts map[string][]int32) {
	s.mu.Lock()
	var wait []*partConsumer
	for _, ps := range parts {
		for _, p := range ps {
			if pc := s.parts[p]; pc != nil {
				delete(s.parts, p)
				close(pc.recs)
				wait = append(wait, pc)
			}
		}
	}
	s.mu.Unlock()
	for _, pc := range wait {
		<-pc.done
	}
}

func (s *splitConsumer) stopAll() {
	s.mu.Lock()
	all := map[string][]int32{"": nil}
	for p := range s.parts {
		all[""] = append(all[""], p)
	}
	s.mu.Unlock()
	s.stop(all)
}

// B1 is the raw kgo goroutine-per-partition baseline with the same no-op
// handler as W1 (decode, then call it) and no sink: offsets are marked and
// auto-committed.
func B1(ctx context.Context, env *Env) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pollCtx, reached := context.WithCancel(ctx)
	defer reached()
	s := &splitConsumer{ctx: ctx, errs: make(chan error, 1), parts: map[int32]*partConsumer{},
		target: int64(env.Records), reached: reached}
	defer func() {
		cancel()
		s.stopAll()
		if s.cl != nil {
			s.cl.AllowRebalance()
			s.cl.Close()
		}
	}()
	return Measure("B1", "raw kgo goroutine per partition, no-op handler", env.Records, func() error {
		opts := append(rawConsumerOpts(env, "B1"),
			kgo.OnPartitionsAssigned(s.assigned),
			kgo.OnPartitionsRevoked(s.revoked),
			kgo.OnPartitionsLost(s.revoked),
			kgo.AutoCommitMarks(),
			kgo.BlockRebalanceOnPoll(),
		)
		var err error
		s.cl, err = kgo.NewClient(opts...)
		if err != nil {
			return err
		}
		for s.handled.Load() < int64(env.Records) {
			fs := s.cl.PollRecords(pollCtx, 10_000)
			if s.handled.Load() >= int64(env.Records) {
				break
			}
			if fs.IsClientClosed() || pollCtx.Err() != nil {
				return pollCtx.Err()
			}
			select {
			case err := <-s.errs:
				return err
			default:
			}
			fs.EachPartition(func(p kgo.FetchTopicPartition) {
				if len(p.Records) == 0 {
					return
				}
				s.mu.Lock()
				pc := s.parts[p.Partition]
				s.mu.Unlock()
				if pc != nil {
					pc.recs <- p.Records
				}
			})
			s.cl.AllowRebalance()
		}
		return nil
	})
}

// produceCounter collects produce outcomes.
type produceCounter struct {
	ok       atomic.Int64
	mu       sync.Mutex
	firstErr error
}

func (c *produceCounter) done(err error) {
	if err == nil {
		c.ok.Add(1)
		return
	}
	c.mu.Lock()
	if c.firstErr == nil {
		c.firstErr = err
	}
	c.mu.Unlock()
}

func (c *produceCounter) result(want int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstErr != nil {
		return c.firstErr
	}
	if got := c.ok.Load(); got != int64(want) {
		return fmt.Errorf("%d of %d records acknowledged", got, want)
	}
	return nil
}

// W4 produces env.Records commands (the same keys and payloads as the
// pre-loaded ones) to a fresh topic (deleted afterwards) through router.SendAsync and Flush.
// Router creation is not measured.
func W4(ctx context.Context, env *Env) (Result, error) {
	topic, drop, err := createTopic(ctx, env, "bench-w4", env.Partitions)
	if err != nil {
		return Result{ID: "W4"}, err
	}
	defer drop() // a kept topic would grow the embedded broker's heap run by run
	rt, err := router.New(ctx, router.Config{Brokers: env.Brokers, Topic: topic})
	if err != nil {
		return Result{ID: "W4"}, fmt.Errorf("W4: router: %w", err)
	}
	defer rt.Close()
	keys := Keys(env)
	var c produceCounter
	cb := func(_ router.Result, err error) { c.done(err) }
	return Measure("W4", "produce through router.SendAsync + Flush", env.Records, func() error {
		for i := range env.Records {
			rt.SendAsync(ctx, Command(env, keys, i), cb)
		}
		if err := rt.Flush(ctx); err != nil {
			return err
		}
		return c.result(env.Records)
	})
}

// B4 is W4's baseline: the same records (envelope.Partition, the type
// header, an ID header in the router's format, the same keys and payloads)
// produced to a fresh topic (deleted afterwards) with a raw kgo client (kgo
// producer defaults but the router's codec, none; manual partitioner) and
// Flush. The IDs are made
// before the measured run (idHeaders), so B4 pays for their bytes on the
// wire but not for generating them, which W4's router does per send: the
// ratio charges the router for its ID generation and for nothing else
// that the baseline's records lack. (Before, B4's records had no ID
// header: W4's records were 45 bytes longer, and that alone put
// produce_vs_raw at 0.75–0.88 under load against 1.01–1.33 with the
// same headers, measured alternately in one session.)
func B4(ctx context.Context, env *Env) (Result, error) {
	topic, drop, err := createTopic(ctx, env, "bench-b4", env.Partitions)
	if err != nil {
		return Result{ID: "B4"}, err
	}
	defer drop() // a kept topic would grow the embedded broker's heap run by run
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression())) // as the router by default
	if err != nil {
		return Result{ID: "B4"}, fmt.Errorf("B4: client: %w", err)
	}
	defer cl.Close()
	keys := Keys(env)
	typ := []byte(CommandType)
	ids := idHeaders(env)
	var c produceCounter
	cb := func(_ *kgo.Record, err error) { c.done(err) }
	return Measure("B4", "raw kgo Produce + Flush", env.Records, func() error {
		for i := range env.Records {
			cmd := Command(env, keys, i)
			cl.Produce(ctx, &kgo.Record{
				Topic:     topic,
				Partition: envelope.Partition(cmd.Key, env.Partitions),
				Key:       cmd.Key,
				Value:     cmd.Payload,
				Headers:   []kgo.RecordHeader{{Key: envelope.TypeHeader, Value: typ}, {Key: envelope.IDHeader, Value: ids[i]}},
			}, cb)
		}
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		return c.result(env.Records)
	})
}

// idHeaders returns the values of the ID headers of B4's env.Records
// records: CommandID(env, i) for each i, views of one buffer, so that
// making them costs the measured run nothing.
func idHeaders(env *Env) [][]byte {
	ids := make([][]byte, env.Records)
	buf := make([]byte, 0, env.Records*(len(CommandID(env, 0))+8))
	for i := range ids {
		start := len(buf)
		buf = append(buf, CommandID(env, i)...)
		ids[i] = buf[start:len(buf):len(buf)]
	}
	return ids
}
