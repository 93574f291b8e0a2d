package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/sink"
)

// run is the tenure's goroutine: it takes batches from the queue and
// applies them until the tenure is stopped, cancelled or fenced.
func (t *tenure[Tx]) run(next int64) {
	defer t.w.wg.Done()
	defer close(t.done)
	for !t.over() {
		batch := t.take(t.w.cfg.MaxBatch)
		if len(batch) == 0 {
			if !t.await(t.wake) {
				return
			}
			continue
		}
		var ok bool
		next, ok = t.serial.process(batch, nil, nil, next)
		if !ok {
			return
		}
	}
}

// applier is where process runs: the tenure's own goroutine (the serial
// path, KeyConcurrency 1) or one of its lanes (lanes.go). It owns the
// batch memory decode reuses and the retry budget of its failing record,
// so that lanes of one tenure run process concurrently.
type applier[Tx any] struct {
	t    *tenure[Tx]
	lane *lane[Tx] // nil on the serial path

	// batch is the memory decode reuses (it holds at most one batch's
	// records until the next batch); decoder reuses command type strings.
	batch   decoded[Tx]
	decoder envelope.Decoder
	budget  poisonBudget
}

// poisonBudget is the retry budget of the record whose handler keeps
// failing: its offset (-1: none), its failed attempts and when the first
// failed.
type poisonBudget struct {
	offset   int64
	attempts int
	since    time.Time
}

// decoded is a batch's records as commands.
type decoded[Tx any] struct {
	recs []*kgo.Record
	// from and keys, on a lane only, are where each record's span starts
	// (sink.Batch.From) and the hash of its key (keyTable); nil on the
	// serial path.
	from    []int64
	keys    []uint64
	hs      []Handler[Tx] // the handler of each command's type, nil if none
	offsets []int64
	cmds    []envelope.Command // the handler's Command is made from it and its record when called
	errs    []error            // the decode error of each record, or nil
	// ids are the command IDs passed to an Apply with IDs: "" for a record
	// without one, an undecodable one, and another group's redrive (whose
	// ID this group must stay free to apply: see otherGroup).
	ids []string
}

// decode decodes recs into a's batch memory, which it reuses from batch
// to batch: the returned decoded is valid until the next call (process,
// on a's goroutine, is its only caller). Every element it returns is
// overwritten, so nothing of an earlier batch shows through.
func (a *applier[Tx]) decode(recs []*kgo.Record) decoded[Tx] {
	t := a.t
	d := &a.batch
	if cap(d.cmds) < len(recs) {
		d.offsets, d.cmds, d.errs, d.hs = make([]int64, len(recs)), make([]envelope.Command, len(recs)), make([]error, len(recs)), make([]Handler[Tx], len(recs))
		d.ids = make([]string, len(recs))
	}
	d.recs, d.offsets, d.cmds, d.errs, d.hs = recs, d.offsets[:len(recs)], d.cmds[:len(recs)], d.errs[:len(recs)], d.hs[:len(recs)]
	d.ids = d.ids[:len(recs)]
	// The handler of the last type seen: a batch's commands are mostly
	// of a few types, and the Decoder hands back the same Type string
	// for a type it remembers, which compares at once.
	var (
		lastType string
		lastH    Handler[Tx]
		haveLast bool
	)
	for i, r := range recs {
		d.offsets[i] = r.Offset
		d.errs[i] = nil
		if err := a.decoder.DecodeInto(r, &d.cmds[i]); err != nil {
			d.errs[i] = fmt.Errorf("%w: offset %d: %w", ErrUndecodable, r.Offset, err)
		} else if err := t.checkRoute(r); err != nil {
			d.errs[i] = err
		}
		if typ := d.cmds[i].Type; !haveLast || typ != lastType {
			lastType, lastH, haveLast = typ, t.w.cfg.Handlers[typ], true
		}
		d.hs[i] = lastH
		d.ids[i] = ""
		if d.errs[i] == nil && !t.otherGroup(&d.cmds[i]) {
			d.ids[i] = d.cmds[i].ID
		}
	}
	return *d
}

