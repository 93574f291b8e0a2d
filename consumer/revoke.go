package consumer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func (w *Worker[Tx]) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	w.release(ctx, revoked[w.cfg.Topic], true)
}

func (w *Worker[Tx]) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	w.release(ctx, lost[w.cfg.Topic], false)
}

// release stops the tenures of parts, which are gone from then on and
// never act again (docs/design.md#fenced-outcomes): a tenure
// with nothing in flight (blocked, waiting on a claim, waiting for the
// tenure it replaced) is cancelled at once, which ends its claim; a
// running one finishes its in-flight batch, bounded by RevokeTimeout, and
// is cancelled when the batch returns or the timeout expires. On a revoke
// (commit true) the final applied offsets are committed at once; a lost
// partition commits nothing.
func (w *Worker[Tx]) release(ctx context.Context, parts []int32, commit bool) {
	<-w.ready
	var ts []*tenure[Tx]
	w.mu.Lock()
	for _, p := range parts {
		if t := w.tenures[p]; t != nil {
			ts = append(ts, t)
			delete(w.tenures, p)
		}
	}
	w.mu.Unlock()
	for _, t := range ts {
		t.stop()
		// After stop, started cannot change: a tenure that never started
		// has no batch to finish.
		if !t.started.Load() {
			t.cancel()
		}
	}
	deadline := time.NewTimer(w.cfg.RevokeTimeout)
	defer deadline.Stop()
	timedOut := make(map[*tenure[Tx]]bool)
	expired := false
	for _, t := range ts {
		if expired {
			timedOut[t] = true
			t.cancel()
			continue
		}
		select {
		case <-t.done:
		case <-deadline.C:
			expired = true
			timedOut[t] = true
			t.cancel()
		}
	}
	final := make(map[int32]kgo.EpochOffset)
	for _, t := range ts {
		t.cancel() // its goroutine has exited, or was cancelled above
		w.cl.ResumeFetchPartitions(map[string][]int32{w.cfg.Topic: {t.tok.Partition}})
		if eo, ok := t.lastApplied(); ok && !t.fenced.Load() {
			final[t.tok.Partition] = eo
		}
		// Revoked and Lost (and so Stats.Revoked and Stats.Lost) come
		// once the tenure's in-flight batch is over, before the final
		// commit.
		if commit {
			w.obs.emit(Revoked{Token: t.tok, NextOffset: t.revokedNext(), TimedOut: timedOut[t]})
		} else {
			w.obs.emit(Lost{Token: t.tok, TimedOut: timedOut[t]})
		}
	}
	w.commitMu.Lock()
	defer w.commitMu.Unlock()
	w.pendMu.Lock()
	for _, t := range ts {
		delete(w.pending, t.tok.Partition)
	}
	w.pendMu.Unlock()
	if commit && len(final) > 0 {
		w.commit(ctx, final)
	}
}
