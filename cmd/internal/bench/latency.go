package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// W5MaxDuration bounds how long W5 sends: it sends min(env.Records,
// rate × W5MaxDuration) commands.
const W5MaxDuration = 10 * time.Second

// W5MaxRecords is how many commands W5MaxRate sends.
const W5MaxRecords = 200_000

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
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		adm.DeleteTopics(dctx, topic)
		adm.Close()
	}, nil
}

// latencySink wraps the memory sink: after an accepted Apply it records,
// for each applied offset, the commit time minus the scheduled send time
// the handler stored for it.
type latencySink struct {
	*memory.Sink
	mu        sync.Mutex
	scheduled map[[2]int64]int64 // partition, offset → scheduled send (unix ns)
	lat       []time.Duration
	want      int
	done      chan struct{}
}

func (s *latencySink) Apply(ctx context.Context, tok epochs.Token, offsets []int64, effect sink.Effect[*memory.Tx]) (sink.ApplyResult, error) {
	res, err := s.Sink.Apply(ctx, tok, offsets, effect)
	if err != nil {
		return res, err
	}
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range offsets {
		k := [2]int64{int64(tok.Partition), o}
		if at, ok := s.scheduled[k]; ok {
			delete(s.scheduled, k)
			s.lat = append(s.lat, time.Duration(now-at))
			if len(s.lat) == s.want {
				close(s.done)
			}
		}
	}
	return res, nil
}

// W5LatencyAt returns W5: end-to-end latency from produce to sink commit at
// rate commands per second, open loop: min(env.Records, rate ×
// W5MaxDuration) commands are scheduled at fixed intervals from a start
// time and sent without waiting for earlier sends (no coordinated
// omission). Latency is the sink's commit time minus the scheduled send
// time. Extra reports p50, p99, p99.9 and max.
func W5LatencyAt(rate float64) Workload {
	return func(ctx context.Context, env *Env) (Result, error) {
		const id = "W5"
		name := fmt.Sprintf("end-to-end latency at %.0f/s, open loop, memory sink", rate)
		if rate <= 0 || math.IsInf(rate, 0) || math.IsNaN(rate) {
			return Result{ID: id, Name: name, Skipped: fmt.Sprintf("no rate (%v)", rate)}, nil
		}
		n := max(min(env.Records, int(rate*W5MaxDuration.Seconds())), 1)
		r, lat, err := produceToCommit(ctx, env, id, name, rate, n)
		if len(lat) > 0 {
			r.Extra = fmt.Sprintf("rate=%.0f/s p50=%s p99=%s p99.9=%s max=%s",
				rate, pct(lat, 0.50), pct(lat, 0.99), pct(lat, 0.999), lat[len(lat)-1])
		}
		return r, err
	}
}

// W5MaxRate measures W5's maximum rate: min(env.Records, W5MaxRecords)
// commands sent as fast as the producer can, timed from the first send to
// the last sink commit, on the same pipeline W5LatencyAt measures (a fresh
// topic, a Worker on the memory sink, broker and producer in this process).
func W5MaxRate(ctx context.Context, env *Env) (float64, error) {
	n := max(min(env.Records, W5MaxRecords), 1)
	r, _, err := produceToCommit(ctx, env, "W5", "end-to-end maximum rate", 0, n)
	if err != nil {
		return 0, err
	}
	return r.Throughput(), nil
}

// produceToCommit runs n commands through a fresh topic of env.Partitions
// partitions and a Worker on the memory sink that owns all of them, sent at
// rate per second (0: as fast as possible), and returns the measurement
// and the sorted produce-to-commit latencies.
func produceToCommit(ctx context.Context, env *Env, id, name string, rate float64, n int) (Result, []time.Duration, error) {
	parts := max(env.Partitions, 1)
	topic, drop, err := createTopic(ctx, env, "bench-w5", parts)
	if err != nil {
		return Result{ID: id, Name: name}, nil, err
	}
	defer drop()

	ls := &latencySink{Sink: memory.New(), scheduled: map[[2]int64]int64{}, want: n, done: make(chan struct{})}
	h := func(_ context.Context, tx *memory.Tx, cmd consumer.Command) error {
		if len(cmd.Payload) < 8 {
			return errors.New("payload without a scheduled time")
		}
		at := int64(binary.BigEndian.Uint64(cmd.Payload))
		ls.mu.Lock()
		ls.scheduled[[2]int64{int64(cmd.Token.Partition), cmd.Offset}] = at
		ls.mu.Unlock()
		tx.Put(string(cmd.Key), cmd.Payload[:8])
		return nil
	}
	w, err := consumer.New(ctx, consumer.Config[*memory.Tx]{
		Brokers: env.Brokers, Group: UniqueName("bench-w5"), Topic: topic, Sink: ls,
		Handlers: map[string]consumer.Handler[*memory.Tx]{CommandType: h},
	})
	if err != nil {
		return Result{ID: id, Name: name}, nil, err
	}
	defer w.Close()
	if err := pollUntil(ctx, 60*time.Second, func() bool { return w.Ready() && len(w.Owned()) == int(parts) }); err != nil {
		return Result{ID: id, Name: name}, nil, fmt.Errorf("W5 worker never owned the %d partitions: %w", parts, err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(max(n, 10_000)))
	if err != nil {
		return Result{ID: id, Name: name}, nil, err
	}
	defer cl.Close()
	keys := max(env.Keys, 1)
	size := max(env.Size, 8)
	var prodErr atomic.Pointer[error]

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
				payload := make([]byte, size)
				binary.BigEndian.PutUint64(payload, uint64(at.UnixNano()))
				key := []byte("key-" + strconv.Itoa(i%keys))
				rec, err := router.Encode(topic, router.Partition(key, parts), router.Command{Key: key, Type: CommandType, Payload: payload})
				if err != nil {
					return err
				}
				cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
					if err != nil {
						prodErr.CompareAndSwap(nil, &err)
					}
				})
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
		case <-ls.done:
			return nil
		case <-time.After(60 * time.Second):
			return fmt.Errorf("only %d of %d commands committed 60s after the last send", len(ls.latencies()), n)
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	lat := ls.latencies()
	r.Records = len(lat)
	return r, lat, err
}

// latencies returns the recorded latencies, sorted.
func (s *latencySink) latencies() []time.Duration {
	s.mu.Lock()
	out := slices.Clone(s.lat)
	s.mu.Unlock()
	slices.Sort(out)
	return out
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
		rec, err := router.Encode(topic, 0, router.Command{Key: []byte("w6"), Type: CommandType, Payload: make([]byte, max(env.Size, 1))})
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
