package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// W7's scale: W3's 1 ms handler with consumer.Config.KeyConcurrency
// W7KeyConcurrency, on a topic of its own of env.Partitions partitions
// over W7Keys keys, W7Scale times as many records as W3 applies (so that
// both runs last about as long at the targets' throughputs, and the group
// join weighs the same in both).
const (
	W7KeyConcurrency = 16
	W7Keys           = 1_200
	W7Scale          = 8
)

// keysTopic is the topic W7 and W7-pg consume: made and pre-loaded once
// per Env (by the first run of either), outside the measured part.
type keysTopic struct {
	env     *Env
	topic   string
	records int
}

// get returns the topic of env, pre-loading it with n commands (with
// IDs) over W7Keys keys on its first call for env.
func (k *keysTopic) get(ctx context.Context, env *Env, n int) (string, error) {
	if k.env == env && k.records == n {
		return k.topic, nil
	}
	topic := UniqueName("bench-keys")
	if err := CreateTopic(ctx, env, topic); err != nil {
		return "", err
	}
	cl, err := kgo.NewClient(producerOpts(env)...)
	if err != nil {
		return "", fmt.Errorf("bench: client: %w", err)
	}
	defer cl.Close()
	keys := make([][]byte, W7Keys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%06d", i)
	}
	var (
		errMu    sync.Mutex
		firstErr error
	)
	for i := range n {
		cmd := Command(env, keys, i)
		cmd.ID = CommandID(env, i) + "-k"
		rec, err := envelope.Encode(topic, envelope.Partition(cmd.Key, env.Partitions), cmd)
		if err != nil {
			return "", err
		}
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			errMu.Lock()
			defer errMu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return "", fmt.Errorf("bench: pre-load flush: %w", err)
	}
	errMu.Lock()
	defer errMu.Unlock()
	if firstErr != nil {
		return "", fmt.Errorf("bench: pre-load: %w", firstErr)
	}
	k.env, k.topic, k.records = env, topic, n
	return topic, nil
}

// w7Records is how many records W7 applies for env.
func w7Records(env *Env) int { return W7Scale * min(W3Records, env.Records) }

// sleeper is W3's and W7's simulated I/O: a sleep of W3Sleep per record.
// It keeps how long the sleeps took, which the rows' Extra reports (the
// wait's mean): a 1 ms time.Sleep lasts longer when many goroutines sleep
// on a busy machine, and the rows' bounds assume 1 ms. It is safe for
// concurrent use by the handlers of every partition and lane.
type sleeper struct{ n, ns atomic.Int64 }

// sleepHandler is W3's and W7's handler: W3Sleep of simulated I/O,
// counted in s, then the no-op handler.
func sleepHandler[Tx any](s *sleeper) consumer.Handler[Tx] {
	return func(ctx context.Context, _ Tx, cmd consumer.Command) error {
		start := time.Now()
		time.Sleep(W3Sleep)
		s.ns.Add(int64(time.Since(start)))
		s.n.Add(1)
		return noopHandle(ctx, cmd.Command)
	}
}

// mean is the mean sleep so far, for a row's Extra ("wait 1.21ms").
func (s *sleeper) mean() string {
	n := s.n.Load()
	if n == 0 {
		return "wait -"
	}
	return fmt.Sprintf("wait %.2fms", float64(s.ns.Load())/float64(n)/1e6)
}

