package routerprom

import (
	"testing"

	"github.com/workrouter/workrouter/internal/promgolden"
)

// TestMetricsGolden: the series this package registers (names, help,
// labels) are the ones in testdata/metrics.golden.
func TestMetricsGolden(t *testing.T) {
	r := &promgolden.Recorder{}
	if err := newMetrics().set.Register(r); err != nil {
		t.Fatal(err)
	}
	promgolden.Check(t, r, "testdata/metrics.golden")
}
