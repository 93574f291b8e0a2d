package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
)

// run is the tenure's goroutine: it takes batches from the queue and
// applies them until the tenure is stopped, cancelled or fenced.
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

// process applies one batch in one fenced sink Apply
// (docs/design.md#apply), retrying anything but a fenced outcome. It
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
	w := t.w
	offsets := make([]int64, len(batch))
	cmds := make([]Command, len(batch))
	decodeErrs := make([]error, len(batch))
	for i, r := range batch {
		offsets[i] = r.Offset
		c, err := router.Decode(r)
		if err != nil {
			decodeErrs[i] = fmt.Errorf("%w: offset %d: %w", ErrUndecodable, r.Offset, err)
		} else if err := t.checkRoute(r); err != nil {
			decodeErrs[i] = err
		}
		cmds[i] = Command{Command: c, Offset: r.Offset, Timestamp: r.Timestamp, Token: t.tok}
	}
	handlers := w.cfg.Handlers
	timed := w.obs.timeHandlers()
	effect := func(ctx context.Context, tx Tx, i int) error {
		if decodeErrs[i] != nil {
			return decodeErrs[i]
		}
		h, ok := handlers[cmds[i].Type]
		if !ok {
			return fmt.Errorf("%w %q at offset %d", ErrNoHandler, cmds[i].Type, cmds[i].Offset)
		}
		if !timed {
			return h(ctx, tx, cmds[i])
		}
		start := time.Now()
		err := h(ctx, tx, cmds[i])
		w.obs.handlerDone(t.tok, cmds[i].Type, time.Since(start), err)
		return err
	}

	backoff := w.cfg.RetryBackoff
	var since time.Time
	for attempt := 1; ; attempt++ {
		start := time.Now()
		res, err := w.cfg.Sink.Apply(t.ctx, t.tok, offsets, effect)
		if err == nil {
			w.batches.Add(1)
			w.records.Add(int64(res.Applied))
			w.skipped.Add(int64(res.Skipped))
			last := batch[len(batch)-1]
			t.appliedEpoch.Store(last.LeaderEpoch)
			t.appliedNext.Store(res.NextOffset)
			w.markApplied(t, res.NextOffset, last.LeaderEpoch)
			w.obs.emit(Applied{Token: t.tok, FirstOffset: offsets[0], NextOffset: res.NextOffset,
				Records: len(offsets), Applied: res.Applied, Skipped: res.Skipped, Duration: time.Since(start)})
			return res.NextOffset, true
		}
		if errors.Is(err, sink.ErrFenced) {
			w.fencedApplies.Add(1)
			t.markFenced()
			w.obs.emit(Fenced{Token: t.tok, Op: sink.OpApply, FirstOffset: offsets[0], Records: len(offsets), Err: err})
			return next, false
		}
		if t.ctx.Err() != nil {
			return next, false
		}
		if attempt == 1 {
			since = start
		}
		cause := CauseSink
		var ee *sink.EffectError
		if errors.As(err, &ee) {
			cause = CauseEffect
		}
		w.retries.Add(1)
		w.obs.emit(Stalled{Token: t.tok, Op: sink.OpApply, FirstOffset: offsets[0], Attempt: attempt, Since: since,
			Backoff: backoff, Cause: cause, Err: err, Duration: time.Since(start)})
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
		backoff = min(2*backoff, w.cfg.MaxRetryBackoff)
	}
}
