package admin_test

import (
	"slices"
	"testing"

	"github.com/workrouter/workrouter/admin"
)

// TestNeedsAttention: a partition needs attention when its worker
// reported it stalled or blocked, or a problem is named; lag alone, or
// no owner, does not.
func TestNeedsAttention(t *testing.T) {
	rep := admin.StatusReport{Partitions: []admin.StatusPartition{
		{Partition: 0, State: "running", Lag: 1000},
		{Partition: 1, State: "stalled"},
		{Partition: 2, State: "blocked"},
		{Partition: 3, State: "unowned"},
		{Partition: 4, State: "running", Problems: []admin.StatusProblem{{Kind: "reset_pending", Detail: "d"}}},
	}}
	if got, want := rep.NeedsAttention(), []int32{1, 2, 4}; !slices.Equal(got, want) {
		t.Fatalf("NeedsAttention() = %v, want %v", got, want)
	}
	if got := (admin.StatusReport{Partitions: rep.Partitions[:1]}).NeedsAttention(); got != nil {
		t.Fatalf("a running partition with lag needs attention: %v", got)
	}
}
