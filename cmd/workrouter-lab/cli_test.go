package main

// The helpers of the tests that run the product's commands (produce,
// status, dlq, fences) of this binary, in-process or as processes, beside
// its harness. Their twins for the product's own tests are in
// cmd/internal/cli.

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/cmd/internal/cli"
)

type (
	statusReport    = admin.StatusReport
	statusPartition = admin.StatusPartition
)

// dlqJSON is a row of `dlq list --json`: the fields these tests read.
type dlqJSON struct {
	ID        int64  `json:"id"`
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       *struct {
		Text   *string `json:"text,omitempty"`
		Base64 *string `json:"base64,omitempty"`
	} `json:"key"`
	Type     string `json:"type"`
	Reason   string `json:"reason"`
	Error    string `json:"error"`
	Attempts int    `json:"attempts"`
	State    string `json:"state"`
}

// statusJSON runs `status --json` and decodes its output.
func statusJSON(t *testing.T, args ...string) (statusReport, error) {
	t.Helper()
	out, _, err := runCLI(t, nil, append([]string{"status", "--json"}, args...)...)
	// A partition that needs attention makes status exit 2 after printing
	// the report: the report is what the callers check.
	if err != nil && cli.ExitCode(err) != cli.ExitNeedsAttention {
		return statusReport{}, err
	}
	var rep statusReport
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("--json printed %d lines, want one JSON object:\n%s", strings.Count(out, "\n"), out)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, out)
	}
	return rep, nil
}

// settled reports whether rep shows one member owning all partitions,
// every record committed in Kafka and applied in the sink.
func settled(rep statusReport, records int64) bool {
	if len(rep.Members) != 1 || len(rep.Members[0].Partitions) != len(rep.Partitions) || rep.TotalLag != 0 {
		return false
	}
	var committed, applied int64
	for _, p := range rep.Partitions {
		if p.Committed == nil || p.Sink == nil || p.Owner != rep.Members[0].MemberID {
			return false
		}
		committed += *p.Committed
		applied += p.Sink.NextOffset
	}
	return committed == records && applied == records
}
