package consumer

import (
	"hash/maphash"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/sink"
)

// Key concurrency (Config.KeyConcurrency > 1, docs/operating.md#key-concurrency):
// the tenure's goroutine becomes a dispatcher (runLanes) that hands each
// record, in offset order, to one of KeyConcurrency lanes: its key's lane
// while the key has records pending there, else the least-loaded lane
// (keyTable); each lane is a goroutine of the tenure that batches its records
// and applies them with the shared process (apply.go) through the sink's
// own sink.Features.Gaps, with the tenure's token. The tenure keeps its own
// checkpoint with gaps (gapState): the claim's, plus the spans of every
// lane apply that succeeded; its watermark is the partition's commit
// candidate, and the sink, which records the same spans in the fenced
// unit of each apply, stays the source of truth.

// gapState is a tenure's checkpoint with gaps.
type gapState struct {
	mu sync.Mutex
	// claimed is the checkpoint Claim returned (set before the
	// tenure starts, read by the dispatcher only after).
	claimed sink.Checkpoint
	// cp is claimed plus the spans of every successful lane apply and
	// dead letter of the tenure: its NextOffset is the tenure's watermark.
	cp sink.Checkpoint
}

// claimedGapped records the checkpoint a claim of t returned. It is
// called by the claiming goroutine, before t starts.
func (t *tenure[Tx]) claimedGapped(cp sink.Checkpoint) {
	t.gap.mu.Lock()
	defer t.gap.mu.Unlock()
	t.gap.claimed = cp
	t.gap.cp = cp.Clone()
}

// gapDone adds the spans [from[i], offsets[i]+1) of records a lane applied
// (or dead-lettered) to the tenure's checkpoint and returns its watermark.
// When the watermark rose it is the partition's new commit candidate
// (with leaderEpoch, the last record's, if the watermark is right after
// it, else -1): under gap.mu, so that candidates of concurrent lanes never
// go backwards. It is called by the tenure's lanes.
func (t *tenure[Tx]) gapDone(from, offsets []int64, leaderEpoch int32) int64 {
	g := &t.gap
	g.mu.Lock()
	defer g.mu.Unlock()
	before := g.cp.NextOffset
	for i := 0; i < len(offsets); {
		// A run of records with nothing between them is one span.
		j := i + 1
		for j < len(offsets) && from[j] == offsets[j-1]+1 {
			j++
		}
		g.cp.Add(from[i], offsets[j-1]+1)
		i = j
	}
	next := g.cp.NextOffset
	if next > before {
		epoch := int32(-1)
		if next == offsets[len(offsets)-1]+1 {
			epoch = leaderEpoch
		}
		t.appliedEpoch.Store(epoch)
		t.appliedNext.Store(next)
		t.w.markApplied(t, next, epoch)
	}
	t.w.obs.emit(GapSpans{Token: t.tok, Spans: len(g.cp.Done)}) // under g.mu: in order
	return next
}

// haltLanes stops every lane of t (and its dispatcher) at once: they
// take no new batch, and a lane waiting out a backoff stops waiting. An
// in-flight apply runs to its end: after a fence the sink refuses it. It
// may be called from any goroutine; it does nothing on the serial path.
func (t *tenure[Tx]) haltLanes() {
	if t.halt != nil {
		t.haltOnce.Do(func() { close(t.halt) })
	}
}

// laneRec is a record dispatched to a lane, with the first offset it
// covers (sink.Batch.From).
type laneRec struct {
	r    *kgo.Record
	from int64
	key  uint64 // the hash of its key in the tenure's keyTable
}

// lane is one of a tenure's KeyConcurrency lanes: a queue of the records
// of the keys bound to it (keyTable), in offset order, bounded by
// laneCap, and the applier that applies them.
type lane[Tx any] struct {
	index int
	a     applier[Tx]
	wake  chan struct{} // records were queued

	mu sync.Mutex
	q  []laneRec

	// the memory of take's batches (the lane's goroutine only)
	recs []*kgo.Record
	from []int64
	keys []uint64
}

