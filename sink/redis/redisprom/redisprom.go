// Package redisprom exports a redis.Sink's own series to Prometheus, read
// from [redis.Sink.HeldStats] at each scrape:
//
//   - workrouter_redis_held_applies_total{outcome}: applies on a held
//     watch, by outcome (ok, moved, refused, armed, dropped, evicted,
//     no_place), each once it happened;
//   - workrouter_redis_held_watches: scopes whose fence the sink keeps
//     watched on a connection of their own between batches.
//
// The series every sink shares (operations, records, durations) come from
// package sink/sinkmetrics.
package redisprom

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/workrouter/workrouter/sink/redis"
)

var (
	appliesDesc = prometheus.NewDesc("workrouter_redis_held_applies_total",
		"Applies of the Redis sink on a held watch (one round trip a batch), by outcome: ok, moved (the fence was written since the WATCH; re-armed), refused (fenced or a stale checkpoint), armed (a new connection's first WATCH), dropped (an error closed it), evicted (idle, closed for another scope), no_place (every held watch in use: the two-round-trip watched path ran).",
		[]string{"outcome"}, nil)
	watchesDesc = prometheus.NewDesc("workrouter_redis_held_watches",
		"Scopes whose fence the Redis sink keeps watched on a connection of their own between batches (at most Config.HeldWatches).",
		nil, nil)
)

// collector reads a Sink's HeldStats at each scrape.
type collector struct{ s *redis.Sink }

// Describe sends the two descriptors.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- appliesDesc
	ch <- watchesDesc
}

// Collect sends the current values.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.HeldStats()
	for outcome, n := range st.Applies {
		ch <- prometheus.MustNewConstMetric(appliesDesc, prometheus.CounterValue, float64(n), outcome)
	}
	ch <- prometheus.MustNewConstMetric(watchesDesc, prometheus.GaugeValue, float64(st.Watches))
}

// Register registers s's series on reg and returns the function that
// unregisters them. It fails (the error matching redis.ErrConfig) if they
// cannot be registered, for instance because another Sink's are
// registered on reg already.
func Register(reg prometheus.Registerer, s *redis.Sink) (unregister func(), err error) {
	if reg == nil || s == nil {
		return nil, fmt.Errorf("%w: redisprom: a nil Registerer or Sink", redis.ErrConfig)
	}
	c := collector{s}
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("%w: redisprom: register metrics: %w", redis.ErrConfig, err)
	}
	return func() { reg.Unregister(c) }, nil
}
