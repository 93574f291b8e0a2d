package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// W5MaxDuration bounds how long W5 sends: it sends min(env.Records,
// rate × W5MaxDuration) commands.
const W5MaxDuration = 10 * time.Second

// W5MaxRecords is how many commands each of W5's maximum-rate runs sends,
// and W5MaxRuns how many runs it takes the median of. One short run is not
// a maximum: the first run in a process measured 418k/s and the next two
// 812k/s and 769k/s on the same machine, and half of an overestimated
// maximum is a rate the pipeline cannot sustain, whose latency is queueing.
const (
	W5MaxRecords = 300_000
	W5MaxRuns    = 3
)

// W6SessionTimeout is the group session timeout of W6's workers; the broker
// must accept it (kfake's default minimum is 6s: start the embedded broker
// with MinSessionTimeout at most this).
const W6SessionTimeout = 2 * time.Second

// createTopic creates a fresh topic of partitions partitions and returns
// it with a function deleting it.
func createTopic(ctx context.Context, env *Env, prefix string, partitions int32) (string, func(), error) {
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		return "", nil, err
	}
	topic := UniqueName(prefix)
	if _, err := adm.CreateTopic(ctx, partitions, -1, nil, topic); err != nil {
		adm.Close()
		return "", nil, fmt.Errorf("creating topic %s: %w", topic, err)
	}
	return topic, func() {
		dropTopics(env, adm, topic)
		adm.Close()
	}, nil
}

// latencyRecorder turns a Worker's Applied events into produce-to-commit
// latencies. The handler notes each command's scheduled send time by
// partition and offset; the Applied event, emitted in the partition's
// goroutine right after the sink committed the batch, turns the batch's
// offsets into latencies. Each partition's schedule is touched only by that
// partition's goroutine, so noting a command takes no lock.
type latencyRecorder struct {
	scheduled [][]int64 // by partition, then offset: scheduled send (unix ns), 0 once recorded
	mu        sync.Mutex
	lat       []time.Duration
	want      int
	done      chan struct{}
}

func newLatencyRecorder(partitions int32, want int) *latencyRecorder {
	return &latencyRecorder{scheduled: make([][]int64, partitions), lat: make([]time.Duration, 0, want),
		want: want, done: make(chan struct{})}
}

// note records that command cmd was scheduled at at (unix ns). Called by
// the handler, in cmd's partition's goroutine.
func (l *latencyRecorder) note(cmd consumer.Command, at int64) {
	s := l.scheduled[cmd.Token.Partition]
	for int64(len(s)) <= cmd.Offset {
		s = append(s, 0)
	}
	s[cmd.Offset] = at
	l.scheduled[cmd.Token.Partition] = s
}

// Observe implements consumer.Observer.
func (l *latencyRecorder) Observe(e consumer.Event) {
	a, ok := e.(consumer.Applied)
	if !ok {
		return
	}
	now := time.Now().UnixNano()
	s := l.scheduled[a.Token.Partition]
	l.mu.Lock()
	defer l.mu.Unlock()
	for o := a.FirstOffset; o < a.NextOffset && o < int64(len(s)); o++ {
		if s[o] != 0 {
			l.lat = append(l.lat, time.Duration(now-s[o]))
			s[o] = 0
			if len(l.lat) == l.want {
				close(l.done)
			}
		}
	}
}

// latencies returns the recorded latencies, sorted.
func (l *latencyRecorder) latencies() []time.Duration {
	l.mu.Lock()
	out := slices.Clone(l.lat)
	l.mu.Unlock()
	slices.Sort(out)
	return out
}

// latencyPipeline is the sink side of a W5 run: a fresh sink of type Tx
// and the handler that applies one command to it, noting its scheduled
// time with note.
type latencyPipeline[Tx any] struct {
	name  string // e.g. "memory sink"
	open  func(ctx context.Context, env *Env) (sink.Sink[Tx], func(), error)
	apply func(ctx context.Context, tx Tx, cmd consumer.Command) error
}

// memoryPipeline is W5's: the memory sink, one Put per command.
var memoryPipeline = latencyPipeline[*memory.Tx]{
	name: "memory sink",
	open: func(context.Context, *Env) (sink.Sink[*memory.Tx], func(), error) {
		return memory.New(), func() {}, nil
	},
	apply: func(_ context.Context, tx *memory.Tx, cmd consumer.Command) error {
		tx.Put(string(cmd.Key), cmd.Payload[:8])
		return nil
	},
}

