package consumer

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/workrouter/workrouter/internal/promset"

	"github.com/workrouter/workrouter/sink"
)

// DefaultLagInterval is the default Config.LagInterval.
const DefaultLagInterval = 10 * time.Second

// Label values of the consumer's metrics.
const (
	opClaim = "claim"
	opApply = "apply"

	outcomeOK     = "ok"
	outcomeFenced = "fenced"
	outcomeError  = "error"

	kindEffect = "effect"
	kindSink   = "sink"
)

// metrics is a Worker's Prometheus collectors. A nil *metrics (no
// Config.Registerer) makes every method a no-op, so an unmonitored Worker
// pays one nil check per event.
type metrics struct {
	set promset.Set

	recordsApplied  *prometheus.CounterVec // topic, partition
	batchesApplied  *prometheus.CounterVec // topic, partition
	batchSize       prometheus.Histogram
	applyDuration   prometheus.Histogram
	handlerDuration prometheus.Histogram
	fenced          *prometheus.CounterVec // topic, partition, op
	claims          *prometheus.CounterVec // topic, outcome
	assigned        *prometheus.CounterVec // topic
	revoked         *prometheus.CounterVec // topic
	lost            *prometheus.CounterVec // topic
	owned           *prometheus.GaugeVec   // topic
	tenureEpoch     *prometheus.GaugeVec   // topic, partition
	retries         *prometheus.CounterVec // topic, kind
	sinkErrors      *prometheus.CounterVec // topic, kind
	lag             *prometheus.GaugeVec   // topic, partition
}

// newMetrics builds (but does not register) the collectors of a Worker of
// group.
func newMetrics(group string) *metrics {
	m := &metrics{}
	cl := prometheus.Labels{"group": group}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl}, labels)
		m.set.Add(name, c)
		return c
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: cl}, labels)
		m.set.Add(name, g)
		return g
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: cl, Buckets: buckets})
		m.set.Add(name, h)
		return h
	}
	m.recordsApplied = counter("workrouter_consumer_records_applied_total",
		"Records whose effects were applied to the sink (records the sink skipped as already applied are not counted).", "topic", "partition")
	m.batchesApplied = counter("workrouter_consumer_batches_applied_total",
		"Batches applied to the sink in one accepted Apply each.", "topic", "partition")
	m.batchSize = histogram("workrouter_consumer_batch_size",
		"Records per applied batch.", prometheus.ExponentialBuckets(1, 2, 11))
	m.applyDuration = histogram("workrouter_consumer_apply_duration_seconds",
		"Duration of one sink Apply attempt, handlers included, whatever its outcome.", prometheus.ExponentialBuckets(0.001, 2, 15))
	m.handlerDuration = histogram("workrouter_consumer_handler_duration_seconds",
		"Duration of one handler call.", prometheus.ExponentialBuckets(0.0001, 2.5, 12))
	m.fenced = counter("workrouter_consumer_fenced_total",
		"Claims (op=claim) and batches (op=apply) the sink refused because a newer tenure holds the partition.", "topic", "partition", "op")
	m.claims = counter("workrouter_consumer_claims_total",
		"Claim attempts by outcome: ok, fenced (refused by the sink), error (failed and retried).", "topic", "outcome")
	m.assigned = counter("workrouter_consumer_partitions_assigned_total",
		"Partitions assigned to this member.", "topic")
	m.revoked = counter("workrouter_consumer_partitions_revoked_total",
		"Partitions revoked from this member.", "topic")
	m.lost = counter("workrouter_consumer_partitions_lost_total",
		"Partitions lost by this member (session expired or fenced by the coordinator).", "topic")
	m.owned = gauge("workrouter_consumer_owned_partitions",
		"Partitions this member currently processes: claimed and not fenced.", "topic")
	m.tenureEpoch = gauge("workrouter_consumer_tenure_epoch",
		"Epoch of the tenure this member holds on the partition, set on claim; absent when the partition is not held.", "topic", "partition")
	m.retries = counter("workrouter_consumer_retries_total",
		"Failed Apply (kind=apply) or Claim (kind=claim) attempts that are retried with backoff.", "topic", "kind")
	m.sinkErrors = counter("workrouter_consumer_sink_errors_total",
		"Failed Apply attempts other than fenced ones: a handler's error (kind=effect) or the sink's (kind=sink).", "topic", "kind")
	m.lag = gauge("workrouter_consumer_lag",
		"Records between the partition's end offset and the next offset to apply, refreshed every Config.LagInterval.", "topic", "partition")
	return m
}

