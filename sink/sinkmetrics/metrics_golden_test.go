package sinkmetrics_test

import (
	"testing"

	"github.com/workrouter/workrouter/internal/promgolden"
	"github.com/workrouter/workrouter/sink/memory"
	"github.com/workrouter/workrouter/sink/sinkmetrics"
)

// TestMetricsGolden pins the series the wrapper registers (names, help,
// labels), as /metrics shows them for a worker's sink.
func TestMetricsGolden(t *testing.T) {
	r := &promgolden.Recorder{}
	if _, err := sinkmetrics.Wrap(memory.New(), r, "memory"); err != nil {
		t.Fatal(err)
	}
	promgolden.Check(t, r, "testdata/metrics.golden")
}