// sqlitePipeline is W5-sqlite's: W2's fenced SQLite sink, one upsert per
// command.
var sqlitePipeline = latencyPipeline[*sqlite.Tx]{
	name: "SQLite sink",
	open: func(ctx context.Context, env *Env) (sink.Sink[*sqlite.Tx], func(), error) {
		s, err := openSQLiteKV(ctx, env, "w5")
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	},
	apply: func(ctx context.Context, tx *sqlite.Tx, cmd consumer.Command) error {
		_, err := tx.ExecContext(ctx, sqliteUpsert, cmd.Key, cmd.Payload)
		return err
	},
}

// W5 is W5On the memory sink.
func W5(ctx context.Context, env *Env) (Result, error) { return w5On(ctx, env, "W5", memoryPipeline) }

// W5SQLite is W5On W2's SQLite sink.
func W5SQLite(ctx context.Context, env *Env) (Result, error) {
	return w5On(ctx, env, "W5-sqlite", sqlitePipeline)
}

// w5On measures the end-to-end maximum rate on pipeline (the median of
// W5MaxRuns runs), then the latency at half of it. Extra states the
// maximum and its spread.
func w5On[Tx any](ctx context.Context, env *Env, id string, pipeline latencyPipeline[Tx]) (Result, error) {
	maxRate, spread, err := w5MaxRate(ctx, env, id, pipeline)
	if err != nil {
		return Result{ID: id}, fmt.Errorf("%s: measuring the maximum rate: %w", id, err)
	}
	r, err := w5LatencyAt(ctx, env, id, pipeline, maxRate/2)
	r.Extra = strings.TrimSpace(fmt.Sprintf("max_rate=%.0f/s (median of %d: %s) %s", maxRate, W5MaxRuns, spread, r.Extra))
	return r, err
}

// W5LatencyAt returns W5 at a given rate on the memory sink (see
// w5LatencyAt).
func W5LatencyAt(rate float64) Workload {
	return func(ctx context.Context, env *Env) (Result, error) {
		return w5LatencyAt(ctx, env, "W5", memoryPipeline, rate)
	}
}

// w5LatencyAt measures end-to-end latency from produce to sink commit at
// rate commands per second, open loop: min(env.Records, rate ×
// W5MaxDuration) commands are scheduled at fixed intervals from a start
// time and sent without waiting for earlier sends (no coordinated
// omission). Latency is the commit time minus the scheduled send time.
// Extra reports p50, p99, p99.9 and max.
func w5LatencyAt[Tx any](ctx context.Context, env *Env, id string, pipeline latencyPipeline[Tx], rate float64) (Result, error) {
	name := fmt.Sprintf("end-to-end latency at %.0f/s, open loop, %s", rate, pipeline.name)
	if rate <= 0 || math.IsInf(rate, 0) || math.IsNaN(rate) {
		return Result{ID: id, Name: name, Skipped: fmt.Sprintf("no rate (%v)", rate)}, nil
	}
	n := max(min(env.Records, int(rate*W5MaxDuration.Seconds())), 1)
	r, lat, err := produceToCommit(ctx, env, id, name, pipeline, rate, n)
	if len(lat) > 0 {
		r.Extra = fmt.Sprintf("rate=%.0f/s p50=%s p99=%s p99.9=%s max=%s",
			rate, pct(lat, 0.50), pct(lat, 0.99), pct(lat, 0.999), lat[len(lat)-1].Round(time.Microsecond))
	}
	return r, err
}

// W5MaxRate measures W5's maximum rate on the memory sink (see w5MaxRate).
func W5MaxRate(ctx context.Context, env *Env) (float64, error) {
	rate, _, err := w5MaxRate(ctx, env, "W5", memoryPipeline)
	return rate, err
}

// w5MaxRate measures the end-to-end maximum rate of pipeline: W5MaxRuns
// runs of min(env.Records, W5MaxRecords) commands sent as fast as the
// producer can, each timed from the first send to the last sink commit, on
// the pipeline w5LatencyAt measures. It returns the median and the
// min–max of the runs.
func w5MaxRate[Tx any](ctx context.Context, env *Env, id string, pipeline latencyPipeline[Tx]) (float64, string, error) {
	n := max(min(env.Records, W5MaxRecords), 1)
	rates := make([]float64, 0, W5MaxRuns)
	for range W5MaxRuns {
		r, _, err := produceToCommit(ctx, env, id, "end-to-end maximum rate, "+pipeline.name, pipeline, 0, n)
		if err != nil {
			return 0, "", err
		}
		rates = append(rates, r.Throughput())
	}
	slices.Sort(rates)
	return rates[len(rates)/2], fmt.Sprintf("%.0f–%.0f/s", rates[0], rates[len(rates)-1]), nil
}

// w5ClientOpts are the producer options of W5's router: no linger, so that
// a command is sent as soon as the client can (kgo's default lingers 10ms
// to fill batches, which a latency-sensitive producer turns off), and a
// buffer for a whole run.
func w5ClientOpts(n int) []kgo.Opt {
	return []kgo.Opt{kgo.ProducerLinger(0), kgo.MaxBufferedRecords(max(n, 10_000))}
}

