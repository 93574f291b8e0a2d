package redis

import (
	"context"
	"fmt"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

var _ sink.GapApplier[*Tx] = (*Sink)(nil)

// ClaimGapped is [Sink.Claim] that returns the scope's whole checkpoint,
// following [sink.GapApplier]: the watermark and the done spans above it
// (the fence hash's "sp" field, "from-to,…"), read in the claim's
// script, whose log check compares [sink.Checkpoint.End] with obs.LogEnd.
// It may be called from any goroutine.
func (s *Sink) ClaimGapped(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return s.claim(ctx, tok, obs)
}

// ApplyGapped applies a lane's batch of tok's scope, following
// [sink.GapApplier], in the one script of [Sink.Apply]: the effects run
// for the records the lane's view of the checkpoint does not contain (and,
// with b.IDs, that are not duplicates), and the script checks the holder
// and that the stored checkpoint is still that view, then writes the
// effects and the checkpoint with [b.From[i], b.Offsets[i]+1) added for
// every record not skipped. Lanes of one holder that commit in between
// make the view stale: the script refuses it and the sink runs the batch
// again on the stored checkpoint, so lanes run concurrently but commit
// one at a time. The result's NextOffset is the exact watermark the
// script left. It may be called from any goroutine; effect is called on
// the calling goroutine.
func (s *Sink) ApplyGapped(ctx context.Context, tok epochs.Token, b sink.GapBatch, effect sink.Effect[*Tx]) (sink.ApplyOnceResult, error) {
	if err := sink.CheckGapBatch(tok, b, effect); err != nil {
		return sink.ApplyOnceResult{}, err
	}
	return s.apply(ctx, tok, b.Offsets, b.From, b.IDs, effect)
}

// DeadLetterGapped is [Sink.DeadLetter] for a record of a lane, following
// [sink.GapApplier]: in the same script, with the same checks, it stores
// rec unless the checkpoint contains rec.Offset (Stored false) and adds
// [from, rec.Offset+1) to the checkpoint. It may be called from any
// goroutine.
func (s *Sink) DeadLetterGapped(ctx context.Context, tok epochs.Token, from int64, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	if err := sink.CheckDeadLetter(tok, rec); err != nil {
		return sink.DeadLetterResult{}, err
	}
	if from < 0 || from > rec.Offset {
		return sink.DeadLetterResult{}, fmt.Errorf("redis: dead letter %s@%d: %w: from %d is not in [0, %d]", tok, rec.Offset, sink.ErrBadBatch, from, rec.Offset)
	}
	return s.deadLetter(ctx, tok, from, rec)
}
