package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
)

// tenure is one ownership tenure of one partition: its token, its queue of
// fetched records, and the goroutine that applies them.
type tenure[Tx any] struct {
	w   *Worker[Tx]
	tok epochs.Token

	ctx    context.Context // cancelled for a hard stop (revoke timeout, Close)
	cancel context.CancelFunc

	stopCh chan struct{} // closed for a graceful stop: finish the in-flight batch
	wake   chan struct{}
	done   chan struct{} // closed when the goroutine exits, or by stop if it never started

	started atomic.Bool
	fenced  atomic.Bool

	mu      sync.Mutex
	queue   []*kgo.Record
	paused  bool
	stopped bool

	// next and leader epoch of the last applied batch; -1 until one applies.
	appliedNext  atomic.Int64
	appliedEpoch atomic.Int32
	// startNext is the sink's checkpoint the tenure started from.
	startNext atomic.Int64
}

func newTenure[Tx any](w *Worker[Tx], tok epochs.Token) *tenure[Tx] {
	ctx, cancel := context.WithCancel(w.ctx)
	t := &tenure[Tx]{
		w: w, tok: tok, ctx: ctx, cancel: cancel,
		stopCh: make(chan struct{}),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	t.appliedNext.Store(-1)
	return t
}

// start launches the tenure's goroutine, which applies records from next
// on. It does nothing if the tenure was already started or stopped.
func (t *tenure[Tx]) start(next int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.started.Load() {
		return
	}
	t.startNext.Store(next)
	t.started.Store(true)
	t.w.wg.Add(1)
	go t.run(next)
}

// stop asks the goroutine to stop after its in-flight batch.
func (t *tenure[Tx]) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	close(t.stopCh)
	if !t.started.Load() {
		close(t.done) // never started: nobody else closes done
	}
}

// markFenced stops the tenure for good and pauses fetching its partition.
// If t is still the partition's tenure, its tenure epoch and lag series are
// deleted (under w.mu, so that the lag refresher cannot set them again).
func (t *tenure[Tx]) markFenced() {
	t.w.mu.Lock()
	t.fenced.Store(true)
	if t.w.tenures[t.tok.Partition] == t {
		t.w.m.dropPartition(t.tok.Topic, t.tok.Partition)
	}
	t.w.refreshOwnedLocked()
	t.w.mu.Unlock()
	t.mu.Lock()
	t.queue = nil
	t.mu.Unlock()
	t.w.cl.PauseFetchPartitions(map[string][]int32{t.tok.Topic: {t.tok.Partition}})
}

func (t *tenure[Tx]) lastApplied() (kgo.EpochOffset, bool) {
	next := t.appliedNext.Load()
	if next < 0 {
		return kgo.EpochOffset{}, false
	}
	return kgo.EpochOffset{Epoch: t.appliedEpoch.Load(), Offset: next}, true
}

