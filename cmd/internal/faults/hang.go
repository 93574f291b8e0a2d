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

// Hang is a sink whose nth Apply call (n ≥ 1) blocks at its point until
// release is closed (a nil release blocks until the process dies: the
// harness kills it there). reached is called once the point is reached,
// with the batch's token and offsets and, BeforeCommit, the open
// transaction (the zero Tx AfterCommit) — the harness reads the database
// session's backend ID through it. Its methods may be called from any
// goroutine.
type Hang[Tx any] struct {
	sink.Sink[Tx]
	at      int64
	point   HangPoint
	n       atomic.Int64
	reached func(ctx context.Context, tok epochs.Token, offsets []int64, tx Tx)
	release <-chan struct{}
}

// NewHang wraps s (see Hang).
func NewHang[Tx any](s sink.Sink[Tx], n int64, point HangPoint, release <-chan struct{},
	reached func(ctx context.Context, tok epochs.Token, offsets []int64, tx Tx)) *Hang[Tx] {
	return &Hang[Tx]{Sink: s, at: n, point: point, release: release, reached: reached}
}

// Unwrap returns the wrapped sink.
func (h *Hang[Tx]) Unwrap() sink.Sink[Tx] { return h.Sink }

// Apply applies the batch, blocking at the point on the configured call.
func (h *Hang[Tx]) Apply(ctx context.Context, tok epochs.Token, offsets []int64, effect sink.Effect[Tx]) (sink.ApplyResult, error) {
	if h.n.Add(1) != h.at {
		return h.Sink.Apply(ctx, tok, offsets, effect)
	}
	wait := func(tx Tx) {
		if h.reached != nil {
			h.reached(ctx, tok, offsets, tx)
		}
		<-h.release
	}
	if h.point == BeforeCommit {
		last := len(offsets) - 1
		res, err := h.Sink.Apply(ctx, tok, offsets, func(ctx context.Context, tx Tx, i int) error {
			if err := effect(ctx, tx, i); err != nil || i != last {
				return err
			}
			wait(tx)
			return nil
		})
		return res, err
	}
	res, err := h.Sink.Apply(ctx, tok, offsets, effect)
	if err == nil {
		var zero Tx
		wait(zero)
	}
	return res, err
}
