package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// deadLetter stores d's first record as a dead letter in the sink and
// moves the checkpoint past it (docs/design.md#dead-letters), retrying
// failures of the sink without limit: a record is never skipped without
// its row. On a lane it is a lane's DeadLetter from the record's From, and
// the record's span joins the tenure's checkpoint. It returns the new
// next offset (on a lane, the tenure's watermark) and whether the tenure
// may go on (false when fenced or stopped).
func (a *applier[Tx]) deadLetter(d decoded[Tx], reason string, cause error, attempts int, next int64) (int64, bool) {
	t := a.t
	w := t.w
	r := d.recs[0]
	rec := sink.DeadRecord{
		TopicID: t.topicID, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
		Reason: reason, Error: cause.Error(), Attempts: attempts,
	}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, sink.RecordHeader{Key: h.Key, Value: h.Value})
	}
	backoff := w.cfg.RetryBackoff
	for {
		start := time.Now()
		var res sink.DeadLetterResult
		var err error
		if a.lane != nil {
			res, err = w.cfg.Sink.DeadLetter(t.ctx, t.tok, rec.InLane(d.from[0]))
		} else {
			res, err = w.cfg.Sink.DeadLetter(t.ctx, t.tok, rec)
		}
		if err == nil {
			res.NextOffset = a.advance(d, 1, res.NextOffset, r.LeaderEpoch)
			if res.Stored {
				w.obs.emit(DeadLettered{Token: t.tok, Offset: r.Offset, Key: r.Key, Type: d.cmds[0].Type, Reason: reason, Err: cause, Attempts: attempts, ID: res.ID})
				w.signalMirror()
			}
			t.progressed()
			return res.NextOffset, true
		}
		if fe := (*sink.FencedError)(nil); errors.As(err, &fe) && fe.Stored.IsZero() {
			// Nobody holds the scope: an operator reset the fence under
			// this tenure, as for an Apply: claim again, with a proof.
			w.resetUnderTenure(t, sink.OpDeadLetter, err)
			return next, false
		}
		if errors.Is(err, sink.ErrFenced) {
			t.markFenced()
			w.obs.emit(Fenced{Token: t.tok, Op: sink.OpDeadLetter, FirstOffset: r.Offset, Records: 1, Err: err})
			return next, false
		}
		if t.ctx.Err() != nil {
			return next, false
		}
		if !t.stall(sink.OpDeadLetter, r.Offset, CauseSink, err, start, &backoff) {
			return next, false
		}
	}
}

// mirrorLoop publishes the dead letters of the partitions this Worker
// owns to Config.DeadLetterTopic, from the sink's rows after they commit
// (an outbox: at least once, keyed like the original), and marks them
// mirrored. It runs until the Worker stops, woken by new dead letters and
// every few seconds.
func (w *Worker[Tx]) mirrorLoop() {
	defer w.wg.Done()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.mirrorSig:
		case <-tick.C:
		}
		if err := w.mirrorOnce(w.ctx); err != nil && w.ctx.Err() == nil {
			w.obs.emit(FetchFailed{Topic: w.cfg.DeadLetterTopic, Partition: -1, Err: err})
		}
	}
}

func (w *Worker[Tx]) signalMirror() {
	if w.mirrorSig == nil {
		return
	}
	select {
	case w.mirrorSig <- struct{}{}:
	default:
	}
}

// mirrorOnce publishes every unmirrored dead letter of the owned
// partitions.
func (w *Worker[Tx]) mirrorOnce(ctx context.Context) error {
	for _, tok := range w.Owned() {
		p := tok.Partition
		dls, err := w.dlStore.DeadLetters(ctx, dlq.Filter{Group: w.cfg.Group, Topic: w.cfg.Topic, Partition: &p, NotMirrored: true, Limit: 500})
		if err != nil {
			return err
		}
		if len(dls) == 0 {
			continue
		}
		recs := make([]*kgo.Record, len(dls))
		ids := make([]int64, len(dls))
		for i, d := range dls {
			recs[i] = mirrorRecord(w.cfg.DeadLetterTopic, d)
			ids[i] = d.ID
		}
		if err := w.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return err
		}
		if err := w.dlStore.MarkMirrored(ctx, ids); err != nil {
			return err
		}
	}
	return nil
}