// laneCap is how many records a lane of a worker with cfg may hold
// queued: QueueSize shared by the lanes, at least MaxBatch.
func laneCap[Tx any](cfg *Config[Tx]) int {
	return max(cfg.QueueSize/cfg.KeyConcurrency, cfg.MaxBatch)
}

// keyTable binds each key of a tenure to the lane that holds its
// pending records (queued in the dispatcher or the lane, or in flight),
// so that one key's records are applied by one lane at a time, in offset
// order; a key with nothing pending is free, and its next record goes to
// the least-loaded lane. Keys are 64-bit hashes (maphash, a seed per
// tenure): two keys of one hash share an entry, so they share a lane
// while either has records pending, which keeps both orders. Records
// without a key all have the hash of the empty key: one entry, ordered
// among themselves. The dispatcher binds under mu; each lane releases
// the records it applied, dead-lettered or had the sink skip, under mu.
type keyTable struct {
	seed maphash.Seed

	mu sync.Mutex
	// keys holds an entry per key with records pending: its lane and how
	// many (removed at zero: bounded by the records in flight).
	keys map[uint64]keyLane
	// load is each lane's pending records, over its keys.
	load []int
}

// keyLane is a key's lane and its records pending there.
type keyLane struct {
	lane    int32
	pending int32
}

func newKeyTable(lanes int) *keyTable {
	return &keyTable{seed: maphash.MakeSeed(), keys: map[uint64]keyLane{}, load: make([]int, lanes)}
}

// hash returns the key's table key.
func (k *keyTable) hash(key []byte) uint64 { return maphash.Bytes(k.seed, key) }

// bind adds a pending record of the key of hash h and returns its lane:
// the key's lane while it has records pending, else the lane with the
// fewest pending records (the first of them). The caller holds k.mu.
func (k *keyTable) bind(h uint64) int {
	e, ok := k.keys[h]
	if !ok {
		e.lane = 0
		for i, n := range k.load {
			if n < k.load[e.lane] {
				e.lane = int32(i)
			}
		}
	}
	e.pending++
	k.keys[h] = e
	k.load[e.lane]++
	return int(e.lane)
}

// release removes the records of hashes hs, pending in lane, from the
// table: a key whose last pending record it was is free again. It is
// called by the lane, once the records are done (applied, skipped or
// dead-lettered).
func (k *keyTable) release(lane int, hs []uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, h := range hs {
		e := k.keys[h]
		if e.pending--; e.pending <= 0 {
			delete(k.keys, h)
		} else {
			k.keys[h] = e
		}
	}
	k.load[lane] -= len(hs)
}

// pending returns the keys and the records pending (tests).
func (k *keyTable) pending() (keys, records int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, n := range k.load {
		records += n
	}
	return len(k.keys), records
}