// W7On returns W7 with the pre-loaded topic cached in k: the records of
// w7Records(env) commands over W7Keys keys applied through a
// consumer.Worker with KeyConcurrency W7KeyConcurrency whose handler
// sleeps W3Sleep per record, on the memory sink. Extra reports the share
// of the Partitions × W7KeyConcurrency × 1,000/s bound it reached.
func W7On(k *keysTopic) Workload {
	return func(ctx context.Context, env *Env) (Result, error) {
		const id = "W7"
		name := fmt.Sprintf("worker, 1ms simulated I/O per record, KeyConcurrency %d, %d keys, memory sink", W7KeyConcurrency, W7Keys)
		n := w7Records(env)
		topic, err := k.get(ctx, env, n)
		if err != nil {
			return Result{ID: id, Name: name}, err
		}
		var w *consumer.Worker[*memory.Tx]
		defer func() {
			if w != nil {
				w.Close()
			}
		}()
		var sl sleeper
		r, err := Measure(id, name, n, func() error {
			var err error
			w, err = consumer.New(ctx, consumer.Config[*memory.Tx]{
				Brokers:        env.Brokers,
				Group:          UniqueName("bench-" + id),
				Topic:          topic,
				Sink:           memory.New(),
				Handlers:       map[string]consumer.Handler[*memory.Tx]{CommandType: sleepHandler[*memory.Tx](&sl)},
				MaxBatch:       WorkerMaxBatch,
				KeyConcurrency: W7KeyConcurrency,
			})
			if err != nil {
				return err
			}
			return waitUntil(ctx, func() bool { return w.Stats().Records >= int64(n) }, nil)
		})
		r.Extra = w7Extra(env, r) + ", " + sl.mean()
		return r, err
	}
}

// w7Extra is the share of the lanes' bound a W7 run reached.
func w7Extra(env *Env, r Result) string {
	bound := float64(env.Partitions) * W7KeyConcurrency * float64(time.Second/W3Sleep)
	return fmt.Sprintf("%.0f%% of %d×%d×%d/s bound", 100*r.Throughput()/bound, env.Partitions, W7KeyConcurrency, time.Second/W3Sleep)
}

// W7PostgresConns is W7-pg's pool size, below PostgreSQL's default
// max_connections of 100. W7's handler waits and writes nothing, so a
// lane holds a connection only for its read and its last pipeline, not
// through the wait (the sink's transaction begins at the handler's
// first statement).
const W7PostgresConns = 64

// W7PostgresOn returns W7-pg: W7 on the PostgreSQL sink (in a fresh
// schema dropped at the end). It is skipped when env.PostgresDSN is empty
// or unreachable, and when the PostgreSQL sink of this build has no
// checkpoint with gaps (sink.Features.Gaps).
func W7PostgresOn(k *keysTopic) Workload {
	return func(ctx context.Context, env *Env) (Result, error) {
		const id = "W7-pg"
		name := fmt.Sprintf("worker, 1ms simulated I/O per record, KeyConcurrency %d, %d keys, PostgreSQL fenced sink", W7KeyConcurrency, W7Keys)
		kv, skip, err := openPostgresKVConns(ctx, env, W7PostgresConns)
		if skip != "" || err != nil {
			return Result{ID: id, Name: name, Skipped: skip}, err
		}
		defer kv.close()
		var s sink.Sink[pgx.Tx] = kv.s
		if !s.Features().Gaps {
			return Result{ID: id, Name: name, Skipped: "the PostgreSQL sink of this build has no checkpoint with gaps (sink.Features.Gaps), which KeyConcurrency needs"}, nil
		}
		n := w7Records(env)
		topic, err := k.get(ctx, env, n)
		if err != nil {
			return Result{ID: id, Name: name}, err
		}
		var w *consumer.Worker[pgx.Tx]
		defer func() {
			if w != nil {
				w.Close()
			}
		}()
		var sl sleeper
		r, err := Measure(id, name, n, func() error {
			var err error
			w, err = consumer.New(ctx, consumer.Config[pgx.Tx]{
				Brokers:        env.Brokers,
				Group:          UniqueName("bench-" + strings.ReplaceAll(id, "-", "")),
				Topic:          topic,
				Sink:           s,
				Handlers:       map[string]consumer.Handler[pgx.Tx]{CommandType: sleepHandler[pgx.Tx](&sl)},
				MaxBatch:       WorkerMaxBatch,
				KeyConcurrency: W7KeyConcurrency,
			})
			if err != nil {
				return err
			}
			return waitUntil(ctx, func() bool { return w.Stats().Records >= int64(n) }, nil)
		})
		r.Extra = w7Extra(env, r) + ", " + sl.mean()
		return r, err
	}
}
