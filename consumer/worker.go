package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// ErrClosed is what Worker.Err returns after Close: the Worker was stopped
// by its owner, not by an error.
var ErrClosed = errors.New("consumer: worker closed")

// Worker is one consumer group member. Create it with New; stop it with
// Close. All methods are safe to call from any goroutine.
type Worker[Tx any] struct {
	cfg Config[Tx]
	cl  *kgo.Client
	obs observers

	ctx    context.Context // cancelled when the Worker stops, after the client has left
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the Worker started

	mu      sync.Mutex
	tenures map[int32]*tenure[Tx]
	// synced is the member ID the last assignment (onAssigned) ran under:
	// a member whose ID differs has joined but not yet received its
	// partitions, so it is not Ready.
	synced string
	// syncedEpoch is the group epoch that assignment ran under.
	syncedEpoch int32

	commitMu  sync.Mutex // serializes the committer with final commits on revoke
	pendMu    sync.Mutex
	pending   map[int32]kgo.EpochOffset
	commitSig chan struct{}

	ready    chan struct{} // closed once New has filled in w
	stopOnce sync.Once
	done     chan struct{} // closed when the Worker has stopped for good
	err      error         // why; written once before done is closed

	// the sink's features, and its optional capabilities (nil without
	// them)
	features sink.Features
	dlStore  dlq.Store
	health   sink.Health
	// sinkCommits: the sink commits the group's offsets itself, in its
	// fenced unit (OffsetCommitter); the Worker commits none after a batch.
	sinkCommits bool
	mirrorSig   chan struct{} // nil without Config.DeadLetterTopic
	reclaimSig  chan struct{} // wakes reclaimLoop before its next tick
	topicSig    chan struct{} // wakes the lag loop to check the topic (see topicIDUnknown)
	// clientTopic is the topic ID the client consumes (see checkTopicID);
	// "" until the first check.
	clientTopic atomic.Pointer[string]

	lossMu sync.Mutex
	losses map[int32]lossMark // per partition, the retention loss already counted

	route *routeCheck

	// closing is set when stop begins: from then on the lag loop reports
	// nothing (see lagLoop).
	closing atomic.Bool

	// stats counts the events into Stats; it is the first of obs's
	// Observers.
	stats statsObserver
}

