package consumer

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/router"
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

	// topicID is the log identity observed at the claim (set before the
	// tenure's goroutine starts).
	topicID string
	// after, if not nil, is closed when the tenure this one replaced has
	// exited (see reclaimTenure); this one starts only after.
	after <-chan struct{}

	smu sync.Mutex // guards st
	st  stallState

	// Used by the tenure's goroutine only: the batch memory decode reuses
	// (it holds at most one batch's records until the next batch), and the
	// decoder that reuses command type strings.
	batch   decoded[Tx]
	decoder router.Decoder
	taken   []*kgo.Record // the memory of take's batches
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
	t.st.poisonOffset = -1
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

// markFenced stops the tenure for good: it drops its queue and pauses
// fetching its partition.
func (t *tenure[Tx]) markFenced() {
	t.fenced.Store(true)
	t.mu.Lock()
	t.queue = nil
	t.mu.Unlock()
	t.w.cl.PauseFetchPartitions(map[string][]int32{t.tok.Topic: {t.tok.Partition}})
}

// lastApplied returns the Kafka commit position of the last applied batch.
func (t *tenure[Tx]) lastApplied() (kgo.EpochOffset, bool) {
	next := t.appliedNext.Load()
	if next < 0 {
		return kgo.EpochOffset{}, false
	}
	return kgo.EpochOffset{Epoch: t.appliedEpoch.Load(), Offset: next}, true
}

// next returns the next offset the tenure will apply.
func (t *tenure[Tx]) next() int64 {
	if n := t.appliedNext.Load(); n >= 0 {
		return n
	}
	return t.startNext.Load()
}
