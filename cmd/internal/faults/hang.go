package faults

import (
	"context"
	"sync/atomic"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// HangPoint is where a Hang blocks its Apply.
type HangPoint int

const (
	// BeforeCommit blocks inside the batch's last effect: the sink's
	// transaction is open, nothing of the batch is committed.
	BeforeCommit HangPoint = iota + 1
	// AfterCommit blocks after the sink committed the batch, before Apply
	// returns: the consumer never commits the Kafka offset of it.
	AfterCommit
)

// String returns "before-commit" or "after-commit".
func (p HangPoint) String() string {
	if p == AfterCommit {
		return "after-commit"
	}
	return "before-commit"
}

// Hang is a sink whose nth Apply (n ≥ 1; serial or a lane's) blocks at its point until
// release is closed (a nil release blocks until the process dies: the
// harness kills it there). reached is called once the point is reached,
// with the batch's token and offsets and, BeforeCommit, the open
// transaction (the zero Tx AfterCommit) — the harness reads the database
// session's backend ID through it. Its methods may be called from any
// goroutine.
type Hang[Tx any] struct {
	sink.Sink[Tx]
	at      atomic.Int64 // the call that blocks
	point   HangPoint
	n       atomic.Int64
	reached func(ctx context.Context, tok epochs.Token, offsets []int64, tx Tx)
	release <-chan struct{}
}

// NewHang wraps s (see Hang).
func NewHang[Tx any](s sink.Sink[Tx], n int64, point HangPoint, release <-chan struct{},
	reached func(ctx context.Context, tok epochs.Token, offsets []int64, tx Tx)) *Hang[Tx] {
	h := &Hang[Tx]{Sink: s, point: point, release: release, reached: reached}
	h.at.Store(n)
	return h
}

// Unwrap returns the wrapped sink.
func (h *Hang[Tx]) Unwrap() sink.Sink[Tx] { return h.Sink }

// Apply applies the batch, blocking at the point on the configured call.
func (h *Hang[Tx]) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[Tx]) (sink.Result, error) {
	return h.apply(ctx, tok, b, effect)
}

// apply applies b, blocking at the point on the configured call. Before
// the commit, it blocks inside the batch's last effect; if that effect
// never runs (the last record is a duplicate, or a replay), the point
// moves to the next call, so that the hang still happens.
func (h *Hang[Tx]) apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[Tx]) (sink.Result, error) {
	offsets := b.Offsets
	c := func(ctx context.Context, effect sink.Effect[Tx]) (sink.Result, error) {
		return h.Sink.Apply(ctx, tok, b, effect)
	}
	n := h.n.Add(1)
	if n != h.at.Load() {
		return c(ctx, effect)
	}
	wait := func(tx Tx) {
		if h.reached != nil {
			h.reached(ctx, tok, offsets, tx)
		}
		<-h.release
	}
	if h.point == BeforeCommit {
		last := len(offsets) - 1
		var reached bool
		res, err := c(ctx, func(ctx context.Context, tx Tx, i int) error {
			if err := effect(ctx, tx, i); err != nil || i != last {
				return err
			}
			reached = true
			wait(tx)
			return nil
		})
		if !reached && err == nil {
			h.at.Store(n + 1) // the last effect did not run: hang in the next call
		}
		return res, err
	}
	res, err := c(ctx, effect)
	if err == nil {
		var zero Tx
		wait(zero)
	}
	return res, err
}
