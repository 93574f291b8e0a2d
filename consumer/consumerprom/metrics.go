package consumerprom

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/promset"
	"github.com/workrouter/workrouter/sink"
)

// Label values of the consumer's metrics.
const (
	opClaim = "claim"
	opApply = "apply"

	outcomeOK     = "ok"
	outcomeFenced = "fenced"
	outcomeError  = "error"
	// outcomeTakeover: a claim accepted as a proven takeover from a
	// holder of an earlier incarnation of the group.
	outcomeTakeover = "takeover"
)

// Metrics is a Worker's Prometheus collectors, fed as a consumer.Observer
// of its events (and a consumer.HandlerObserver of its handler calls). Put
// it in consumer.Config.Observers of the one Worker of its group. Its
// methods are safe for concurrent use.
type Metrics struct {
	once sync.Once // unregisters

	set promset.Set

	mu sync.Mutex // guards held and owned, and orders series updates with their deletion
	// held is, per partition, the tenure the partition's gauges belong to:
	// set when it is assigned, removed (with the gauges) when that tenure
	// is revoked, lost or fenced. Events of any other tenure (one released
	// while a batch of it was in flight) leave the gauges alone.
	held  map[int32]epochs.Token
	owned map[int32]epochs.Token // partitions claimed and not fenced or released

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
	ownedGauge      *prometheus.GaugeVec   // topic
	tenureEpoch     *prometheus.GaugeVec   // topic, partition
	retries         *prometheus.CounterVec // topic, partition, kind
	deadLetters     *prometheus.CounterVec // topic, reason
	logChanged      *prometheus.CounterVec // topic, case
	recordsLost     *prometheus.CounterVec // topic, partition
	stalled         *prometheus.GaugeVec   // topic, partition
	stalledSince    *prometheus.GaugeVec   // topic, partition
	sinkErrors      *prometheus.CounterVec // topic, kind
	lag             *prometheus.GaugeVec   // topic, partition
	misrouted       *prometheus.CounterVec // topic, partition
	duplicates      *prometheus.CounterVec // topic, partition
	redrivesSkipped *prometheus.CounterVec // topic, partition
	withoutID       *prometheus.CounterVec // topic, partition
	dedupeWindow    *prometheus.GaugeVec   // topic
	gapped          *prometheus.GaugeVec   // topic, partition
	busy            *prometheus.GaugeVec   // topic, partition
}

// newMetrics builds (but does not register) the collectors of a Worker of
// group.
func newMetrics(group string) *Metrics {
	m := &Metrics{held: make(map[int32]epochs.Token), owned: make(map[int32]epochs.Token)}
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
		"Claim attempts by outcome: ok, fenced (refused by the sink), error (failed and retried), takeover (accepted as a proven takeover from a holder of an earlier incarnation of the group).", "topic", "outcome")
	m.assigned = counter("workrouter_consumer_partitions_assigned_total",
		"Partitions assigned to this member.", "topic")
	m.revoked = counter("workrouter_consumer_partitions_revoked_total",
		"Partitions revoked from this member.", "topic")
	m.lost = counter("workrouter_consumer_partitions_lost_total",
		"Partitions lost by this member (session expired or fenced by the coordinator).", "topic")
	m.ownedGauge = gauge("workrouter_consumer_owned_partitions",
		"Partitions this member currently processes: claimed and not fenced.", "topic")
	m.tenureEpoch = gauge("workrouter_consumer_tenure_epoch",
		"Epoch of the tenure this member holds on the partition, set on claim; absent when the partition is not held.", "topic", "partition")
	m.retries = counter("workrouter_consumer_retries_total",
		"Failed Apply (kind=apply), Claim (kind=claim) or dead-letter (kind=dead-letter) attempts that are retried with backoff.", "topic", "partition", "kind")
	m.deadLetters = counter("workrouter_consumer_dead_letters_total",
		"Records the sink stored as dead letters, skipping them, by reason: undecodable, no_handler, permanent, handler_error.", "topic", "reason")
	m.logChanged = counter("workrouter_consumer_log_changed_total",
		"Claims refused because the log under the checkpoint changed, by case: topic_recreated, log_truncated, retention_loss.", "topic", "case")
	m.recordsLost = counter("workrouter_consumer_records_lost_total",
		"Records deleted (by retention or DeleteRecords) before they were applied, as refused claims found them.", "topic", "partition")
	m.stalled = gauge("workrouter_consumer_partition_stalled",
		"1 while an assigned partition makes no progress (a failing batch being retried, or a claim blocked until an operator acts), else 0; absent once the partition is revoked, lost or fenced.", "topic", "partition")
	m.stalledSince = gauge("workrouter_consumer_partition_stalled_since_timestamp_seconds",
		"When the partition's current stall began (Unix time); 0 while it runs; absent once the partition is revoked, lost or fenced.", "topic", "partition")
	m.sinkErrors = counter("workrouter_consumer_sink_errors_total",
		"Failed Apply attempts other than fenced ones: a handler's error (kind=effect) or the sink's (kind=sink).", "topic", "kind")
	m.lag = gauge("workrouter_consumer_lag",
		"Records between the partition's end offset and the next offset to apply, refreshed every Config.LagInterval.", "topic", "partition")
	m.misrouted = counter("workrouter_consumer_misrouted_total",
		"Records whose key maps to another partition than the one they arrived on under the worker's partitioner: a producer partitions keys differently.", "topic", "partition")
	m.duplicates = counter("workrouter_consumer_duplicates_skipped_total",
		"Records not applied because the sink had applied their command ID already in the partition's scope (a command that entered the log twice).", "topic", "partition")
	m.redrivesSkipped = counter("workrouter_consumer_redrives_skipped_total",
		"Records redriven from a dead letter for another consumer group, skipped without calling a handler.", "topic", "partition")
	m.withoutID = counter("workrouter_consumer_records_without_id_total",
		"Applied records that carried no command ID: applied once per offset, not deduplicated by ID.", "topic", "partition")
	m.dedupeWindow = gauge("workrouter_consumer_dedupe_window_offsets",
		"The sink's retention horizon of applied command IDs, in offsets of a partition (sink.Features.DedupeWindow); 0 if the sink does not deduplicate: records are applied once per offset only.", "topic")
	m.gapped = gauge("workrouter_consumer_gapped_spans",
		"Done spans above the watermark of the partition's checkpoint with gaps (Config.KeyConcurrency > 1): runs of records lanes applied ahead of a slower lane; absent without lanes and once the partition is revoked, lost or fenced.", "topic", "partition")
	m.busy = gauge("workrouter_consumer_lanes_busy",
		"Lanes of the partition applying a batch (Config.KeyConcurrency > 1); absent without lanes and once the partition is revoked, lost or fenced.", "topic", "partition")
	return m
}