// otherGroup reports whether cmd is a redrive for another consumer group
// (envelope.RedriveForHeader names a group that is not this Worker's):
// this group applied the original already, or never saw it fail, so the
// Worker does not call its handler (docs/design.md#command-ids). It is
// skipped inside the fenced Apply, so that the checkpoint moves past it
// in the same unit, and its ID is not recorded as applied: this group
// may later redrive its own dead letter of the same command, with the
// same ID, and that must not be a duplicate.
func (t *tenure[Tx]) otherGroup(cmd *envelope.Command) bool {
	return cmd.RedriveFor != "" && cmd.RedriveFor != t.w.cfg.Group
}

// deadAtOnce reports whether record i is to be dead-lettered without
// trying it (undecodable, or no handler, under a dead-letter policy), with
// the reason and error.
func (t *tenure[Tx]) deadAtOnce(d decoded[Tx], i int) (reason string, err error, ok bool) {
	p := &t.w.cfg.Poison
	if d.errs[i] != nil {
		reason := ReasonUndecodable
		if errors.Is(d.errs[i], ErrMisrouted) {
			reason = ReasonMisrouted
		}
		return reason, d.errs[i], p.Undecodable == PoisonDeadLetter && t.w.features.DeadLetters
	}
	if t.otherGroup(&d.cmds[i]) {
		return "", nil, false // skipped by its effect, whether this group has a handler or not
	}
	if d.hs[i] == nil {
		return ReasonNoHandler, fmt.Errorf("%w %q at offset %d", ErrNoHandler, d.cmds[i].Type, d.offsets[i]), p.NoHandler == PoisonDeadLetter && t.w.features.DeadLetters
	}
	return "", nil, false
}