// push appends as many of recs to l's queue as it has room for (of
// capacity) and returns how many; it wakes the lane. It is called by the
// dispatcher.
func (l *lane[Tx]) push(recs []laneRec, capacity int) int {
	l.mu.Lock()
	n := min(len(recs), capacity-len(l.q))
	if n > 0 {
		l.q = append(l.q, recs[:n]...)
	}
	l.mu.Unlock()
	if n > 0 {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return max(n, 0)
}

// take removes up to max records from l's queue, with their From and
// key hashes, into memory that is valid until its next call. It is
// called by the lane's goroutine.
func (l *lane[Tx]) take(max int) ([]*kgo.Record, []int64, []uint64) {
	l.mu.Lock()
	n := min(len(l.q), max)
	if cap(l.recs) < n {
		l.recs, l.from, l.keys = make([]*kgo.Record, n), make([]int64, n), make([]uint64, n)
	}
	recs, from, keys := l.recs[:n], l.from[:n], l.keys[:n]
	for i, lr := range l.q[:n] {
		recs[i], from[i], keys[i] = lr.r, lr.from, lr.key
	}
	k := copy(l.q, l.q[n:])
	clear(l.q[k:]) // the queue's array no longer holds what it handed out
	l.q = l.q[:k]
	l.mu.Unlock()
	return recs, from, keys
}

// run is the lane's goroutine: it applies batches of up to MaxBatch of
// its records until the tenure is stopped (after the in-flight batch),
// cancelled, fenced or halted, and signals space to the dispatcher each
// time it takes records. A batch that cannot go on (fenced, stopped)
// halts every lane of the tenure.
func (l *lane[Tx]) run(space chan<- struct{}) {
	t := l.a.t
	for !t.over() {
		recs, from, keys := l.take(t.w.cfg.MaxBatch)
		if len(recs) == 0 {
			if !t.await(l.wake) {
				return
			}
			continue
		}
		select {
		case space <- struct{}{}:
		default:
		}
		t.w.obs.emit(LanesBusy{Token: t.tok, Busy: int(t.busy.Add(1))})
		_, ok := l.a.process(recs, from, keys, 0)
		t.w.obs.emit(LanesBusy{Token: t.tok, Busy: int(t.busy.Add(-1))})
		if !ok {
			t.haltLanes()
			return
		}
	}
}

// runLanes is the goroutine of a tenure with KeyConcurrency lanes: the
// dispatcher. It starts the lanes, then takes the partition's records in
// offset order and queues each on the lane the keyTable binds its key to
// (the key's lane while it has records pending, else the least-loaded
// one), with its From: the offset right after the record it took before
// (of any lane), starting at the claim's watermark, so that the offsets
// without a record between them (transaction markers) are done with it.
// Records the claim's checkpoint holds (done by a lane of an earlier
// tenure) are passed over. When a lane's queue is full the dispatcher
// waits for it, taking nothing more from the partition's queue, which
// then fills and pauses the partition's fetching: a stuck key holds up
// the keys bound to its lane until its queue is full, then the
// partition. The lanes exit before done closes.
func (t *tenure[Tx]) runLanes() {
	w := t.w
	defer w.wg.Done()
	defer close(t.done)
	n := w.cfg.KeyConcurrency
	capacity := laneCap(&w.cfg)
	space := make(chan struct{}, 1)
	lanes := make([]*lane[Tx], n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range lanes {
		l := &lane[Tx]{index: i, wake: make(chan struct{}, 1)}
		l.a = applier[Tx]{t: t, lane: l, budget: poisonBudget{offset: -1}}
		lanes[i] = l
		wg.Go(func() { l.run(space) })
	}
	t.gap.mu.Lock()
	cp := t.gap.claimed
	w.obs.emit(GapSpans{Token: t.tok, Spans: len(t.gap.cp.Done)})
	t.gap.mu.Unlock()
	from := cp.NextOffset
	kt := t.keys
	pending := make([][]laneRec, n)
	for !t.over() {
		recs := t.take(w.cfg.QueueSize)
		if len(recs) == 0 {
			if !t.await(t.wake) {
				return
			}
			continue
		}
		kt.mu.Lock()
		for _, r := range recs {
			if r.Offset < from {
				continue // below what was dispatched: cannot happen, fetching is in order
			}
			f := from
			from = r.Offset + 1
			if cp.Contains(r.Offset) {
				continue // done by a lane of an earlier tenure
			}
			h := kt.hash(r.Key)
			i := kt.bind(h)
			pending[i] = append(pending[i], laneRec{r: r, from: f, key: h})
		}
		kt.mu.Unlock()
		for {
			left := false
			for i, p := range pending {
				if len(p) == 0 {
					continue
				}
				k := lanes[i].push(p, capacity)
				rest := copy(p, p[k:])
				clear(p[rest:])
				pending[i] = p[:rest]
				left = left || rest > 0
			}
			if !left {
				break
			}
			if !t.await(space) {
				return
			}
		}
	}
}
