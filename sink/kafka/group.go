package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// The group commit: each producer has a committer goroutine, which takes
// the calls (Apply, DeadLetter) queued when it is free, at most one per
// scope, and commits them in one transaction: every call's records and
// checkpoint record, one TxnOffsetCommit per group, member and
// generation, one EndTxn. Each call gets its own result.

// call is one Apply or DeadLetter waiting for a transaction, or in one.
type call struct {
	ctx  context.Context
	op   sink.Op
	st   *scopeState
	tok  epochs.Token
	seen int64         // the scope's NextOffset the effects ran from
	recs []*kgo.Record // the call's records; with their offsets once produced
	to   int64         // the offset committed: past the call's last record
	done chan error    // the call's result; capacity 1

	// Set by the committer that took the call.
	locked bool          // it holds st.mu
	all    []*kgo.Record // recs and the checkpoint record
	md     string        // the offset commit's metadata
	member string        // the group metadata of the attempt
	gen    int32
	err    error
}

// ErrSharedAbort is matched by the error of an Apply or DeadLetter whose
// transaction, shared with calls of other tenures, was aborted because
// the coordinator refused another tenure's offset commit (a stale
// member). None of the call's records was committed and its scope's
// NextOffset is unchanged. It is not sink.ErrFenced: the call's tenure
// may still be the group's, and the call, made again (the consumer
// retries it as a sink failure), commits in a transaction of its own
// tenure's calls.
var ErrSharedAbort = errors.New("kafka sink: the shared transaction was aborted for another tenure's refused offset commit")

// queue holds the calls waiting for a committer.
type queue struct {
	mu        sync.Mutex
	calls     []*call
	busy      map[*scopeState]bool // the scopes of the calls committers hold
	gathering bool                 // a committer lingers for more calls
	stopped   bool
	wake      chan struct{} // capacity 1: a call may be ready
	more      chan struct{} // capacity 1: a call was queued (for the lingering committer)
	done      chan struct{} // closed by stop
	// recent is when each scope's last call was taken: the scopes
	// active in the last recentFor, whose next calls a lingering
	// committer waits for.
	recent map[*scopeState]time.Time
	// hold, while not nil, keeps committers from taking calls (tests
	// only: HoldCommits); lingered counts the waits for more calls.
	hold     chan struct{}
	lingered atomic.Int64
}

// recentFor is how long after its last call a scope counts as active: a
// lingering committer waits (at most Config.Linger) for the next call of
// each active scope, and for no other.
const recentFor = 250 * time.Millisecond

func (q *queue) init() {
	q.busy = map[*scopeState]bool{}
	q.wake = make(chan struct{}, 1)
	q.more = make(chan struct{}, 1)
	q.recent = map[*scopeState]time.Time{}
	q.done = make(chan struct{})
}

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
	select {
	case q.more <- struct{}{}:
	default:
	}
}

// errClosed is the error of a call made or still queued at Close.
func errClosed() error { return fmt.Errorf("kafka sink: closed: %w", kgo.ErrClientClosed) }

// push queues c; false once the queue is stopped.
func (q *queue) push(c *call) bool {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return false
	}
	q.calls = append(q.calls, c)
	q.mu.Unlock()
	q.signal()
	return true
}

// withdraw removes c if no committer took it; false if one did.
func (q *queue) withdraw(c *call) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.Index(q.calls, c); i >= 0 {
		q.calls = slices.Delete(q.calls, i, i+1)
		return true
	}
	return false
}

// stop fails the queued calls and makes take return nil.
func (q *queue) stop() {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return
	}
	q.stopped = true
	calls := q.calls
	q.calls = nil
	close(q.done)
	q.mu.Unlock()
	for _, c := range calls {
		c.done <- errClosed()
	}
}

// ready reports whether a queued call's scope is free; q.mu held.
func (q *queue) ready() bool {
	for _, c := range q.calls {
		if !q.busy[c.st] {
			return true
		}
	}
	return false
}

