package cli

import (
	"fmt"
	"slices"

	"github.com/workrouter/workrouter/admin"
)

// routingLine is status's one-line summary of the routing check r.
func routingLine(r admin.RoutingReport) string {
	partial := ""
	if r.Partial {
		partial = " (partial: not every record could be read in time)"
	}
	if r.Misrouted == 0 {
		return fmt.Sprintf("routing: %d recent records checked against %s: every key is on its partition%s", r.Checked, r.Partitioner, partial)
	}
	parts := make([]int32, 0, len(r.ByPartition))
	for p := range r.ByPartition {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	return fmt.Sprintf("routing: %d of %d recent records are MISROUTED under %s (on partitions %s; e.g. key %q is on %d, %s maps it to %d): "+
		"a producer partitions keys differently, so one key's commands can be applied out of order; see --partitioner%s",
		r.Misrouted, r.Checked, r.Partitioner, joinInt32(parts), r.Example.Key, r.Example.Partition, r.Partitioner, r.Example.Expected, partial)
}