// register registers every collector on reg, or none: on a failure the
// ones already registered are unregistered again.
func (m *metrics) register(reg prometheus.Registerer) error {
	return m.set.Register(reg)
}

// unregister removes the collectors from the registerer they were
// registered on.
func (m *metrics) unregister() {
	if m != nil {
		m.set.Unregister()
	}
}

// MetricNames returns the sorted names of the metrics a Worker registers on
// Config.Registerer (histograms by their base name, without the _bucket,
// _sum and _count suffixes). They are checked by registering a fresh set on
// a new pedantic registry, so the list is the one a scrape can show.
func MetricNames() []string {
	m := newMetrics("")
	if err := m.register(prometheus.NewPedanticRegistry()); err != nil {
		panic(err) // a bug in newMetrics
	}
	names := slices.Clone(m.set.Names())
	slices.Sort(names)
	return names
}

func partLabel(p int32) string { return strconv.FormatInt(int64(p), 10) }

// initTopic creates the topic's label combinations that are known up front
// at zero, so that rates and alerts see them before the first event.
func (m *metrics) initTopic(topic string) {
	if m == nil {
		return
	}
	for _, o := range []string{outcomeOK, outcomeFenced, outcomeError} {
		m.claims.WithLabelValues(topic, o)
	}
	m.assigned.WithLabelValues(topic)
	m.revoked.WithLabelValues(topic)
	m.lost.WithLabelValues(topic)
	m.owned.WithLabelValues(topic)
	m.retries.WithLabelValues(topic, opApply)
	m.retries.WithLabelValues(topic, opClaim)
	m.sinkErrors.WithLabelValues(topic, kindEffect)
	m.sinkErrors.WithLabelValues(topic, kindSink)
}

// partitionAssigned counts an assignment and creates the partition's
// counters at zero.
func (m *metrics) partitionAssigned(topic string, p int32) {
	if m == nil {
		return
	}
	pl := partLabel(p)
	m.assigned.WithLabelValues(topic).Inc()
	m.recordsApplied.WithLabelValues(topic, pl)
	m.batchesApplied.WithLabelValues(topic, pl)
	m.fenced.WithLabelValues(topic, pl, opClaim)
	m.fenced.WithLabelValues(topic, pl, opApply)
}

// released counts a revoke or loss.
func (m *metrics) released(topic string, revoked bool) {
	if m == nil {
		return
	}
	if revoked {
		m.revoked.WithLabelValues(topic).Inc()
	} else {
		m.lost.WithLabelValues(topic).Inc()
	}
}

// dropPartition deletes the partition's tenure epoch and lag series: this
// member no longer holds it.
func (m *metrics) dropPartition(topic string, p int32) {
	if m == nil {
		return
	}
	pl := partLabel(p)
	m.tenureEpoch.DeleteLabelValues(topic, pl)
	m.lag.DeleteLabelValues(topic, pl)
}

func (m *metrics) setOwned(topic string, n int) {
	if m == nil {
		return
	}
	m.owned.WithLabelValues(topic).Set(float64(n))
}

func (m *metrics) claimed(topic string, p, epoch int32) {
	if m == nil {
		return
	}
	m.claims.WithLabelValues(topic, outcomeOK).Inc()
	m.tenureEpoch.WithLabelValues(topic, partLabel(p)).Set(float64(epoch))
}

func (m *metrics) claimFailed(topic string) {
	if m == nil {
		return
	}
	m.claims.WithLabelValues(topic, outcomeError).Inc()
	m.retries.WithLabelValues(topic, opClaim).Inc()
}