// awaited reports how many active scopes (recent) have no call queued,
// counting those in another committer's transaction: their next call,
// if it comes within the linger, joins this one's; q.mu held.
func (q *queue) awaited(now time.Time) int {
	n := 0
	for st, at := range q.recent {
		switch {
		case now.Sub(at) > recentFor:
			delete(q.recent, st)
		case !slices.ContainsFunc(q.calls, func(c *call) bool { return c.st == st }):
			n++
		}
	}
	return n
}

// take waits for a queued call whose scope no committer holds; then, if
// linger > 0, waits at most linger for the next call of every other
// active scope (one committer at a time lingers; a lone scope, or one
// whose peers are all queued, does not wait); and returns every queued
// call whose scope is free, one per scope, in queue order, their scopes
// marked busy until release (none if the call waited for was withdrawn
// meanwhile). It returns false once stopped.
func (q *queue) take(linger time.Duration) ([]*call, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.stopped || q.gathering || q.hold != nil || !q.ready() {
		if q.stopped {
			return nil, false
		}
		h := q.hold // nil: never ready
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-q.done:
		case <-h:
		}
		q.mu.Lock()
	}
	if linger > 0 && q.awaited(time.Now()) > 0 {
		q.lingered.Add(1)
		q.gathering = true
		t := time.NewTimer(linger)
		for timeout := false; !timeout && !q.stopped && q.awaited(time.Now()) > 0; {
			q.mu.Unlock()
			select {
			case <-q.more:
			case <-t.C:
				timeout = true
			case <-q.done:
			}
			q.mu.Lock()
		}
		t.Stop()
		q.gathering = false
		if q.stopped {
			return nil, false
		}
	}
	var batch []*call
	rest := q.calls[:0]
	for _, c := range q.calls {
		if q.busy[c.st] {
			rest = append(rest, c)
			continue
		}
		q.busy[c.st] = true
		q.recent[c.st] = time.Now()
		batch = append(batch, c)
	}
	clear(q.calls[len(rest):])
	q.calls = rest
	// Another committer may have taken the wake-up meant for calls
	// queued while this one lingered.
	q.signal()
	return batch, true
}

// release frees the scopes of batch.
func (q *queue) release(batch []*call) {
	q.mu.Lock()
	for _, c := range batch {
		delete(q.busy, c.st)
	}
	q.mu.Unlock()
	q.signal()
}

// commit is the fenced unit of Apply and DeadLetter: recs (and the
// checkpoint record) produced and the offset to committed in one
// transaction, maybe shared with calls of other scopes, after the
// client-side check. seen is the NextOffset the effects ran from: a
// scope that moved since (a concurrent call of the same tenure) is
// refused as a bad batch. It returns the produced records, with their
// offsets. A call still queued when ctx ends returns ctx's error; one in
// a transaction waits for its end.
func (s *Sink) commit(ctx context.Context, op sink.Op, st *scopeState, tok epochs.Token, seen int64, recs []*kgo.Record, to int64) ([]*kgo.Record, error) {
	c := &call{ctx: ctx, op: op, st: st, tok: tok, seen: seen, recs: recs, to: to, done: make(chan error, 1)}
	queued := time.Now()
	if !s.q.push(c) {
		return nil, errClosed()
	}
	s.calls.Add(1)
	defer addSince(&s.callNs, queued)
	var err error
	select {
	case err = <-c.done:
	case <-ctx.Done():
		if s.q.withdraw(c) {
			return nil, ctx.Err()
		}
		err = <-c.done
	}
	if err != nil {
		return nil, err
	}
	return c.recs, nil
}

// committer runs the transactions of producer p until Close.
func (s *Sink) committer(p *producer) {
	defer s.wg.Done()
	for {
		batch, ok := s.q.take(s.cfg.Linger)
		if !ok {
			return
		}
		if len(batch) > 0 {
			s.run(p, batch)
		}
	}
}

