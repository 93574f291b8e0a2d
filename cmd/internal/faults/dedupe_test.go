package faults

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestWrappersApplyOnce: the consumer applies with ApplyOnce when the
// sink has it, so every wrapper implements it, with its fault: the
// Interrupter cuts an ApplyOnce, and a Hang whose configured call's last
// record is a duplicate hangs in the next call instead. Red with the
// wrappers' ApplyOnce removed (the consumer would bypass them: not a
// sink.Deduplicator) or the Hang's move to the next call.
func TestWrappersApplyOnce(t *testing.T) {
	ctx := context.Background()
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	noop := func(context.Context, *memory.Tx, int) error { return nil }

	s := memory.New()
	in := NewInterrupter(s, nil)
	var d sink.Deduplicator[*memory.Tx] = in
	if d.DedupeWindow() != s.DedupeWindow() {
		t.Fatalf("Interrupter.DedupeWindow() = %d, want the wrapped sink's %d", d.DedupeWindow(), s.DedupeWindow())
	}
	if _, err := in.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	in.Arm()
	if _, err := in.ApplyOnce(ctx, tok, []int64{0, 1}, []string{"a", "b"}, noop); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted ApplyOnce: %v, want context.Canceled", err)
	}
	if res, err := in.ApplyOnce(ctx, tok, []int64{0, 1}, []string{"a", "b"}, noop); err != nil || res.Applied != 2 {
		t.Fatalf("retried ApplyOnce: %+v %v, want both applied", res, err)
	}

	s = memory.New()
	release := make(chan struct{})
	reached := make(chan []int64, 1)
	h := NewHang[*memory.Tx](s, 2, BeforeCommit, release, func(_ context.Context, _ epochs.Token, offsets []int64, _ *memory.Tx) {
		reached <- offsets
	})
	d = h
	if _, err := h.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ApplyOnce(ctx, tok, []int64{0}, []string{"a"}, noop); err != nil {
		t.Fatal(err)
	}
	// Call 2, the configured one: its only record is a duplicate.
	if res, err := d.ApplyOnce(ctx, tok, []int64{1}, []string{"a"}, noop); err != nil || len(res.Duplicates) != 1 {
		t.Fatalf("ApplyOnce of a duplicate: %+v %v", res, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := d.ApplyOnce(ctx, tok, []int64{2}, []string{"b"}, noop)
		done <- err
	}()
	select {
	case offs := <-reached:
		if len(offs) != 1 || offs[0] != 2 {
			t.Fatalf("reached with offsets %v, want [2]", offs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call after the duplicate never reached the hang point")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Over a sink that is not a Deduplicator, ApplyOnce says so.
	plain := NewHang[*memory.Tx](struct{ sink.Sink[*memory.Tx] }{memory.New()}, 0, AfterCommit, nil, nil)
	if _, err := plain.ApplyOnce(ctx, tok, []int64{0}, []string{"a"}, noop); !errors.Is(err, ErrNotDeduplicator) {
		t.Fatalf("ApplyOnce over a plain sink: %v, want ErrNotDeduplicator", err)
	}
}
