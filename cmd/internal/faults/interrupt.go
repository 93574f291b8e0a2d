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

// Apply applies the batch, interrupting it if armed. A batch that runs
// no effect (duplicates and replays only) is not interrupted: the next
// one is.
func (in *Interrupter[Tx]) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[Tx]) (sink.Result, error) {
	return in.apply(ctx, tok, effect, func(ctx context.Context, effect sink.Effect[Tx]) (sink.Result, error) {
		return in.Sink.Apply(ctx, tok, b, effect)
	})
}

// apply runs c, interrupting it if armed.
func (in *Interrupter[Tx]) apply(ctx context.Context, tok epochs.Token, effect sink.Effect[Tx], c func(context.Context, sink.Effect[Tx]) (sink.Result, error)) (sink.Result, error) {
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
