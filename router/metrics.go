package router

import (
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/workrouter/workrouter/internal/promset"
)

// Label values of workrouter_router_sends_total's outcome.
const (
	outcomeOK      = "ok"
	outcomeError   = "error"
	outcomeRefused = "refused"
)

// metrics is a Router's Prometheus collectors. A nil *metrics (no
// Config.Registerer) makes every method a no-op.
type metrics struct {
	set promset.Set

	sends        *prometheus.CounterVec // topic, outcome
	sendDuration prometheus.Histogram
	countChanges *prometheus.CounterVec // topic, policy
}

func newMetrics() *metrics {
	m := &metrics{}
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

// register registers every collector on reg, or none.
func (m *metrics) register(reg prometheus.Registerer) error {
	return m.set.Register(reg)
}

func (m *metrics) unregister() {
	if m != nil {
		m.set.Unregister()
	}
}

// MetricNames returns the sorted names of the metrics a Router registers on
// Config.Registerer (the histogram by its base name, without the _bucket,
// _sum and _count suffixes). They are checked by registering a fresh set on
// a new pedantic registry.
func MetricNames() []string {
	m := newMetrics()
	if err := m.register(prometheus.NewPedanticRegistry()); err != nil {
		panic(err) // a bug in newMetrics
	}
	names := slices.Clone(m.set.Names())
	slices.Sort(names)
	return names
}

// initTopic creates the known label combinations at zero.
func (m *metrics) initTopic(topic string, policy Policy) {
	if m == nil {
		return
	}
	for _, o := range []string{outcomeOK, outcomeError, outcomeRefused} {
		m.sends.WithLabelValues(topic, o)
	}
	m.countChanges.WithLabelValues(topic, policy.String())
}

// notSent counts a send that failed before reaching the producer.
func (m *metrics) notSent(topic string, err error) {
	if m == nil {
		return
	}
	outcome := outcomeError
	if errors.Is(err, ErrPartitionCountChanged) {
		outcome = outcomeRefused
	}
	m.sends.WithLabelValues(topic, outcome).Inc()
}

// sent counts a send the producer completed, took after it was handed to
// the client.
func (m *metrics) sent(topic string, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.sendDuration.Observe(took.Seconds())
	outcome := outcomeOK
	if err != nil {
		outcome = outcomeError
	}
	m.sends.WithLabelValues(topic, outcome).Inc()
}

func (m *metrics) countChanged(topic string, policy Policy) {
	if m == nil {
		return
	}
	m.countChanges.WithLabelValues(topic, policy.String()).Inc()
}