func (m *metrics) claimFenced(topic string, p int32) {
	if m == nil {
		return
	}
	m.claims.WithLabelValues(topic, outcomeFenced).Inc()
	m.fenced.WithLabelValues(topic, partLabel(p), opClaim).Inc()
}

func (m *metrics) applyFenced(topic string, p int32) {
	if m == nil {
		return
	}
	m.fenced.WithLabelValues(topic, partLabel(p), opApply).Inc()
}

func (m *metrics) applyDone(start time.Time) {
	if m == nil {
		return
	}
	m.applyDuration.Observe(time.Since(start).Seconds())
}

func (m *metrics) applied(topic string, p int32, batch, applied int) {
	if m == nil {
		return
	}
	pl := partLabel(p)
	m.batchesApplied.WithLabelValues(topic, pl).Inc()
	m.recordsApplied.WithLabelValues(topic, pl).Add(float64(applied))
	m.batchSize.Observe(float64(batch))
}

// applyFailed counts a failed, retried, non-fenced Apply.
func (m *metrics) applyFailed(topic string, err error) {
	if m == nil {
		return
	}
	kind := kindSink
	var ee *sink.EffectError
	if errors.As(err, &ee) {
		kind = kindEffect
	}
	m.sinkErrors.WithLabelValues(topic, kind).Inc()
	m.retries.WithLabelValues(topic, opApply).Inc()
}

// wrapHandler times every call of h when metrics are enabled.
func (m *metrics) wrapHandler(h func() error) error {
	if m == nil {
		return h()
	}
	start := time.Now()
	err := h()
	m.handlerDuration.Observe(time.Since(start).Seconds())
	return err
}

// lagLoop refreshes the lag gauge of every owned partition every
// LagInterval until the Worker is closed. It runs only with metrics.
func (w *Worker[Tx]) lagLoop() {
	defer w.wg.Done()
	adm := kadm.NewClient(w.cl) // shares the client; never closed here
	t := time.NewTicker(w.cfg.LagInterval)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(w.ctx, w.cfg.LagInterval)
		ends, err := adm.ListEndOffsets(ctx, w.cfg.Topic)
		cancel()
		if err != nil {
			if w.ctx.Err() == nil {
				w.cfg.Logger.Debug("lag: listing end offsets failed", "topic", w.cfg.Topic, "err", err)
			}
			continue
		}
		w.updateLag(ends)
	}
}

// updateLag sets the lag of every partition this Worker processes. It runs
// under w.mu, as do release and markFenced, which delete the series: a
// released or fenced partition's lag is never set again.
func (w *Worker[Tx]) updateLag(ends kadm.ListedOffsets) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, t := range w.tenures {
		if !t.started.Load() || t.fenced.Load() {
			continue
		}
		end, ok := ends.Lookup(w.cfg.Topic, p)
		if !ok || end.Err != nil || end.Offset < 0 {
			continue
		}
		next := t.appliedNext.Load()
		if next < 0 {
			next = t.startNext.Load()
		}
		w.m.lag.WithLabelValues(w.cfg.Topic, partLabel(p)).Set(float64(max(end.Offset-next, 0)))
	}
}

// refreshOwnedLocked sets the owned-partitions gauge; w.mu must be held.
func (w *Worker[Tx]) refreshOwnedLocked() {
	if w.m == nil {
		return
	}
	n := 0
	for _, t := range w.tenures {
		if t.started.Load() && !t.fenced.Load() {
			n++
		}
	}
	w.m.setOwned(w.cfg.Topic, n)
}

// Ready reports whether the Worker serves its share of the group: it has
// joined the group (it has a member ID), it is not closed, and every
// partition assigned to it is claimed in the sink and not fenced. A member
// assigned no partition is ready once joined. Use it for a readiness probe;
// it is cheap and safe to call from any goroutine.
func (w *Worker[Tx]) Ready() bool {
	if w.ctx.Err() != nil {
		return false
	}
	if member, gen := w.cl.GroupMetadata(); member == "" || gen < 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.tenures {
		if !t.started.Load() || t.fenced.Load() {
			return false
		}
	}
	return true
}
