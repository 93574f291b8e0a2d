package faults

import (
	"context"
	"errors"
	"fmt"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// ErrNotGapApplier is matched by the error a wrapper's ClaimGapped,
// ApplyGapped or DeadLetterGapped returns when the sink it wraps is not a
// sink.GapApplier itself (every backend is).
var ErrNotGapApplier = errors.New("faults: the wrapped sink is not a sink.GapApplier")

// The wrappers are sink.GapAppliers: a consumer with lanes
// (consumer.Config.KeyConcurrency) applies through ApplyGapped, which a
// wrapper without it would not see (the consumer finds GapApplier on the
// outermost sink, as it finds Deduplicator). A lane's batch goes through
// the wrapper's fault like an Apply; ClaimGapped and DeadLetterGapped pass
// through.
var (
	_ sink.GapApplier[struct{}] = (*Freezer[struct{}])(nil)
	_ sink.GapApplier[struct{}] = (*Hang[struct{}])(nil)
	_ sink.GapApplier[struct{}] = (*Interrupter[struct{}])(nil)
)

// gapApplier is s as a sink.GapApplier, or an error matching
// ErrNotGapApplier.
func gapApplier[Tx any](s sink.Sink[Tx]) (sink.GapApplier[Tx], error) {
	g, ok := s.(sink.GapApplier[Tx])
	if !ok {
		return nil, fmt.Errorf("%w (%T)", ErrNotGapApplier, s)
	}
	return g, nil
}

// applyGappedCall is s.ApplyGapped of the lane's batch b.
func applyGappedCall[Tx any](s sink.Sink[Tx], tok epochs.Token, b sink.GapBatch) call[Tx] {
	return func(ctx context.Context, effect sink.Effect[Tx]) (sink.ApplyOnceResult, error) {
		g, err := gapApplier(s)
		if err != nil {
			return sink.ApplyOnceResult{}, err
		}
		return g.ApplyGapped(ctx, tok, b, effect)
	}
}

// claimGapped is s.ClaimGapped.
func claimGapped[Tx any](ctx context.Context, s sink.Sink[Tx], tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	g, err := gapApplier(s)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	return g.ClaimGapped(ctx, tok, obs)
}

// deadLetterGapped is s.DeadLetterGapped.
func deadLetterGapped[Tx any](ctx context.Context, s sink.Sink[Tx], tok epochs.Token, from int64, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	g, err := gapApplier(s)
	if err != nil {
		return sink.DeadLetterResult{}, err
	}
	return g.DeadLetterGapped(ctx, tok, from, rec)
}

// ClaimGapped is the wrapped sink's (sink.GapApplier), without a fault.
func (f *Freezer[Tx]) ClaimGapped(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return claimGapped(ctx, f.Sink, tok, obs)
}

// ApplyGapped is a lane's Apply (sink.GapApplier), counted and frozen as
// Apply is: a freeze waits for every other lane's call in flight to
// finish and keeps the others out, so the process still stops between
// transactions, with the lanes' batches waiting to be written late.
func (f *Freezer[Tx]) ApplyGapped(ctx context.Context, tok epochs.Token, b sink.GapBatch, effect sink.Effect[Tx]) (sink.ApplyOnceResult, error) {
	return f.apply(ctx, tok, b.Offsets, effect, applyGappedCall(f.Sink, tok, b))
}

// DeadLetterGapped is the wrapped sink's (sink.GapApplier), without a
// fault.
func (f *Freezer[Tx]) DeadLetterGapped(ctx context.Context, tok epochs.Token, from int64, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	return deadLetterGapped(ctx, f.Sink, tok, from, rec)
}

// ClaimGapped is the wrapped sink's (sink.GapApplier), without a fault.
func (h *Hang[Tx]) ClaimGapped(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return claimGapped(ctx, h.Sink, tok, obs)
}

// ApplyGapped is a lane's Apply (sink.GapApplier), counted and blocked as
// Apply is.
func (h *Hang[Tx]) ApplyGapped(ctx context.Context, tok epochs.Token, b sink.GapBatch, effect sink.Effect[Tx]) (sink.ApplyOnceResult, error) {
	return h.apply(ctx, tok, b.Offsets, effect, applyGappedCall(h.Sink, tok, b))
}

// DeadLetterGapped is the wrapped sink's (sink.GapApplier), without a
// fault.
func (h *Hang[Tx]) DeadLetterGapped(ctx context.Context, tok epochs.Token, from int64, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	return deadLetterGapped(ctx, h.Sink, tok, from, rec)
}

// ClaimGapped is the wrapped sink's (sink.GapApplier), without a fault.
func (in *Interrupter[Tx]) ClaimGapped(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return claimGapped(ctx, in.Sink, tok, obs)
}

// ApplyGapped is a lane's Apply (sink.GapApplier), interrupted as Apply
// is when armed.
func (in *Interrupter[Tx]) ApplyGapped(ctx context.Context, tok epochs.Token, b sink.GapBatch, effect sink.Effect[Tx]) (sink.ApplyOnceResult, error) {
	return in.apply(ctx, tok, effect, applyGappedCall(in.Sink, tok, b))
}

// DeadLetterGapped is the wrapped sink's (sink.GapApplier), without a
// fault.
func (in *Interrupter[Tx]) DeadLetterGapped(ctx context.Context, tok epochs.Token, from int64, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	return deadLetterGapped(ctx, in.Sink, tok, from, rec)
}
