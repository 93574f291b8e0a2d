package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
)

// tenure is one ownership tenure of one partition: its token, its queue of
// fetched records, and the goroutine that applies them.
type tenure[Tx any] struct {
	w   *Worker[Tx]
	tok epochs.Token

	// ctx is cancelled once the tenure is gone: at once when it is
	// released with nothing in flight (blocked, claiming, waiting for the
	// tenure it replaces), else when its in-flight batch returns or
	// RevokeTimeout expires; and when it is replaced, and on Close.
	ctx    context.Context
	cancel context.CancelFunc

	stopCh chan struct{} // closed for a graceful stop: finish the in-flight batch
	wake   chan struct{}
	done   chan struct{} // closed when the goroutine exits, or by stop if it never started

	started atomic.Bool
	fenced  atomic.Bool
	// reclaiming is set while a goroutine of reclaimLoop claims the
	// tenure again (at most one at a time).
	reclaiming atomic.Bool

	// pauseMu orders the queue's pauses and resumes (enqueue, take)
	// with their Paused and Resumed events: a resume decided after a
	// pause is never made (nor reported) before it. It is taken before
	// mu.
	pauseMu sync.Mutex
	mu      sync.Mutex
	queue   []*kgo.Record
	paused  bool
	stopped bool

	// next and leader epoch of the last applied batch; -1 until one applies.
	appliedNext  atomic.Int64
	appliedEpoch atomic.Int32
	// startNext is the sink's checkpoint the tenure started from.
	startNext atomic.Int64

	// topicID is the log identity observed at the claim (set before the
	// tenure's goroutine starts).
	topicID string
	// after, if not nil, is closed when the tenure this one replaced has
	// exited (see reclaimTenure); this one starts only after.
	after <-chan struct{}

	smu sync.Mutex // guards st and refusedSince
	st  stallState

	// refusedSince is when a resource the handler called first refused
	// the partition's token, in a row of tenures that applied nothing
	// since (resourceFenced): the blocked state's since, kept across the
	// re-claims. Zero once a batch applies. Guarded by smu: the lanes of
	// a tenure apply, and clear it, concurrently.
	refusedSince time.Time

	// serial is the applier of the tenure's own goroutine: it applies
	// every batch when KeyConcurrency is 1 (the serial path).
	serial applier[Tx]
	// taken is the memory of take's batches (used by the tenure's
	// goroutine only).
	taken []*kgo.Record

	// halt is closed when every lane of the tenure must stop at once (a
	// lane was fenced, or stopped); nil on the serial path, where it never
	// fires. gap is the tenure's checkpoint with gaps (lanes.go).
	halt     chan struct{}
	haltOnce sync.Once
	gap      gapState
	busy     atomic.Int32 // lanes applying a batch
	// keys binds the keys with records pending to their lanes (lanes.go);
	// nil on the serial path.
	keys *keyTable
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
	t.serial = applier[Tx]{t: t, budget: poisonBudget{offset: -1}}
	if w.cfg.KeyConcurrency > 1 {
		t.halt = make(chan struct{})
		t.keys = newKeyTable(w.cfg.KeyConcurrency)
	}
	return t
}

// over reports whether the tenure's goroutines must end: it was asked to
// stop, its context is cancelled or (with lanes) it was halted.
func (t *tenure[Tx]) over() bool {
	select {
	case <-t.stopCh:
	case <-t.ctx.Done():
	case <-t.halt: // nil on the serial path: never ready
	default:
		return false
	}
	return true
}

// await waits until ch is ready or the tenure is over, and reports
// whether ch was ready.
func (t *tenure[Tx]) await(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-t.stopCh:
	case <-t.ctx.Done():
	case <-t.halt:
	}
	return false
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
	if t.halt != nil {
		go t.runLanes()
		return
	}
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

// markFenced stops the tenure for good: it halts its lanes (if any),
// drops its queue and, if it is
// still its partition's tenure, pauses fetching the partition. A tenure
// that is gone (released or replaced) never pauses the partition: the
// pause would stop its successor (release resumes the partition once).
func (t *tenure[Tx]) markFenced() {
	t.fenced.Store(true)
	t.haltLanes()
	t.mu.Lock()
	t.queue = nil
	t.mu.Unlock()
	t.w.pauseIfCurrent(t)
}

// current reports whether t is still its partition's tenure. It may be
// called from any goroutine.
func (w *Worker[Tx]) current(t *tenure[Tx]) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tenures[t.tok.Partition] == t
}

// pauseIfCurrent pauses fetching t's partition if t is still its tenure.
// The check and the pause are one step under w.mu, which release takes to
// remove a tenure before it resumes the partition: so a pause is either
// undone by the release or never made.
func (w *Worker[Tx]) pauseIfCurrent(t *tenure[Tx]) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tenures[t.tok.Partition] != t {
		return false
	}
	w.cl.PauseFetchPartitions(map[string][]int32{t.tok.Topic: {t.tok.Partition}})
	return true
}

// resumeIfCurrent resumes fetching t's partition if t is still its tenure
// and not fenced, and reports whether it did.
func (w *Worker[Tx]) resumeIfCurrent(t *tenure[Tx]) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tenures[t.tok.Partition] != t || t.fenced.Load() {
		return false
	}
	w.cl.ResumeFetchPartitions(map[string][]int32{t.tok.Topic: {t.tok.Partition}})
	return true
}

// lastApplied returns the Kafka commit position of the last applied batch.
func (t *tenure[Tx]) lastApplied() (kgo.EpochOffset, bool) {
	next := t.appliedNext.Load()
	if next < 0 {
		return kgo.EpochOffset{}, false
	}
	return kgo.EpochOffset{Epoch: t.appliedEpoch.Load(), Offset: next}, true
}

// revokedNext returns the next offset of a revoked tenure: the
// checkpoint after its last applied batch, else the one its claim started
// from, or -1 if it never claimed.
func (t *tenure[Tx]) revokedNext() int64 {
	if !t.started.Load() {
		return -1
	}
	return t.next()
}

// next returns the next offset the tenure will apply.
func (t *tenure[Tx]) next() int64 {
	if n := t.appliedNext.Load(); n >= 0 {
		return n
	}
	return t.startNext.Load()
}