// New registers the metrics of the Worker of group on reg and returns
// them, to put in that Worker's consumer.Config.Observers. It fails (the
// error matching consumer.ErrConfig) if they cannot be registered, for
// instance because the metrics of another Worker of group are registered
// on reg already: one registry holds one Worker's metrics per group. The
// Worker's Stopped event unregisters them; so does Unregister.
func New(reg prometheus.Registerer, group string) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: consumerprom: a nil Registerer", consumer.ErrConfig)
	}
	m := newMetrics(group)
	if err := m.set.Register(reg); err != nil {
		return nil, fmt.Errorf("%w: consumerprom: %w", consumer.ErrConfig, err)
	}
	return m, nil
}

// Unregister removes the metrics from the Registerer New registered them
// on. It is idempotent; the Worker's Stopped event calls it too.
func (m *Metrics) Unregister() {
	m.once.Do(m.set.Unregister)
}

// spansAt sets the done-span gauge of tok's partition to n, if tok is the
// tenure its gauges belong to.
func (m *Metrics) spansAt(tok epochs.Token, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[tok.Partition] == tok {
		m.gapped.WithLabelValues(tok.Topic, partLabel(tok.Partition)).Set(float64(n))
	}
}

// busyAt sets the busy-lanes gauge of tok's partition to n, if tok is the
// tenure its gauges belong to.
func (m *Metrics) busyAt(tok epochs.Token, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[tok.Partition] == tok {
		m.busy.WithLabelValues(tok.Topic, partLabel(tok.Partition)).Set(float64(n))
	}
}

// MetricNames returns the sorted names of the metrics New registers
// (histograms by their base name, without the _bucket,
// _sum and _count suffixes). They are checked by registering a fresh set on
// a new pedantic registry, so the list is the one a scrape can show.
func MetricNames() []string {
	m := newMetrics("")
	if err := m.set.Register(prometheus.NewPedanticRegistry()); err != nil {
		panic(err) // a bug in newMetrics
	}
	names := slices.Clone(m.set.Names())
	slices.Sort(names)
	return names
}

func partLabel(p int32) string { return strconv.FormatInt(int64(p), 10) }