// process applies one batch (docs/design.md#apply): runs of good records
// in one fenced sink Apply each, and the poison records among them handled
// by the policy (docs/design.md#dead-letters), so that a poison record
// never holds back the records before it. Failures of the sink are
// retried without limit; a fenced outcome stops the tenure. It returns the
// new next offset and whether the tenure may go on.
//
// On the serial path next is the tenure's checkpoint and the records
// below it are dropped first; on a lane (a.lane not nil) from holds each
// record's sink.Batch.From, the dispatcher dropped the records the
// claim's checkpoint holds, every batch and every dead letter is a
// lane's, and the result is the tenure's watermark.
func (a *applier[Tx]) process(batch []*kgo.Record, from []int64, keys []uint64, next int64) (int64, bool) {
	t := a.t
	if a.lane == nil {
		// Records below the checkpoint were applied already (by this
		// tenure or a previous one): the sink would skip them too.
		i := 0
		for i < len(batch) && batch[i].Offset < next {
			i++
		}
		batch = batch[i:]
		if len(batch) == 0 {
			return next, true
		}
	}
	w := t.w
	d := a.decode(batch)
	d.from, d.keys = from, keys
	backoff := w.cfg.RetryBackoff
	limit := len(d.recs) // records to try in the next Apply: the good prefix before a poison record
	// A record whose handler failed permanently behind a good prefix is
	// dead-lettered once that prefix is applied, without running it again.
	var permanent struct {
		err      error
		offset   int64
		attempts int
	}
	for len(d.recs) > 0 {
		if permanent.err != nil && d.offsets[0] == permanent.offset {
			var alive bool
			if next, alive = a.deadLetter(d, ReasonPermanent, permanent.err, permanent.attempts, next); !alive {
				return next, false
			}
			permanent.err = nil
			d = d.slice(1)
			limit, backoff = len(d.recs), w.cfg.RetryBackoff
			continue
		}
		if reason, err, ok := t.deadAtOnce(d, 0); ok {
			var alive bool
			if next, alive = a.deadLetter(d, reason, err, 0, next); !alive {
				return next, false
			}
			d = d.slice(1)
			limit, backoff = len(d.recs), w.cfg.RetryBackoff
			continue
		}
		// The run of records before the next one to dead-letter at once.
		run := 1
		for run < limit {
			if _, _, ok := t.deadAtOnce(d, run); ok {
				break
			}
			run++
		}
		start := time.Now()
		res, dups, err := a.apply(d, run)
		if err == nil {
			last := d.recs[run-1]
			res.NextOffset = a.advance(d, run, res.NextOffset, last.LeaderEpoch)
			ev := a.applied(d, run, res, dups)
			ev.Duration = time.Since(start)
			w.obs.emit(ev)
			t.progressed()
			t.clearRefused()
			next = res.NextOffset
			d = d.slice(run)
			limit, backoff = len(d.recs), w.cfg.RetryBackoff
			continue
		}
		if fe := (*sink.FencedError)(nil); errors.As(err, &fe) && fe.Stored.IsZero() {
			// Nobody holds the scope: an operator reset the fence under
			// this tenure. Not a zombie: claim again, with a proof.
			w.resetUnderTenure(t, sink.OpApply, err)
			return next, false
		}
		if ee := (*sink.EffectError)(nil); errors.As(err, &ee) && errors.Is(ee.Err, sink.ErrFenced) {
			// A resource the handler called refused the token, not the
			// sink: the partition is still this tenure's.
			w.resourceFenced(t, ee.Offset, err)
			return next, false
		}
		if errors.Is(err, sink.ErrFenced) {
			if w.rejoined(t, err) {
				// The partition is still this client's, under the
				// member ID it rejoined with: claimed again with it.
				return next, false
			}
			t.markFenced()
			w.obs.emit(Fenced{Token: t.tok, Op: sink.OpApply, FirstOffset: d.offsets[0], Records: run, Err: err})
			return next, false
		}
		if t.ctx.Err() != nil {
			return next, false
		}
		var ee *sink.EffectError
		if !errors.As(err, &ee) || ee.Index >= run || t.sinkFailed(ee, t.isPermanent(ee.Err)) {
			if !t.stall(sink.OpApply, d.offsets[0], CauseSink, err, start, &backoff) {
				return next, false
			}
			continue
		}
		// A handler's error, the sink healthy: record ee.Index is the
		// poison one. The records before it are applied first.
		k := ee.Index
		pol := w.cfg.Poison.forType(d.cmds[k].Type)
		attempts, since := a.recordFailure(d.offsets[k])
		if k > 0 {
			if t.isPermanent(ee.Err) && pol.HandlerError == PoisonDeadLetter && w.features.DeadLetters {
				permanent.err, permanent.offset, permanent.attempts = ee.Err, d.offsets[k], attempts
			} else {
				// The failed attempt is retried at once, in two: the
				// prefix, then the record alone.
				w.obs.emit(Stalled{Token: t.tok, Op: sink.OpApply, FirstOffset: d.offsets[k], Attempt: attempts, Since: since,
					Cause: CauseEffect, Err: err, Duration: time.Since(start), Prefix: k})
			}
			limit = k
			continue
		}
		reason, decide := t.poisonReason(d, ee.Err, pol, attempts, since)
		if decide && w.features.DeadLetters && (pol.HandlerError == PoisonDeadLetter || reason == ReasonUndecodable || reason == ReasonNoHandler) {
			var alive bool
			if next, alive = a.deadLetter(d, reason, ee.Err, attempts, next); !alive {
				return next, false
			}
			d = d.slice(1)
			limit, backoff = len(d.recs), w.cfg.RetryBackoff
			continue
		}
		limit = 1 // retry the poison record alone
		if !t.stall(sink.OpApply, d.offsets[0], CauseEffect, err, start, &backoff) {
			return next, false
		}
	}
	return next, true
}

// recordFailure counts a failed attempt of the record at offset against
// its budget; it returns the attempts so far and when the first failed.
// The budget survives the records before it being applied after its
// first failure: that failure counts.
func (a *applier[Tx]) recordFailure(offset int64) (int, time.Time) {
	b := &a.budget
	if b.offset != offset || b.attempts == 0 {
		b.offset, b.attempts, b.since = offset, 0, time.Now()
	}
	b.attempts++
	return b.attempts, b.since
}

