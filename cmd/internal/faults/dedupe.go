package faults

import (
	"context"
	"errors"
	"fmt"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// ErrNotDeduplicator is matched by the error a wrapper's ApplyOnce returns
// when the sink it wraps is not a sink.Deduplicator itself (every backend
// is, and so is sinkmetrics' wrapper of one).
var ErrNotDeduplicator = errors.New("faults: the wrapped sink is not a sink.Deduplicator")

// call is one Apply or ApplyOnce of a wrapped sink, with the batch bound:
// a wrapper's fault runs around it, the same way for both (the consumer
// applies with ApplyOnce when the sink has it, and a wrapper without it
// would be bypassed).
type call[Tx any] func(ctx context.Context, effect sink.Effect[Tx]) (sink.ApplyOnceResult, error)

// applyCall is s.Apply of the batch.
func applyCall[Tx any](s sink.Sink[Tx], tok epochs.Token, offsets []int64) call[Tx] {
	return func(ctx context.Context, effect sink.Effect[Tx]) (sink.ApplyOnceResult, error) {
		res, err := s.Apply(ctx, tok, offsets, effect)
		return sink.ApplyOnceResult{ApplyResult: res}, err
	}
}

// applyOnceCall is s.ApplyOnce of the batch.
func applyOnceCall[Tx any](s sink.Sink[Tx], tok epochs.Token, offsets []int64, ids []string) call[Tx] {
	return func(ctx context.Context, effect sink.Effect[Tx]) (sink.ApplyOnceResult, error) {
		d, ok := s.(sink.Deduplicator[Tx])
		if !ok {
			return sink.ApplyOnceResult{}, fmt.Errorf("%w (%T)", ErrNotDeduplicator, s)
		}
		return d.ApplyOnce(ctx, tok, offsets, ids, effect)
	}
}

// dedupeWindow is s's DedupeWindow, 0 if s is not a sink.Deduplicator.
func dedupeWindow[Tx any](s sink.Sink[Tx]) int64 {
	if d, ok := s.(sink.Deduplicator[Tx]); ok {
		return d.DedupeWindow()
	}
	return 0
}
