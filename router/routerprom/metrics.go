// Package routerprom is a router.Router's Prometheus metrics, fed by its
// events: [New] registers them on the caller's prometheus.Registerer and
// returns the [Metrics], an Observer to put in router.Config.Observers.
// The series (listed by [MetricNames]):
//
//   - workrouter_router_sends_total{topic,outcome="ok"|"error"|"refused"}:
//     commands sent, by outcome; refused counts sends refused because the
//     partition count changed under router.Refuse.
//   - workrouter_router_send_duration_seconds: histogram of the time from a
//     send to Kafka's acknowledgement or failure.
//   - workrouter_router_partition_count_changes_total{topic,policy}:
//     partition count changes seen, by the router.Policy applied.
//
// The series are unregistered when the Router closes (its Closed event) or
// by [Metrics.Unregister].
package routerprom

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/workrouter/workrouter/internal/promset"
	"github.com/workrouter/workrouter/router"
)

// Label values of workrouter_router_sends_total's outcome.
const (
	outcomeOK      = "ok"
	outcomeError   = "error"
	outcomeRefused = "refused"
)

// Metrics is a Router's Prometheus collectors, fed as a router.Observer
// of its events. Its methods are safe for concurrent use.
type Metrics struct {
	set  promset.Set
	once sync.Once // unregisters

	sends        *prometheus.CounterVec // topic, outcome
	sendDuration prometheus.Histogram
	countChanges *prometheus.CounterVec // topic, policy
}

func newMetrics() *Metrics {
	m := &Metrics{}
	m.sends = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workrouter_router_sends_total",
		Help: "Commands sent, by outcome: ok (acknowledged by Kafka), error (invalid, closed or failed), refused (the partition count changed under policy refuse).",
	}, []string{"topic", "outcome"})
	m.sendDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "workrouter_router_send_duration_seconds",
		Help:    "Time from a send to Kafka's acknowledgement or failure, for commands handed to the producer.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	})
	m.countChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workrouter_router_partition_count_changes_total",
		Help: "Changes of the topic's partition count seen by the router, by the policy applied (refuse or alarm).",
	}, []string{"topic", "policy"})
	m.set.Add("workrouter_router_sends_total", m.sends)
	m.set.Add("workrouter_router_send_duration_seconds", m.sendDuration)
	m.set.Add("workrouter_router_partition_count_changes_total", m.countChanges)
	return m
}

// New registers a Router's metrics on reg and returns them, to put in that
// Router's router.Config.Observers. It fails (the error matching
// router.ErrConfig) if they cannot be registered, for instance
// because another Router's are registered on reg already. The Router's
// Closed event unregisters them; so does Unregister.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: routerprom: a nil Registerer", router.ErrConfig)
	}
	m := newMetrics()
	if err := m.set.Register(reg); err != nil {
		return nil, fmt.Errorf("%w: routerprom: %w", router.ErrConfig, err)
	}
	return m, nil
}

// Unregister removes the metrics from the Registerer New registered them
// on. It is idempotent; the Router's Closed event calls it too.
func (m *Metrics) Unregister() { m.once.Do(m.set.Unregister) }

// MetricNames returns the sorted names of the metrics New registers (the
// histogram by its base name, without the _bucket, _sum and _count
// suffixes). They are checked by registering a fresh set on a new
// pedantic registry.
func MetricNames() []string {
	m := newMetrics()
	if err := m.set.Register(prometheus.NewPedanticRegistry()); err != nil {
		panic(err) // a bug in newMetrics
	}
	names := slices.Clone(m.set.Names())
	slices.Sort(names)
	return names
}

// Observe updates the series for e.
func (m *Metrics) Observe(e router.Event) {
	switch e := e.(type) {
	case router.Started:
		for _, o := range []string{outcomeOK, outcomeError, outcomeRefused} {
			m.sends.WithLabelValues(e.Topic, o)
		}
		m.countChanges.WithLabelValues(e.Topic, e.Policy.String())
	case router.NotSent:
		outcome := outcomeError
		if errors.Is(e.Err, router.ErrPartitionCountChanged) {
			outcome = outcomeRefused
		}
		m.sends.WithLabelValues(e.Topic, outcome).Inc()
	case router.Sent:
		m.sendDuration.Observe(e.Took.Seconds())
		outcome := outcomeOK
		if e.Err != nil {
			outcome = outcomeError
		}
		m.sends.WithLabelValues(e.Topic, outcome).Inc()
	case router.CountChanged:
		m.countChanges.WithLabelValues(e.Topic, e.Policy.String()).Inc()
	case router.Closed:
		m.Unregister()
	}
}