// run commits batch (calls of distinct scopes) with p: each call's
// client-side check under its scope's lock, then one transaction of
// every call that passed it, and each call's result to its caller.
func (s *Sink) run(p *producer, batch []*call) {
	// The transaction's requests end when every caller gave up, or at
	// Close.
	ctx, cancel := context.WithCancel(s.runCtx)
	var live atomic.Int64
	live.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, c := range batch {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
		for _, c := range batch {
			if c.locked {
				c.st.mu.Unlock()
			}
		}
		s.q.release(batch)
		for _, c := range batch {
			c.done <- c.err
		}
	}()
	if p.cl == nil {
		// A replacement whose start failed (the broker was still
		// away): start it now.
		if err := s.start(ctx, p); err != nil {
			s.startFailed.Add(1)
			for _, c := range batch {
				c.err = err
			}
			return
		}
	}
	var in []*call
	for _, c := range batch {
		c.st.mu.Lock()
		c.locked = true
		if c.err = s.prepare(ctx, c); c.err == nil {
			in = append(in, c)
		}
	}
	backoff := 10 * time.Millisecond
	for attempt := 1; len(in) > 0; attempt++ {
		var ok []*call
		for _, c := range in {
			if c.err = c.ctx.Err(); c.err != nil {
				continue
			}
			if c.member, c.gen, c.err = s.groupMeta(c.op, c.tok); c.err == nil {
				ok = append(ok, c)
			}
		}
		if in = ok; len(in) == 0 {
			return
		}
		if len(in) > 1 {
			s.shared.Add(int64(len(in)))
		}
		refused, err := s.transact(ctx, p, in)
		if err == nil {
			for _, c := range in {
				c.st.fence.NextOffset = c.to
			}
			return
		}
		var retry []*call
		for _, c := range in {
			switch {
			case refused == nil:
				c.err = err
			case !refused[c]:
				c.err = fmt.Errorf("%w: %s, in the transaction with %s (not fenced itself), was refused: %v", ErrSharedAbort, refusedBy(refused), c.tok, err)
			case groupFencing(err):
				c.err = &GroupFencedError{Op: c.op, Offered: c.tok, Member: c.member, Generation: c.gen, Err: err}
			case generationMoved(err):
				// The member is the group's, at a generation its
				// client has not learned yet (a rebalance it takes part
				// in): the same records again, at the generation the
				// client then has.
				s.log(slog.LevelWarn, "kafka sink: offset commit refused for the member's generation; trying again",
					"token", c.tok.String(), "member", c.member, "generation", c.gen, "attempt", attempt, "err", err)
				c.err = err
				if attempt == maxGenerationRetries {
					c.err = fmt.Errorf("%w (member %q, generation %d, %d attempts): %w", ErrRebalancing, c.member, c.gen, attempt, err)
				} else {
					retry = append(retry, c)
				}
			default:
				c.err = err
			}
		}
		if cause, broken := producerBroken(err); broken {
			s.replace(ctx, p, cause, err)
			return
		}
		if in = retry; len(in) > 0 {
			select {
			case <-ctx.Done():
				for _, c := range in {
					c.err = errors.Join(c.err, ctx.Err())
				}
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 500*time.Millisecond)
		}
	}
}

// refusedBy names the tokens of the refused calls.
func refusedBy(refused map[*call]bool) string {
	var toks []string
	for c := range refused {
		toks = append(toks, c.tok.String())
	}
	slices.Sort(toks)
	return strings.Join(toks, ", ")
}

// prepare runs c's client-side check (c.st.mu held) and makes its
// checkpoint record and offset metadata.
func (s *Sink) prepare(ctx context.Context, c *call) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	next, err := s.begin(ctx, c.op, c.st, c.tok)
	if err != nil {
		return err
	}
	if next != c.seen {
		return fmt.Errorf("%w: the scope's NextOffset moved from %d to %d while the effects ran (concurrent calls of one tenure)", sink.ErrBadBatch, c.seen, next)
	}
	if c.md, err = commitMetadata(c.tok, c.st.fence.TopicID); err != nil {
		return err
	}
	cpRec := &kgo.Record{Topic: s.cfg.CheckpointTopic, Key: []byte(scopeKey(c.tok.Scope())),
		Value: []byte(c.tok.String() + " next=" + strconv.FormatInt(c.to, 10))}
	c.all = append(c.recs[:len(c.recs):len(c.recs)], cpRec)
	return nil
}

