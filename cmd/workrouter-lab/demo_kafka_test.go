package main

import (
	"encoding/json"
	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"strings"
	"testing"
)

// TestDemoCommandKafka runs the demo on the Kafka sink on its embedded
// broker: the workers publish the ledger's decisions as events in
// transactions, the frozen worker's late transaction is refused by the
// coordinator, and the checker, reading the events and the checkpoint
// topic with read_committed, finds a clean run.
func TestDemoCommandKafka(t *testing.T) {
	p := clitest.Start(t, []string{"demo", "--commands", "1000", "--accounts", "80", "--sink", "kafka", "--json"})
	if code := p.Wait(t); code != 0 {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", code, p.Stdout, p.Stderr)
	}
	var sum struct {
		Produced, Applied, Duplicates, Lost int
		OrderViolations                     int            `json:"order_violations"`
		StaleRejected                       int            `json:"stale_rejected"`
		Invariants                          map[string]int `json:"invariants"`
		Timeline                            []string       `json:"timeline"`
	}
	if err := json.Unmarshal([]byte(p.Stdout.String()), &sum); err != nil {
		t.Fatalf("--json output: %v\n%s", err, p.Stdout)
	}
	if sum.Produced != 1000 || sum.Applied != 1000 || sum.Duplicates+sum.Lost+sum.OrderViolations != 0 || sum.StaleRejected < 1 {
		t.Fatalf("summary %+v", sum)
	}
	for k, n := range sum.Invariants {
		if n != 0 {
			t.Errorf("invariant %s: %d violations", k, n)
		}
	}
	tl := strings.Join(sum.Timeline, "\n")
	// The refusal is the coordinator's (UNKNOWN_MEMBER_ID) or, if the
	// woken client learned first that its member is gone, the sink's
	// own check: either way its transaction was aborted.
	if !strings.Contains(tl, "Kafka sink: events") || !strings.Contains(tl, "REJECTED late write") || !strings.Contains(tl, "was aborted") {
		t.Errorf("the timeline does not show the Kafka sink and the aborted late transaction:\n%s", tl)
	}
}