// initTopic creates the topic's label combinations that are known up front
// at zero, so that rates and alerts see them before the first event.
func (m *Metrics) initTopic(topic string) {
	for _, o := range []string{outcomeOK, outcomeFenced, outcomeError, outcomeTakeover} {
		m.claims.WithLabelValues(topic, o)
	}
	m.assigned.WithLabelValues(topic)
	m.revoked.WithLabelValues(topic)
	m.lost.WithLabelValues(topic)
	m.ownedGauge.WithLabelValues(topic)
	for _, r := range consumer.Reasons() {
		m.deadLetters.WithLabelValues(topic, r)
	}
	for _, c := range []string{caseTopicRecreated, caseLogTruncated, caseRetentionLoss} {
		m.logChanged.WithLabelValues(topic, c)
	}
	m.sinkErrors.WithLabelValues(topic, consumer.CauseEffect)
	m.sinkErrors.WithLabelValues(topic, consumer.CauseSink)
}

// Observe updates the series for e. The Worker calls it from its
// goroutines.
func (m *Metrics) Observe(e consumer.Event) {
	switch e := e.(type) {
	case consumer.Started:
		m.initTopic(e.Topic)
		m.dedupeWindow.WithLabelValues(e.Topic).Set(float64(e.Features.DedupeWindow))
	case consumer.LanesBusy:
		m.busyAt(e.Token, e.Busy)
	case consumer.GapSpans:
		m.spansAt(e.Token, e.Spans)
	case consumer.Stopped:
		m.Unregister()
	case consumer.Assigned:
		pl := partLabel(e.Token.Partition)
		topic := e.Token.Topic
		m.assigned.WithLabelValues(topic).Inc()
		m.recordsApplied.WithLabelValues(topic, pl)
		m.batchesApplied.WithLabelValues(topic, pl)
		m.fenced.WithLabelValues(topic, pl, opClaim)
		m.fenced.WithLabelValues(topic, pl, opApply)
		m.retries.WithLabelValues(topic, pl, opApply)
		m.retries.WithLabelValues(topic, pl, opClaim)
		m.recordsLost.WithLabelValues(topic, pl)
		m.misrouted.WithLabelValues(topic, pl)
		m.duplicates.WithLabelValues(topic, pl)
		m.redrivesSkipped.WithLabelValues(topic, pl)
		m.withoutID.WithLabelValues(topic, pl)
		m.mu.Lock()
		if old, ok := m.held[e.Token.Partition]; ok && old != e.Token {
			m.deleteLocked(old) // a tenure replaced without a revoke
		}
		m.held[e.Token.Partition] = e.Token
		m.stalled.WithLabelValues(topic, pl).Set(0)
		m.stalledSince.WithLabelValues(topic, pl).Set(0)
		m.mu.Unlock()
	case consumer.Misrouted:
		m.misrouted.WithLabelValues(e.Token.Topic, partLabel(e.Token.Partition)).Inc()
	case consumer.Claimed:
		outcome := outcomeOK
		if e.TookOver != nil {
			outcome = outcomeTakeover
		}
		m.claims.WithLabelValues(e.Token.Topic, outcome).Inc()
		m.mu.Lock()
		if m.held[e.Token.Partition] == e.Token {
			m.runningLocked(e.Token)
			m.owned[e.Token.Partition] = e.Token
			m.tenureEpoch.WithLabelValues(e.Token.Topic, partLabel(e.Token.Partition)).Set(float64(e.Token.Epoch))
			m.setOwned(e.Token.Topic)
		}
		m.mu.Unlock()
	case consumer.Applied:
		m.running(e.Token)
		pl := partLabel(e.Token.Partition)
		m.batchesApplied.WithLabelValues(e.Token.Topic, pl).Inc()
		m.recordsApplied.WithLabelValues(e.Token.Topic, pl).Add(float64(e.Applied))
		if e.Duplicates > 0 {
			m.duplicates.WithLabelValues(e.Token.Topic, pl).Add(float64(e.Duplicates))
		}
		if e.OtherGroup > 0 {
			m.redrivesSkipped.WithLabelValues(e.Token.Topic, pl).Add(float64(e.OtherGroup))
		}
		if e.WithoutID > 0 {
			m.withoutID.WithLabelValues(e.Token.Topic, pl).Add(float64(e.WithoutID))
		}
		m.batchSize.Observe(float64(e.Records))
		m.applyDuration.Observe(e.Duration.Seconds())
	case consumer.Fenced:
		if e.Op == sink.OpClaim {
			m.claims.WithLabelValues(e.Token.Topic, outcomeFenced).Inc()
			m.fenced.WithLabelValues(e.Token.Topic, partLabel(e.Token.Partition), opClaim).Inc()
		} else {
			m.fenced.WithLabelValues(e.Token.Topic, partLabel(e.Token.Partition), opApply).Inc()
		}
		m.drop(e.Token)
	case consumer.Stalled:
		pl := partLabel(e.Token.Partition)
		m.stalledAt(e.Token, e.Since)
		m.retries.WithLabelValues(e.Token.Topic, pl, string(e.Op)).Inc()
		if e.Op == sink.OpClaim {
			m.claims.WithLabelValues(e.Token.Topic, outcomeError).Inc()
			return
		}
		if e.Op == sink.OpApply {
			m.applyDuration.Observe(e.Duration.Seconds())
		}
		m.sinkErrors.WithLabelValues(e.Token.Topic, e.Cause).Inc()
	case consumer.Blocked:
		m.stalledAt(e.Token, e.Since)
	case consumer.DeadLettered:
		m.deadLetters.WithLabelValues(e.Token.Topic, e.Reason).Inc()
		m.running(e.Token)
	case consumer.LogChanged:
		m.logChanged.WithLabelValues(e.Token.Topic, logCase(e.Err)).Inc()
		if n := e.NewlyLost; n > 0 {
			m.recordsLost.WithLabelValues(e.Token.Topic, partLabel(e.Token.Partition)).Add(float64(n))
		}
	case consumer.Revoked:
		m.revoked.WithLabelValues(e.Token.Topic).Inc()
		m.drop(e.Token)
	case consumer.Lost:
		m.lost.WithLabelValues(e.Token.Topic).Inc()
		m.drop(e.Token)
	case consumer.Lag:
		m.mu.Lock()
		for p, n := range e.Lag {
			if _, ok := m.owned[p]; ok {
				m.lag.WithLabelValues(e.Topic, partLabel(p)).Set(float64(n))
			}
		}
		m.mu.Unlock()
	}
}

