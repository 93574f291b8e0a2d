package faults

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// lanes is a sink.GapApplier over the memory sink for these tests: it
// records the lane batches it was given and applies each through Apply
// (the wrappers' concern is only that the batch reaches it through their
// fault, with its From offsets).
type lanes struct {
	sink.Sink[*memory.Tx]
	batches     []sink.GapBatch
	claims, dls int
}

func (l *lanes) ClaimGapped(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	l.claims++
	next, err := l.Claim(ctx, tok, obs)
	return sink.Checkpoint{NextOffset: next}, err
}

func (l *lanes) ApplyGapped(ctx context.Context, tok epochs.Token, b sink.GapBatch, effect sink.Effect[*memory.Tx]) (sink.ApplyOnceResult, error) {
	l.batches = append(l.batches, b)
	res, err := l.Apply(ctx, tok, b.Offsets, effect)
	return sink.ApplyOnceResult{ApplyResult: res}, err
}

func (l *lanes) DeadLetterGapped(context.Context, epochs.Token, int64, sink.DeadRecord) (sink.DeadLetterResult, error) {
	l.dls++
	return sink.DeadLetterResult{Stored: true}, nil
}

// plain hides every method of the memory sink but the Sink contract.
type plain struct{ sink.Sink[*memory.Tx] }

// TestWrappersApplyLanes: each wrapper passes a lane's batch
// (ApplyGapped), with its From offsets, to the sink it wraps through its
// fault — an armed Interrupter cuts it, a Hang counts it with Apply's
// calls and blocks on it — and ClaimGapped and DeadLetterGapped through
// without one; over a sink without lanes the three fail with
// ErrNotGapApplier.
func TestWrappersApplyLanes(t *testing.T) {
	ctx := context.Background()
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	put := func(ctx context.Context, tx *memory.Tx, i int) error { tx.Put("k", []byte{byte(i)}); return nil }
	lane := sink.GapBatch{Offsets: []int64{0, 2}, From: []int64{0, 2}}
	type wrapper interface {
		sink.Sink[*memory.Tx]
		sink.GapApplier[*memory.Tx]
	}
	wraps := map[string]func(sink.Sink[*memory.Tx]) wrapper{
		"freezer":     func(s sink.Sink[*memory.Tx]) wrapper { return NewFreezer[*memory.Tx](s, nil) },
		"interrupter": func(s sink.Sink[*memory.Tx]) wrapper { return NewInterrupter[*memory.Tx](s, nil) },
		"hang":        func(s sink.Sink[*memory.Tx]) wrapper { return NewHang[*memory.Tx](s, 0, BeforeCommit, nil, nil) },
	}
	for name, wrap := range wraps {
		t.Run(name, func(t *testing.T) {
			l := &lanes{Sink: memory.New()}
			w := wrap(l)
			if _, err := w.ClaimGapped(ctx, tok, sink.Observed{}); err != nil || l.claims != 1 {
				t.Fatalf("ClaimGapped: %v, %d claims reached the sink", err, l.claims)
			}
			if res, err := w.ApplyGapped(ctx, tok, lane, put); err != nil || res.Applied != 2 {
				t.Fatalf("ApplyGapped: %+v %v", res, err)
			}
			if len(l.batches) != 1 || !slices.Equal(l.batches[0].From, lane.From) {
				t.Fatalf("the sink got the batches %+v, want %+v", l.batches, lane)
			}
			if _, err := w.DeadLetterGapped(ctx, tok, 3, sink.DeadRecord{Offset: 3}); err != nil || l.dls != 1 {
				t.Fatalf("DeadLetterGapped: %v, %d reached the sink", err, l.dls)
			}

			p := wrap(plain{memory.New()})
			if _, err := p.ClaimGapped(ctx, tok, sink.Observed{}); !errors.Is(err, ErrNotGapApplier) {
				t.Fatalf("ClaimGapped over a sink without lanes: %v", err)
			}
			if _, err := p.ApplyGapped(ctx, tok, lane, put); !errors.Is(err, ErrNotGapApplier) {
				t.Fatalf("ApplyGapped over a sink without lanes: %v", err)
			}
			if _, err := p.DeadLetterGapped(ctx, tok, 3, sink.DeadRecord{Offset: 3}); !errors.Is(err, ErrNotGapApplier) {
				t.Fatalf("DeadLetterGapped over a sink without lanes: %v", err)
			}
		})
	}

	t.Run("interrupter cuts a lane", func(t *testing.T) {
		l := &lanes{Sink: memory.New()}
		in := NewInterrupter[*memory.Tx](l, nil)
		if _, err := in.ClaimGapped(ctx, tok, sink.Observed{}); err != nil {
			t.Fatal(err)
		}
		in.Arm()
		if _, err := in.ApplyGapped(ctx, tok, lane, put); !errors.Is(err, context.Canceled) {
			t.Fatalf("an armed interrupter's lane batch: %v, want context.Canceled", err)
		}
		if res, err := in.ApplyGapped(ctx, tok, lane, put); err != nil || res.Applied != 2 {
			t.Fatalf("the retried lane batch: %+v %v", res, err)
		}
	})

	t.Run("hang counts lanes with applies", func(t *testing.T) {
		l := &lanes{Sink: memory.New()}
		release := make(chan struct{})
		reached := make(chan []int64, 1)
		h := NewHang[*memory.Tx](l, 2, BeforeCommit, release, func(_ context.Context, _ epochs.Token, offsets []int64, _ *memory.Tx) {
			reached <- offsets
		})
		if _, err := h.ClaimGapped(ctx, tok, sink.Observed{}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Apply(ctx, tok, []int64{0}, put); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := h.ApplyGapped(ctx, tok, sink.GapBatch{Offsets: []int64{1, 3}, From: []int64{1, 3}}, put)
			done <- err
		}()
		select {
		case offs := <-reached:
			if !slices.Equal(offs, []int64{1, 3}) {
				t.Fatalf("reached with offsets %v", offs)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the lane's batch, the second call, never reached the hang point")
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