// apply applies the first run records of d in one fenced unit: a lane's
// batch on a lane, with their command IDs when the sink deduplicates. It
// returns the indexes of the duplicates the sink did not run.
func (a *applier[Tx]) apply(d decoded[Tx], run int) (sink.Result, []int, error) {
	t := a.t
	w := t.w
	b := sink.Batch{Offsets: d.offsets[:run]}
	if a.lane != nil {
		b.From = d.from[:run]
	}
	if w.features.DedupeWindow > 0 {
		b.IDs = d.ids[:run]
	}
	res, err := w.cfg.Sink.Apply(t.ctx, t.tok, b, t.effect(d))
	return res, res.Duplicates, err
}

// advance records that the first n records of d (leaderEpoch the last
// one's) are done and returns the tenure's next offset: on the serial
// path next, the sink's NextOffset; on a lane the watermark of the
// tenure's checkpoint once their spans (d.from[i], d.offsets[i]+1) are
// added, and their keys are released from the lane (keyTable). The new
// position is the partition's commit candidate.
func (a *applier[Tx]) advance(d decoded[Tx], n int, next int64, leaderEpoch int32) int64 {
	t := a.t
	if a.lane != nil {
		next = t.gapDone(d.from[:n], d.offsets[:n], leaderEpoch)
		t.keys.release(a.lane.index, d.keys[:n])
		return next
	}
	t.appliedEpoch.Store(leaderEpoch)
	t.appliedNext.Store(next)
	t.w.markApplied(t, next, leaderEpoch)
	return next
}

// applied returns the Applied event of the first run records of d, which
// the sink applied with res, dups its duplicates, and emits a
// DuplicateSkipped or RedriveSkipped event for each record skipped so.
// The records the sink skipped as replays are the first res.Skipped.
func (a *applier[Tx]) applied(d decoded[Tx], run int, res sink.Result, dups []int) Applied {
	t := a.t
	ev := Applied{Token: t.tok, FirstOffset: d.offsets[0], NextOffset: res.NextOffset, Records: run,
		Applied: res.Applied, Skipped: res.Skipped, Duplicates: len(dups)}
	if a.lane != nil {
		ev.Lane = a.lane.index
	}
	k := 0 // next index in dups
	for i := res.Skipped; i < run; i++ {
		if k < len(dups) && dups[k] == i {
			k++
			t.w.obs.emit(DuplicateSkipped{Token: t.tok, Offset: d.offsets[i], ID: d.cmds[i].ID})
			continue
		}
		c := &d.cmds[i]
		switch {
		case d.errs[i] != nil:
		case t.otherGroup(c):
			ev.OtherGroup++
			t.w.obs.emit(RedriveSkipped{Token: t.tok, Offset: d.offsets[i], ID: c.ID, For: c.RedriveFor})
		case c.ID == "":
			ev.WithoutID++
		}
	}
	ev.Applied -= ev.OtherGroup // run by the sink, but no handler was called
	return ev
}

// slice drops the first n records of d.
func (d decoded[Tx]) slice(n int) decoded[Tx] {
	out := decoded[Tx]{recs: d.recs[n:], hs: d.hs[n:], offsets: d.offsets[n:], cmds: d.cmds[n:], errs: d.errs[n:], ids: d.ids[n:]}
	if d.from != nil {
		out.from, out.keys = d.from[n:], d.keys[n:]
	}
	return out
}