// produceToCommit runs n commands through a fresh topic of env.Partitions
// partitions, produced with a router.Router and applied by a Worker that
// owns all of them on pipeline's sink, sent at rate per second (0: as fast
// as possible), and returns the measurement and the sorted
// produce-to-commit latencies.
func produceToCommit[Tx any](ctx context.Context, env *Env, id, name string, pipeline latencyPipeline[Tx], rate float64, n int) (Result, []time.Duration, error) {
	parts := max(env.Partitions, 1)
	topic, drop, err := createTopic(ctx, env, "bench-w5", parts)
	if err != nil {
		return Result{ID: id, Name: name}, nil, err
	}
	defer drop()
	s, closeSink, err := pipeline.open(ctx, env)
	if err != nil {
		return Result{ID: id, Name: name}, nil, err
	}
	defer closeSink()

	rec := newLatencyRecorder(parts, n)
	h := func(ctx context.Context, tx Tx, cmd consumer.Command) error {
		if len(cmd.Payload) < 8 {
			return errors.New("payload without a scheduled time")
		}
		rec.note(cmd, int64(binary.BigEndian.Uint64(cmd.Payload)))
		return pipeline.apply(ctx, tx, cmd)
	}
	w, err := consumer.New(ctx, consumer.Config[Tx]{
		Brokers: env.Brokers, Group: UniqueName("bench-w5"), Topic: topic, Sink: s,
		Handlers:  map[string]consumer.Handler[Tx]{CommandType: h},
		Observers: []consumer.Observer{rec},
	})
	if err != nil {
		return Result{ID: id, Name: name}, nil, err
	}
	defer w.Close()
	if err := pollUntil(ctx, 60*time.Second, func() bool { return w.Ready() && len(w.Owned()) == int(parts) }); err != nil {
		return Result{ID: id, Name: name}, nil, fmt.Errorf("W5 worker never owned the %d partitions: %w", parts, err)
	}

	rt, err := router.New(ctx, router.Config{Brokers: env.Brokers, Topic: topic, ClientOpts: w5ClientOpts(n)})
	if err != nil {
		return Result{ID: id, Name: name}, nil, err
	}
	defer rt.Close()
	keys := Keys(env)
	size := max(env.Size, 8)
	var prodErr atomic.Pointer[error]
	sent := func(_ router.Result, err error) {
		if err != nil {
			prodErr.CompareAndSwap(nil, &err)
		}
	}
	// Payloads are carved from slabs: one allocation per slabSize commands,
	// not one per command, so that the harness's own garbage does not
	// stand in for the pipeline's.
	const slabSize = 4096
	var slab []byte

	r, err := Measure(id, name, n, func() error {
		var interval time.Duration
		if rate > 0 {
			interval = time.Duration(float64(time.Second) / rate)
		}
		start := time.Now()
		for i := 0; i < n; {
			now := time.Now()
			for ; i < n; i++ {
				at := start.Add(time.Duration(i) * interval)
				if at.After(now) {
					break
				}
				if interval == 0 {
					at = time.Now()
				}
				if len(slab) < size {
					slab = make([]byte, slabSize*size)
				}
				payload := slab[:size:size]
				slab = slab[size:]
				binary.BigEndian.PutUint64(payload, uint64(at.UnixNano()))
				rt.SendAsync(ctx, router.Command{Key: keys[i%len(keys)], Type: CommandType, Payload: payload}, sent)
			}
			if i < n {
				if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return ctx.Err()
					}
				}
			}
			if p := prodErr.Load(); p != nil {
				return fmt.Errorf("producing: %w", *p)
			}
		}
		select {
		case <-rec.done:
			return nil
		case <-time.After(60 * time.Second):
			return fmt.Errorf("only %d of %d commands committed 60s after the last send", len(rec.latencies()), n)
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	lat := rec.latencies()
	r.Records = len(lat)
	return r, lat, err
}

// pct returns the q-quantile (nearest rank) of sorted.
func pct(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)].Round(time.Microsecond)
}