// running records that tok's partition makes progress, if tok is the
// tenure its gauges belong to.
func (m *Metrics) running(tok epochs.Token) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[tok.Partition] == tok {
		m.runningLocked(tok)
	}
}

// runningLocked sets tok's partition's stall gauges to running; m.mu must
// be held.
func (m *Metrics) runningLocked(tok epochs.Token) {
	pl := partLabel(tok.Partition)
	m.stalled.WithLabelValues(tok.Topic, pl).Set(0)
	m.stalledSince.WithLabelValues(tok.Topic, pl).Set(0)
}

// stalledAt records that tok's partition makes no progress since since
// (a stall or a block), if tok is the tenure its gauges belong to.
func (m *Metrics) stalledAt(tok epochs.Token, since time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[tok.Partition] != tok {
		return
	}
	pl := partLabel(tok.Partition)
	m.stalled.WithLabelValues(tok.Topic, pl).Set(1)
	m.stalledSince.WithLabelValues(tok.Topic, pl).Set(float64(since.UnixNano()) / 1e9)
}

// Cases of workrouter_consumer_log_changed_total.
const (
	caseTopicRecreated = "topic_recreated"
	caseLogTruncated   = "log_truncated"
	caseRetentionLoss  = "retention_loss"
)

// logCase names the case of a log change for the metric.
func logCase(err *sink.LogChangedError) string {
	switch err.Case {
	case sink.ErrTopicRecreated:
		return caseTopicRecreated
	case sink.ErrLogTruncated:
		return caseLogTruncated
	}
	return caseRetentionLoss
}

// ObserveHandler times one handler call.
func (m *Metrics) ObserveHandler(_ epochs.Token, _ string, d time.Duration, _ error) {
	m.handlerDuration.Observe(d.Seconds())
}

// drop deletes the gauges of tok's partition (tenure epoch, lag, stalled
// and since) if tok is the tenure they belong to: this member no longer
// holds it, whichever way it went (revoked, lost or fenced; running,
// stalled, blocked or still claiming). The partition's counters stay:
// they are this member's history, and an increment made as the partition
// went (a fenced Apply) would be lost with them.
func (m *Metrics) drop(tok epochs.Token) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[tok.Partition] != tok && m.owned[tok.Partition] != tok {
		return
	}
	m.deleteLocked(tok)
}

// deleteLocked deletes the gauges of tok's partition and forgets the
// partition; m.mu must be held.
func (m *Metrics) deleteLocked(tok epochs.Token) {
	delete(m.held, tok.Partition)
	delete(m.owned, tok.Partition)
	pl := partLabel(tok.Partition)
	m.tenureEpoch.DeleteLabelValues(tok.Topic, pl)
	m.lag.DeleteLabelValues(tok.Topic, pl)
	m.stalled.DeleteLabelValues(tok.Topic, pl)
	m.stalledSince.DeleteLabelValues(tok.Topic, pl)
	m.gapped.DeleteLabelValues(tok.Topic, pl)
	m.busy.DeleteLabelValues(tok.Topic, pl)
	m.setOwned(tok.Topic)
}

// setOwned sets the owned-partitions gauge; m.mu must be held.
func (m *Metrics) setOwned(topic string) {
	m.ownedGauge.WithLabelValues(topic).Set(float64(len(m.owned)))
}
