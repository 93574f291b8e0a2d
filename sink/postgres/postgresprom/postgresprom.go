// Package postgresprom exports a postgres.Sink's own series to
// Prometheus, read from [postgres.Sink.GapStats] at each scrape:
//
//   - workrouter_postgres_gap_compactions_total{outcome}: compactions of
//     checkpoints with gaps that lanes attempted, by outcome (compacted,
//     nothing, busy, fenced, error);
//   - workrouter_postgres_gap_spans{group,topic,partition}: done spans
//     above the watermark of a scope, as its last claim or compaction in
//     this process found them.
//
// The series every sink shares (operations, records, durations) come from
// package sink/sinkmetrics.
package postgresprom

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/workrouter/workrouter/sink/postgres"
)

var (
	compactionsDesc = prometheus.NewDesc("workrouter_postgres_gap_compactions_total",
		"Compactions of checkpoints with gaps that lanes attempted, by outcome (busy: a lane held the fence row, given up).",
		[]string{"outcome"}, nil)
	spansDesc = prometheus.NewDesc("workrouter_postgres_gap_spans",
		"Done spans above the watermark of a scope, as its last claim or compaction in this process found them.",
		[]string{"group", "topic", "partition"}, nil)
)

// collector reads a Sink's GapStats at each scrape.
type collector struct{ s *postgres.Sink }

// Describe sends the two descriptors.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- compactionsDesc
	ch <- spansDesc
}

// Collect sends the current values.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.GapStats()
	for outcome, n := range st.Compactions {
		ch <- prometheus.MustNewConstMetric(compactionsDesc, prometheus.CounterValue, float64(n), outcome)
	}
	for sc, n := range st.Spans {
		ch <- prometheus.MustNewConstMetric(spansDesc, prometheus.GaugeValue, float64(n), sc.Group, sc.Topic, strconv.Itoa(int(sc.Partition)))
	}
}

// Register registers s's series on reg and returns the function that
// unregisters them. It fails (the error matching postgres.ErrConfig) if
// they cannot be registered, for instance because another Sink's are
// registered on reg already.
func Register(reg prometheus.Registerer, s *postgres.Sink) (unregister func(), err error) {
	if reg == nil || s == nil {
		return nil, fmt.Errorf("%w: postgresprom: a nil Registerer or Sink", postgres.ErrConfig)
	}
	c := collector{s}
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("%w: postgresprom: register metrics: %w", postgres.ErrConfig, err)
	}
	return func() { reg.Unregister(c) }, nil
}
