package faults

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// ErrInterrupted is the cause of the context an Interrupter cancels in the
// middle of a transaction.
var ErrInterrupted = errors.New("faults: sink transaction interrupted")

// Interrupter is a sink that, once armed, cancels the context of the next
// Apply that runs an effect, right after its first effect ran: the
// transaction is cut in the middle, the way a reset database connection
// cuts it, and is rolled back. For a sink with no connection to cut
// (SQLite) it is the closest stand-in for a connection reset. Its methods
// may be called from any goroutine.
type Interrupter[Tx any] struct {
	sink.Sink[Tx]
	armed atomic.Bool
	fired func(tok epochs.Token, err error)
}

// NewInterrupter wraps s. fired, if set, is called after each interrupted
// Apply returned, with its token and error.
func NewInterrupter[Tx any](s sink.Sink[Tx], fired func(tok epochs.Token, err error)) *Interrupter[Tx] {
	return &Interrupter[Tx]{Sink: s, fired: fired}
}

// Unwrap returns the wrapped sink, so that sink.As finds its capabilities.
func (in *Interrupter[Tx]) Unwrap() sink.Sink[Tx] { return in.Sink }

// Arm makes the next Apply that runs an effect be interrupted.
func (in *Interrupter[Tx]) Arm() { in.armed.Store(true) }

// Apply applies the batch, interrupting it if armed.
func (in *Interrupter[Tx]) Apply(ctx context.Context, tok epochs.Token, offsets []int64, effect sink.Effect[Tx]) (sink.ApplyResult, error) {
	res, err := in.apply(ctx, tok, effect, applyCall(in.Sink, tok, offsets))
	return res.ApplyResult, err
}

// ApplyOnce is Apply with the batch's command IDs (sink.Deduplicator): the
// wrapped sink must be a sink.Deduplicator ([ErrNotDeduplicator]). A batch
// of duplicates only runs no effect, so it is not interrupted: the next
// one is.
func (in *Interrupter[Tx]) ApplyOnce(ctx context.Context, tok epochs.Token, offsets []int64, ids []string, effect sink.Effect[Tx]) (sink.ApplyOnceResult, error) {
	return in.apply(ctx, tok, effect, applyOnceCall(in.Sink, tok, offsets, ids))
}

// DedupeWindow returns the wrapped sink's (0 if it has none).
func (in *Interrupter[Tx]) DedupeWindow() int64 { return dedupeWindow(in.Sink) }

// apply runs c, interrupting it if armed.
func (in *Interrupter[Tx]) apply(ctx context.Context, tok epochs.Token, effect sink.Effect[Tx], c call[Tx]) (sink.ApplyOnceResult, error) {
	if !in.armed.Load() {
		return c(ctx, effect)
	}
	ictx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var cut atomic.Bool
	res, err := c(ictx, func(ctx context.Context, tx Tx, i int) error {
		if err := effect(ctx, tx, i); err != nil {
			return err
		}
		if in.armed.CompareAndSwap(true, false) {
			cut.Store(true)
			cancel(ErrInterrupted)
		}
		return nil
	})
	if cut.Load() && in.fired != nil {
		in.fired(tok, err)
	}
	return res, err
}
