package faults

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// recorder is the memory sink recording the writes that reach it.
type recorder struct {
	sink.Sink[*memory.Tx]
	mu      sync.Mutex
	batches []sink.Batch
	dls     []sink.DeadRecord
}

func (r *recorder) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*memory.Tx]) (sink.Result, error) {
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
	return r.Sink.Apply(ctx, tok, b, effect)
}

func (r *recorder) DeadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	r.mu.Lock()
	r.dls = append(r.dls, rec)
	r.mu.Unlock()
	return r.Sink.DeadLetter(ctx, tok, rec)
}

// TestWrappersOneDoor: every wrapper passes each write — a serial batch
// with command IDs, a lane's batch with its From offsets, a serial and a
// lane's dead letter — to the sink it wraps through its one Apply and
// one DeadLetter, and declares the wrapped sink's features.
func TestWrappersOneDoor(t *testing.T) {
	ctx := context.Background()
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	put := func(ctx context.Context, tx *memory.Tx, i int) error { tx.Put("k", []byte{byte(i)}); return nil }
	serial := sink.Batch{Offsets: []int64{0, 1}, IDs: []string{"a", "b"}}
	lane := sink.Batch{Offsets: []int64{3, 5}, From: []int64{2, 5}}
	wraps := map[string]func(sink.Sink[*memory.Tx]) sink.Sink[*memory.Tx]{
		"freezer":     func(s sink.Sink[*memory.Tx]) sink.Sink[*memory.Tx] { return NewFreezer[*memory.Tx](s, nil) },
		"interrupter": func(s sink.Sink[*memory.Tx]) sink.Sink[*memory.Tx] { return NewInterrupter[*memory.Tx](s, nil) },
		"hang": func(s sink.Sink[*memory.Tx]) sink.Sink[*memory.Tx] {
			return NewHang[*memory.Tx](s, 0, BeforeCommit, nil, nil)
		},
	}
	for name, wrap := range wraps {
		t.Run(name, func(t *testing.T) {
			r := &recorder{Sink: memory.New()}
			w := wrap(r)
			if w.Features() != r.Features() {
				t.Fatalf("features %+v, want the wrapped sink's %+v", w.Features(), r.Features())
			}
			if _, err := w.Claim(ctx, tok, sink.Observed{}); err != nil {
				t.Fatal(err)
			}
			if res, err := w.Apply(ctx, tok, serial, put); err != nil || res.Applied != 2 {
				t.Fatalf("a serial batch with IDs: %+v %v", res, err)
			}
			if res, err := w.Apply(ctx, tok, lane, put); err != nil || res.Applied != 2 {
				t.Fatalf("a lane's batch: %+v %v", res, err)
			}
			if _, err := w.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 6, Reason: "poison"}.InLane(6)); err != nil {
				t.Fatalf("a lane's dead letter: %v", err)
			}
			if _, err := w.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 8, Reason: "poison"}); err != nil {
				t.Fatalf("a serial dead letter: %v", err)
			}
			if len(r.batches) != 2 || !slices.Equal(r.batches[0].IDs, serial.IDs) || !slices.Equal(r.batches[1].From, lane.From) {
				t.Fatalf("the sink got the batches %+v, want %+v and %+v", r.batches, serial, lane)
			}
			if len(r.dls) != 2 || !r.dls[0].Lane || r.dls[0].From != 6 || r.dls[1].Lane {
				t.Fatalf("the sink got the dead letters %+v", r.dls)
			}
		})
	}
}

// TestFreezerHoldsDeadLetters: a dead letter is a fenced write too, so a
// Freezer freezes before it as before a batch: HoldBeforeBatch's second
// write, a dead letter, waits for the gate with the first one done.
func TestFreezerHoldsDeadLetters(t *testing.T) {
	ctx := context.Background()
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	gate := filepath.Join(t.TempDir(), "gate")
	held := make(chan []int64, 1)
	r := &recorder{Sink: memory.New()}
	f := HoldBeforeBatch[*memory.Tx](r, 2, gate, func(_ epochs.Token, offsets []int64) { held <- offsets })
	if _, err := f.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, func(context.Context, *memory.Tx, int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 1, Reason: "poison"})
		done <- err
	}()
	select {
	case offs := <-held:
		if !slices.Equal(offs, []int64{1}) {
			t.Fatalf("held with offsets %v, want the dead letter's [1]", offs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dead letter, the second write, was not held")
	}
	r.mu.Lock()
	reached := len(r.dls)
	r.mu.Unlock()
	if reached != 0 {
		t.Fatal("the held dead letter reached the sink before the gate opened")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(r.dls) != 1 {
		t.Fatalf("dead letters that reached the sink: %+v", r.dls)
	}
}

// TestInterrupterCutsEveryBatch: an armed Interrupter cuts a serial batch
// with IDs and a lane's batch alike; the retried batch applies.
func TestInterrupterCutsEveryBatch(t *testing.T) {
	ctx := context.Background()
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	noop := func(context.Context, *memory.Tx, int) error { return nil }
	for name, b := range map[string]sink.Batch{
		"serial with IDs": {Offsets: []int64{0, 1}, IDs: []string{"a", "b"}},
		"a lane's":        {Offsets: []int64{0, 2}, From: []int64{0, 2}},
	} {
		t.Run(name, func(t *testing.T) {
			in := NewInterrupter[*memory.Tx](memory.New(), nil)
			if _, err := in.Claim(ctx, tok, sink.Observed{}); err != nil {
				t.Fatal(err)
			}
			in.Arm()
			if _, err := in.Apply(ctx, tok, b, noop); !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted batch: %v, want context.Canceled", err)
			}
			if res, err := in.Apply(ctx, tok, b, noop); err != nil || res.Applied != 2 {
				t.Fatalf("retried batch: %+v %v, want both applied", res, err)
			}
		})
	}
}

// TestHangMovesPastADuplicate: a Hang whose configured call's last record
// is a duplicate (its effect never runs) hangs in the next call instead,
// and it counts lanes' batches with the serial ones. Red without the
// move to the next call.
func TestHangMovesPastADuplicate(t *testing.T) {
	ctx := context.Background()
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	noop := func(context.Context, *memory.Tx, int) error { return nil }
	release := make(chan struct{})
	reached := make(chan []int64, 1)
	h := NewHang[*memory.Tx](memory.New(), 2, BeforeCommit, release, func(_ context.Context, _ epochs.Token, offsets []int64, _ *memory.Tx) {
		reached <- offsets
	})
	if _, err := h.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}, IDs: []string{"a"}}, noop); err != nil {
		t.Fatal(err)
	}
	// Call 2, the configured one: its only record is a duplicate.
	if res, err := h.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}, IDs: []string{"a"}}, noop); err != nil || len(res.Duplicates) != 1 {
		t.Fatalf("a batch of a duplicate: %+v %v", res, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.Apply(ctx, tok, sink.Batch{Offsets: []int64{2, 4}, From: []int64{2, 4}, IDs: []string{"b", "c"}}, noop)
		done <- err
	}()
	select {
	case offs := <-reached:
		if !slices.Equal(offs, []int64{2, 4}) {
			t.Fatalf("reached with offsets %v, want [2 4]", offs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lane's batch after the duplicate never reached the hang point")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