// pollUntil polls cond every few milliseconds until it holds or d passes.
func pollUntil(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// W6TakeoverOn returns W6, pause-to-takeover, on the embedded broker's
// cluster (nil: Skipped, since the fault needs request interception). Two
// Workers on the memory sink, session timeout W6SessionTimeout, share a
// fresh one-partition topic. One command is produced; the owner's handler
// blocks on it (like a process frozen by SIGSTOP mid-batch) and the broker
// holds the owner's heartbeats from that moment. The measured time runs
// from the freeze to the other Worker's first applied batch on the
// partition. Records is 1.
func W6TakeoverOn(cluster *kfake.Cluster) Workload {
	return func(ctx context.Context, env *Env) (Result, error) {
		const id = "W6"
		name := fmt.Sprintf("pause-to-takeover, simulated freeze in process, session timeout %s, memory sink", W6SessionTimeout)
		if cluster == nil {
			return Result{ID: id, Name: name, Skipped: "needs the embedded broker's kfake cluster to hold heartbeats"}, nil
		}
		topic, drop, err := createTopic(ctx, env, "bench-w6", 1)
		if err != nil {
			return Result{ID: id, Name: name}, err
		}
		defer drop()

		var frozenMember atomic.Value
		frozenMember.Store("")
		released := make(chan struct{})
		var releaseOnce sync.Once
		release := func() { releaseOnce.Do(func() { close(released) }) }
		defer release()
		cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
			cluster.KeepControl()
			select {
			case <-released:
				cluster.DropControl()
				return nil, nil, false
			default:
			}
			if hb, ok := req.(*kmsg.HeartbeatRequest); ok && hb.MemberID != "" && hb.MemberID == frozenMember.Load().(string) {
				cluster.SleepControl(func() { <-released })
			}
			return nil, nil, false
		})

		s := memory.New()
		frozen := make(chan time.Time, 1)
		var freezeOnce sync.Once
		aHandler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
			freezeOnce.Do(func() {
				frozenMember.Store(cmd.Token.Member)
				frozen <- time.Now()
				<-released // frozen: ignores its context, like SIGSTOP
			})
			tx.Put(string(cmd.Key), cmd.Payload)
			return nil
		}
		bHandler := func(_ context.Context, tx *memory.Tx, cmd consumer.Command) error {
			tx.Put(string(cmd.Key), cmd.Payload)
			return nil
		}
		group := UniqueName("bench-w6")
		newWorker := func(name string, h consumer.Handler[*memory.Tx]) (*consumer.Worker[*memory.Tx], error) {
			return consumer.New(ctx, consumer.Config[*memory.Tx]{
				Brokers: env.Brokers, Group: group, Topic: topic, Sink: s,
				Handlers:          map[string]consumer.Handler[*memory.Tx]{CommandType: h},
				SessionTimeout:    W6SessionTimeout,
				HeartbeatInterval: W6SessionTimeout / 10,
				RebalanceTimeout:  2 * W6SessionTimeout,
				RevokeTimeout:     time.Minute,
				RetryBackoff:      10 * time.Millisecond,
				MaxRetryBackoff:   100 * time.Millisecond,
				ClientID:          name,
			})
		}
		a, err := newWorker("bench-w6-a", aHandler)
		if err != nil {
			return Result{ID: id, Name: name}, err
		}
		defer a.Close()
		defer release() // runs before a.Close: unfreeze the handler first
		if err := pollUntil(ctx, 30*time.Second, func() bool { return len(a.Owned()) == 1 }); err != nil {
			return Result{ID: id, Name: name}, fmt.Errorf("first worker never owned the partition (does the broker accept a %s session timeout?): %w", W6SessionTimeout, err)
		}
		b, err := newWorker("bench-w6-b", bHandler)
		if err != nil {
			return Result{ID: id, Name: name}, err
		}
		defer b.Close()
		if err := pollUntil(ctx, 30*time.Second, func() bool { m, _ := b.Member(); return m != "" && b.Ready() }); err != nil {
			return Result{ID: id, Name: name}, fmt.Errorf("second worker never joined: %w", err)
		}

		cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			return Result{ID: id, Name: name}, err
		}
		defer cl.Close()
		rec, err := envelope.Encode(topic, 0, router.Command{Key: []byte("w6"), Type: CommandType, Payload: make([]byte, max(env.Size, 1))})
		if err != nil {
			return Result{ID: id, Name: name}, err
		}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return Result{ID: id, Name: name}, err
		}
		var freezeAt time.Time
		select {
		case freezeAt = <-frozen:
		case <-time.After(30 * time.Second):
			return Result{ID: id, Name: name}, errors.New("W6: the owner never started its batch")
		case <-ctx.Done():
			return Result{ID: id, Name: name}, ctx.Err()
		}
		var takeover time.Duration
		r, err := Measure(id, name, 1, func() error {
			err := pollUntil(ctx, 10*W6SessionTimeout+30*time.Second, func() bool { return b.Stats().Batches > 0 })
			takeover = time.Since(freezeAt)
			return err
		})
		r.Elapsed = takeover
		r.Extra = fmt.Sprintf("takeover=%s session_timeout=%s heartbeat=%s", takeover.Round(time.Millisecond), W6SessionTimeout, W6SessionTimeout/10)
		return r, err
	}
}