// commitOffsets commits the offsets of in's calls in p's open
// transaction: one TxnOffsetCommit per group, member and generation.
// When the coordinator refuses one, it stops there, and refused holds
// the calls that commit carried.
func (s *Sink) commitOffsets(ctx context.Context, p *producer, in []*call) (refused map[*call]bool, err error) {
	var keys []commitKey
	by := map[commitKey][]*call{}
	for _, c := range in {
		k := commitKey{s.group(c.tok.Scope()), c.member, c.gen}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], c)
	}
	for _, k := range keys {
		offs := make([]offsetCommit, len(by[k]))
		for i, c := range by[k] {
			offs[i] = offsetCommit{topic: c.tok.Topic, partition: c.tok.Partition, offset: c.to, metadata: c.md}
		}
		if err := txnOffsetCommit(ctx, p.cl, p.txnID, !s.implicitOffsets, k.group, k.member, k.gen, offs); err != nil {
			refused := map[*call]bool{}
			for _, c := range by[k] {
				refused[c] = true
			}
			return refused, err
		}
	}
	return nil, nil
}

// commitKey is what one TxnOffsetCommit carries besides the offsets.
type commitKey struct {
	group, member string
	gen           int32
}

// transact is one attempt at in's transaction: every call's records,
// one offset commit per group, member and generation, ended with a
// commit, or aborted. When the coordinator refused an offset commit,
// refused holds the calls it carried (and err is the refusal); the
// transaction was aborted at the first refusal.
func (s *Sink) transact(ctx context.Context, p *producer, in []*call) (refused map[*call]bool, err error) {
	if err := p.cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoBegin, err)
	}
	s.txns.Add(1)
	k := 0
	for _, c := range in {
		k += len(c.all)
	}
	all := make([]*kgo.Record, 0, k)
	toks := make([]string, len(in))
	for i, c := range in {
		all = append(all, c.all...)
		toks[i] = c.tok.String()
	}
	names := strings.Join(toks, ", ")
	fail := func(err error) error {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.TransactionTimeout)
		defer cancel()
		ended := time.Now()
		aerr := p.cl.EndTransaction(actx, kgo.TryAbort)
		addSince(&s.endNs, ended)
		s.log(slog.LevelWarn, "kafka sink: transaction aborted", "tokens", names, "transactional_id", p.txnID,
			"records", len(all), "err", err, "abort_err", aerr)
		if aerr != nil {
			for _, c := range in {
				c.st.uncertain = true
			}
			return errors.Join(err, fmt.Errorf("%w: abort: %w", errNotEnded, aerr))
		}
		return err
	}
	p.pid, p.epoch, p.touched = -1, -1, nil
	if id, epoch, err := p.cl.ProducerID(ctx); err == nil {
		p.pid, p.epoch = id, epoch
	}
	produced := time.Now()
	perr := p.cl.ProduceSync(ctx, all...).FirstErr()
	addSince(&s.produceNs, produced)
	p.touched = map[string][]int32{}
	for _, r := range all {
		if r.Partition >= 0 && !slices.Contains(p.touched[r.Topic], r.Partition) {
			p.touched[r.Topic] = append(p.touched[r.Topic], r.Partition)
		}
	}
	if perr != nil {
		return nil, fail(fmt.Errorf("kafka sink: produce %d records in the transaction: %w", len(all), perr))
	}
	if testBeforeOffsetCommit != nil {
		testBeforeOffsetCommit()
	}
	committed := time.Now()
	refused, err = s.commitOffsets(ctx, p, in)
	addSince(&s.offsetsNs, committed)
	if err != nil {
		return refused, fail(err)
	}
	if testBeforeEndTxn != nil {
		testBeforeEndTxn()
	}
	// The commit's outcome may be unknown if it fails: the next call of
	// each scope reads the committed offset first.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.TransactionTimeout)
	defer cancel()
	ended := time.Now()
	defer addSince(&s.endNs, ended)
	if err := p.cl.EndTransaction(ectx, kgo.TryCommit); err != nil {
		for _, c := range in {
			c.st.uncertain = true
		}
		if aerr := p.cl.EndTransaction(ectx, kgo.TryAbort); aerr != nil {
			err = errors.Join(err, fmt.Errorf("%w: abort: %w", errNotEnded, aerr))
		}
		return nil, fmt.Errorf("kafka sink: commit the transaction of %s: %w", names, err)
	}
	return nil, nil
}
