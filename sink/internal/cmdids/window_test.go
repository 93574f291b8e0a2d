package cmdids_test

import (
	"testing"

	"github.com/workrouter/workrouter/sink/internal/cmdids"
)

func TestIsDuplicate(t *testing.T) {
	for _, c := range []struct {
		off, applied, window int64
		want                 bool
	}{
		{100, 0, 100, true}, {101, 0, 100, false}, {5, 50, 10, true}, {10, 9, 1, true}, {11, 9, 1, false},
	} {
		if got := cmdids.IsDuplicate(c.off, c.applied, c.window); got != c.want {
			t.Errorf("IsDuplicate(%d, %d, %d) = %v, want %v", c.off, c.applied, c.window, got, c.want)
		}
	}
}

// TestPruneDue: the prune runs when the horizon crosses a multiple of
// window/16, so at least once per window/16 offsets and never twice
// within one step.
func TestPruneDue(t *testing.T) {
	const w = 1600 // step 100
	for _, c := range []struct {
		oldNext, newNext int64
		want             bool
	}{
		{0, 256, false},          // horizon still below 0
		{1600, 1700, true},       // horizon 0 → 100
		{1700, 1799, false},      // 100 → 199
		{1799, 1800, true},       // 199 → 200
		{1000, 1601, false},      // -600 → 1: no multiple of 100 crossed
		{1500, 1700, true},       // -100 → 100
		{1500, 1599, false},      // -100 → -1
		{1799, 99999, true},      // a jump
		{2000, 2000 + 99, false}, // within a step
		{10, 11, false},
	} {
		if got := cmdids.PruneDue(c.oldNext, c.newNext, w); got != c.want {
			t.Errorf("PruneDue(%d, %d, %d) = %v, want %v", c.oldNext, c.newNext, w, got, c.want)
		}
	}
	for next := int64(10); next < 100; next++ {
		if !cmdids.PruneDue(next, next+1, 10) {
			t.Fatalf("a window of 10 (step 1) must prune with every offset: not at %d", next)
		}
	}
}