// New validates cfg, connects to the brokers and joins the group.
//
// The Worker owns the goroutines it starts: a poll loop, an offset
// committer, a lag refresher and one goroutine per owned partition (with
// Config.KeyConcurrency above 1, it owns its lanes' goroutines and waits
// for them before it exits). They
// run until Close (or until the Worker stops by itself, see Done). ctx
// bounds only the initial connection check.
func New[Tx any](ctx context.Context, cfg Config[Tx]) (*Worker[Tx], error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Worker[Tx]{
		cfg:        c,
		tenures:    make(map[int32]*tenure[Tx]),
		pending:    make(map[int32]kgo.EpochOffset),
		commitSig:  make(chan struct{}, 1),
		reclaimSig: make(chan struct{}, 1),
		topicSig:   make(chan struct{}, 1),
		losses:     make(map[int32]lossMark),
		ready:      make(chan struct{}),
		done:       make(chan struct{}),
		route:      &routeCheck{partitioner: c.Partitioner, policy: c.Misroute},
	}
	// Stats are counted first: every other Observer sees an event
	// counted.
	all := []Observer{&w.stats}
	if c.Logger != nil {
		all = append(all, NewLogObserver(c.Logger))
	}
	all = append(all, c.Observers...)
	w.obs = newObservers(all)
	w.features = c.Sink.Features()
	w.dlStore, _ = sink.As[dlq.Store](c.Sink)
	w.health, _ = sink.As[sink.Health](c.Sink)
	if oc, ok := sink.As[OffsetCommitter](c.Sink); ok {
		w.sinkCommits = oc.CommitsOffsets()
	}
	w.obs.emit(Started{Group: c.Group, Topic: c.Topic, Features: w.features, KeyConcurrency: c.KeyConcurrency})
	if w.features.DedupeWindow <= 0 && c.Logger != nil {
		c.Logger.Warn("the sink does not deduplicate command IDs (no Features.DedupeWindow): records are applied once per offset only, so a command that entered the log twice is applied twice",
			"group", c.Group, "topic", c.Topic)
	}
	if c.DeadLetterTopic != "" {
		if w.dlStore == nil {
			return nil, fmt.Errorf("%w: DeadLetterTopic %q needs a sink that stores dead letters (dlq.Store)", ErrConfig, c.DeadLetterTopic)
		}
		w.mirrorSig = make(chan struct{}, 1)
	}
	if !w.features.DeadLetters && (c.Poison.Undecodable == PoisonDeadLetter || c.Poison.NoHandler == PoisonDeadLetter || c.Poison.HandlerError == PoisonDeadLetter) && c.Logger != nil {
		c.Logger.Warn("the sink cannot store dead letters (no Features.DeadLetters): records that cannot be applied will stall their partition instead of being dead-lettered",
			"group", c.Group, "topic", c.Topic)
	}

	// The client joins the group as soon as it exists; its callbacks wait
	// on ready until w is complete.
	w.ctx, w.cancel = context.WithCancel(context.Background())
	cl, err := kgo.NewClient(w.clientOpts()...)
	if err != nil {
		w.cancel()
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	w.cl = cl
	fail := func(err error) (*Worker[Tx], error) {
		w.cancel()
		close(w.ready)
		cl.Close()
		return nil, err
	}
	if err := cl.Ping(ctx); err != nil {
		return fail(fmt.Errorf("consumer: brokers %v unreachable: %w", c.Brokers, err))
	}
	if c.DeadLetterTopic != "" {
		if err := w.checkDeadLetterTopic(ctx); err != nil {
			return fail(err)
		}
	}
	w.readPartitionCount(ctx)
	close(w.ready)
	w.wg.Add(4)
	go w.pollLoop()
	go w.committer()
	go w.lagLoop()
	go w.reclaimLoop()
	if w.mirrorSig != nil {
		w.wg.Add(1)
		go w.mirrorLoop()
	}
	return w, nil
}

// Close leaves the group (revoked partitions finish their in-flight batch and
// commit their offsets), then stops every goroutine the Worker started and
// waits for them; the last event it emits is Stopped. It is
// idempotent and returns nil; after it, Done is closed and Err returns
// ErrClosed unless the Worker had already stopped by itself. Handlers must
// honour their ctx, or Close waits for them.
func (w *Worker[Tx]) Close() error {
	w.stop(ErrClosed)
	<-w.done
	return nil
}

// Done returns a channel that is closed when the Worker has stopped for
// good: after Close, or by itself on an error it cannot recover from (the
// group refused this member for a reason a retry cannot fix, such as a
// missing authorization or an invalid session timeout). Err then says why.
// A program should stop (and be restarted by its supervisor) when Done is
// closed and it did not call Close.
func (w *Worker[Tx]) Done() <-chan struct{} { return w.done }

// Err returns nil while the Worker runs, and once Done is closed the reason
// it stopped: ErrClosed after Close, or the error that stopped it.
func (w *Worker[Tx]) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// stop stops the Worker once, for cause: the client leaves the group
// (running onRevoked for everything owned), every goroutine is stopped and
// waited for, metrics are unregistered, and done is closed. It must not be
// called from one of the Worker's goroutines (they are waited for): the
// poll loop uses stopAsync.
func (w *Worker[Tx]) stop(cause error) {
	w.stopOnce.Do(func() {
		w.closing.Store(true)
		w.cl.Close() // leaves the group; runs onRevoked for everything owned
		w.cancel()
		w.mu.Lock()
		for p, t := range w.tenures {
			t.stop()
			t.cancel()
			delete(w.tenures, p)
		}
		w.mu.Unlock()
		w.wg.Wait()
		w.err = cause
		w.obs.emit(Stopped{Err: cause})
		close(w.done)
	})
}

// stopAsync stops the Worker for cause from one of its own goroutines.
func (w *Worker[Tx]) stopAsync(cause error) { go w.stop(cause) }

// Owned returns the tokens of the partitions this Worker currently processes
// (claimed and not fenced), sorted by partition.
func (w *Worker[Tx]) Owned() []epochs.Token {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []epochs.Token
	for _, t := range w.tenures {
		if t.started.Load() && !t.fenced.Load() {
			out = append(out, t.tok)
		}
	}
	slices.SortFunc(out, func(a, b epochs.Token) int { return cmp.Compare(a.Partition, b.Partition) })
	return out
}

// Member returns the group member ID and the current group epoch as the
// client knows them ("" and -1 before the first join).
func (w *Worker[Tx]) Member() (string, int32) { return w.cl.GroupMetadata() }

// Ready reports whether the Worker serves its share of the group:
// Readiness(0).Ready (see Readiness for the rule and the reasons). Any
// goroutine may call it.
func (w *Worker[Tx]) Ready() bool { return w.Readiness(0).Ready }
