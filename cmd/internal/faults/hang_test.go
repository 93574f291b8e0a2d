package faults

import (
	"context"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestHang: the nth Apply blocks at its point — before the commit with
// the batch invisible, after it with the batch committed — until
// released; other calls pass through; capabilities stay reachable.
func TestHang(t *testing.T) {
	for _, point := range []HangPoint{BeforeCommit, AfterCommit} {
		t.Run(point.String(), func(t *testing.T) {
			ctx := context.Background()
			s := memory.New()
			tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
			release := make(chan struct{})
			reached := make(chan []int64, 1)
			h := NewHang[*memory.Tx](s, 2, point, release, func(_ context.Context, _ epochs.Token, offsets []int64, _ *memory.Tx) {
				reached <- offsets
			})
			if _, ok := sink.As[fenceadmin.Lister](sink.Sink[*memory.Tx](h)); !ok {
				t.Fatal("Hang hides the sink's capabilities")
			}
			if _, err := h.Claim(ctx, tok, sink.Observed{}); err != nil {
				t.Fatal(err)
			}
			put := func(ctx context.Context, tx *memory.Tx, i int) error { tx.Put("k", []byte{byte(i)}); return nil }
			if _, err := h.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, put); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := h.Apply(ctx, tok, sink.Batch{Offsets: []int64{1, 2}}, put)
				done <- err
			}()
			select {
			case offs := <-reached:
				if len(offs) != 2 || offs[0] != 1 {
					t.Fatalf("reached with offsets %v", offs)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the second Apply never reached the hang point")
			}
			fences, _ := s.Fences(ctx)
			committed := fences[0].NextOffset == 3
			if committed != (point == AfterCommit) {
				t.Fatalf("at the %s point the checkpoint is %d", point, fences[0].NextOffset)
			}
			select {
			case err := <-done:
				t.Fatalf("Apply returned (%v) before the release", err)
			case <-time.After(50 * time.Millisecond):
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if _, err := h.Apply(ctx, tok, sink.Batch{Offsets: []int64{3}}, put); err != nil {
				t.Fatal(err)
			}
		})
	}
}