// effect returns the sink effect of d: the handler of each command, its
// panics recovered, timed for HandlerObservers.
func (t *tenure[Tx]) effect(d decoded[Tx]) sink.Effect[Tx] {
	w := t.w
	timed := w.obs.timeHandlers()
	return func(ctx context.Context, tx Tx, i int) (err error) {
		if d.errs[i] != nil {
			return d.errs[i]
		}
		if t.otherGroup(&d.cmds[i]) {
			return nil // another group's redrive: the checkpoint moves past it, nothing else
		}
		r := d.recs[i]
		cmd := Command{Command: d.cmds[i], Offset: r.Offset, Timestamp: r.Timestamp, Token: t.tok, TopicID: t.topicID}
		h := d.hs[i]
		if h == nil {
			return fmt.Errorf("%w %q at offset %d", ErrNoHandler, cmd.Type, cmd.Offset)
		}
		if timed {
			start := time.Now()
			defer func() { w.obs.handlerDone(t.tok, cmd.Type, time.Since(start), err) }() // runs after the recovery below
		}
		defer recoverHandler(&err) // a deferred call of its own: the per-command cost of a closure would be paid by every command
		return h(ctx, tx, cmd)
	}
}

// poisonReason classifies the handler error of record 0 of d and says
// whether the policy's decision is due: at once for an undecodable record,
// a missing handler or a permanent error, else when the budget is spent.
func (t *tenure[Tx]) poisonReason(d decoded[Tx], err error, pol TypePolicy, attempts int, since time.Time) (string, bool) {
	p := &t.w.cfg.Poison
	switch {
	case errors.Is(err, ErrUndecodable):
		return ReasonUndecodable, p.Undecodable == PoisonDeadLetter
	case errors.Is(err, ErrNoHandler):
		return ReasonNoHandler, p.NoHandler == PoisonDeadLetter
	case t.isPermanent(err):
		return ReasonPermanent, pol.HandlerError == PoisonDeadLetter
	}
	spent := attempts >= pol.MaxAttempts || time.Since(since) >= pol.MaxRetryTime
	return ReasonHandlerError, spent && pol.HandlerError == PoisonDeadLetter
}

// isPermanent reports whether a handler's error can never succeed on a
// retry of the same record: the handler marked it (Permanent), or the sink
// says so (sink.Health: e.g. a value the database refuses).
func (t *tenure[Tx]) isPermanent(err error) bool {
	return errors.Is(err, ErrPermanent) || t.w.health != nil && t.w.health.IsPermanent(err)
}

// sinkFailed reports whether ee, the error of an Apply whose effect
// failed, is a failure of the sink rather than of the handler. Where the
// error came from decides, not its type: a sink that reports its
// transaction sound when the effect failed (ee.TxHealthy) says the error
// is the handler's own — a call to another service that is down or slow
// fails with the same network errors and deadlines as a lost or stuck
// database connection. Otherwise
// the sink's classifier decides (sink.Health), or a ping it does
// not answer.
func (t *tenure[Tx]) sinkFailed(ee *sink.EffectError, permanent bool) bool {
	w := t.w
	err := error(ee)
	if t.ctx.Err() != nil {
		return true // the tenure ended under the effect: not the record's fault
	}
	if ee.TxHealthy {
		return false // a handler's own timeout too
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	// A handler's own verdict (Permanent) is not second-guessed by the
	// sink's classifier, which could mistake the handler's error for the
	// sink's; a sink that is down is still found by the ping.
	if !permanent && w.health != nil && w.health.IsSinkFailure(err) {
		return true
	}
	if w.health != nil {
		ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
		defer cancel()
		if perr := w.health.Ping(ctx); perr != nil && t.ctx.Err() == nil {
			return true
		}
	}
	return false
}

// stall reports a failed attempt (a Stalled event, the partition's state),
// waits out the backoff and doubles it. It returns false when the tenure
// stops meanwhile.
func (t *tenure[Tx]) stall(op sink.Op, offset int64, cause string, err error, start time.Time, backoff *time.Duration) bool {
	w := t.w
	attempt, since := t.stalled(err)
	w.obs.emit(Stalled{Token: t.tok, Op: op, FirstOffset: offset, Attempt: attempt, Since: since,
		Backoff: *backoff, Cause: cause, Err: err, Duration: time.Since(start)})
	w.reportStall(t, attempt, since, cause, err)
	timer := time.NewTimer(*backoff)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.stopCh:
		return false
	case <-t.ctx.Done():
		return false
	case <-t.halt:
		return false
	}
	*backoff = min(2**backoff, w.cfg.MaxRetryBackoff)
	return true
}
