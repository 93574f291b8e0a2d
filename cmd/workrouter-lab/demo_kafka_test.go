package main

import (
	"strings"
	"testing"
)

// TestDemoCommandKafka runs the demo on the Kafka sink on its embedded
// broker: the workers publish the ledger's decisions as events in
// transactions, the frozen worker's late transaction is refused by the
// coordinator, and the checker, reading the events and the checkpoint
// topic with read_committed, finds a clean run.
func TestDemoCommandKafka(t *testing.T) {
	sum := runDemoJSON(t, "--sink", "kafka")
	tl := strings.Join(sum.Timeline, "\n")
	// The refusal is the coordinator's (UNKNOWN_MEMBER_ID) or, if the
	// woken client learned first that its member is gone, the sink's
	// own check: either way its transaction was aborted.
	if !strings.Contains(tl, "Kafka sink: events") || !strings.Contains(tl, "REJECTED late write") || !strings.Contains(tl, "was aborted") {
		t.Errorf("the timeline does not show the Kafka sink and the aborted late transaction:\n%s", tl)
	}
}