// enqueue is called by the poll loop.
func (t *tenure[Tx]) enqueue(recs []*kgo.Record) {
	if t.fenced.Load() {
		return
	}
	t.mu.Lock()
	t.queue = append(t.queue, recs...)
	pause := !t.paused && len(t.queue) >= t.w.cfg.QueueSize
	if pause {
		t.paused = true
	}
	t.mu.Unlock()
	if pause {
		t.w.pauses.Add(1)
		t.w.cl.PauseFetchPartitions(map[string][]int32{t.tok.Topic: {t.tok.Partition}})
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// take removes up to max records from the queue.
func (t *tenure[Tx]) take(max int) []*kgo.Record {
	t.mu.Lock()
	n := min(len(t.queue), max)
	batch := make([]*kgo.Record, n)
	copy(batch, t.queue)
	t.queue = t.queue[n:]
	if len(t.queue) == 0 {
		t.queue = nil
	}
	resume := t.paused && len(t.queue) <= t.w.cfg.QueueSize/2
	if resume {
		t.paused = false
	}
	t.mu.Unlock()
	if resume && !t.fenced.Load() {
		t.w.cl.ResumeFetchPartitions(map[string][]int32{t.tok.Topic: {t.tok.Partition}})
	}
	return batch
}

func (t *tenure[Tx]) run(next int64) {
	defer t.w.wg.Done()
	defer close(t.done)
	for {
		select {
		case <-t.stopCh:
			return
		case <-t.ctx.Done():
			return
		default:
		}
		batch := t.take(t.w.cfg.MaxBatch)
		if len(batch) == 0 {
			select {
			case <-t.wake:
			case <-t.stopCh:
				return
			case <-t.ctx.Done():
				return
			}
			continue
		}
		var ok bool
		next, ok = t.process(batch, next)
		if !ok {
			return
		}
	}
}

// process applies one batch, retrying anything but a fenced outcome. It
// returns the new next offset and whether the tenure may go on.
func (t *tenure[Tx]) process(batch []*kgo.Record, next int64) (int64, bool) {
	// Records below the checkpoint were applied already (by this tenure or
	// a previous one): the sink would skip them too.
	i := 0
	for i < len(batch) && batch[i].Offset < next {
		i++
	}
	batch = batch[i:]
	if len(batch) == 0 {
		return next, true
	}
	offsets := make([]int64, len(batch))
	cmds := make([]Command, len(batch))
	decodeErrs := make([]error, len(batch))
	for i, r := range batch {
		offsets[i] = r.Offset
		c, err := router.Decode(r)
		if err != nil {
			decodeErrs[i] = fmt.Errorf("%w: offset %d: %w", ErrUndecodable, r.Offset, err)
		}
		cmds[i] = Command{Command: c, Offset: r.Offset, Timestamp: r.Timestamp, Token: t.tok}
	}
	handlers := t.w.cfg.Handlers
	effect := func(ctx context.Context, tx Tx, i int) error {
		if decodeErrs[i] != nil {
			return decodeErrs[i]
		}
		h, ok := handlers[cmds[i].Type]
		if !ok {
			return fmt.Errorf("%w %q at offset %d", ErrNoHandler, cmds[i].Type, cmds[i].Offset)
		}
		if m := t.w.m; m != nil {
			return m.wrapHandler(func() error { return h(ctx, tx, cmds[i]) })
		}
		return h(ctx, tx, cmds[i])
	}

	backoff := t.w.cfg.RetryBackoff
	for {
		var start time.Time
		if t.w.m != nil {
			start = time.Now()
		}
		res, err := t.w.cfg.Sink.Apply(t.ctx, t.tok, offsets, effect)
		t.w.m.applyDone(start)
		if err == nil {
			t.w.batches.Add(1)
			t.w.m.applied(t.tok.Topic, t.tok.Partition, len(offsets), res.Applied)
			t.w.records.Add(int64(res.Applied))
			t.w.skipped.Add(int64(res.Skipped))
			last := batch[len(batch)-1]
			t.appliedEpoch.Store(last.LeaderEpoch)
			t.appliedNext.Store(res.NextOffset)
			t.w.markApplied(t, res.NextOffset, last.LeaderEpoch)
			return res.NextOffset, true
		}
		if errors.Is(err, sink.ErrFenced) {
			t.w.fencedApplies.Add(1)
			t.w.m.applyFenced(t.tok.Topic, t.tok.Partition)
			t.markFenced()
			t.w.cfg.Logger.Error("apply fenced; partition stopped", append(tokenAttrs(t.tok), "err", err, "first_offset", offsets[0], "records", len(offsets))...)
			if t.w.cfg.OnFenced != nil {
				t.w.cfg.OnFenced(err)
			}
			return next, false
		}
		if t.ctx.Err() != nil {
			return next, false
		}
		t.w.retries.Add(1)
		t.w.m.applyFailed(t.tok.Topic, err)
		t.w.cfg.Logger.Warn("apply failed; retrying batch", append(tokenAttrs(t.tok), "err", err, "first_offset", offsets[0], "backoff", backoff)...)
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-t.stopCh:
			timer.Stop()
			return next, false
		case <-t.ctx.Done():
			timer.Stop()
			return next, false
		}
		backoff = min(2*backoff, t.w.cfg.MaxRetryBackoff)
	}
}
