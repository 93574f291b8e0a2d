// Package sinkmetrics instruments any fenced sink with Prometheus metrics,
// so that every backend (memory, SQLite, PostgreSQL, your own) reports the
// same series:
//
//   - workrouter_sink_operations_total{backend, op="claim"|"apply", outcome="ok"|"fenced"|"effect_error"|"error"}
//   - workrouter_sink_operation_duration_seconds{backend, op} (histogram)
//   - workrouter_sink_records_total{backend, outcome="applied"|"skipped"|"duplicate"}
//   - workrouter_sink_claim_gap_spans{backend} (histogram): the done spans
//     above the watermark each ClaimGapped returned (docs/design.md#gaps)
//
// The wrapper implements sink.Unwrapper: the optional capabilities of the
// sink it wraps (sink.Lister, sink.Resetter, sink.Historian, …) stay
// reachable through sink.As, which the conformance suite checks for every
// backend. sink.Deduplicator is the exception: a wrapper of a sink that
// has it implements it too, so that ApplyOnce, the apply a deduplicating
// worker makes, is measured (as op="apply", its duplicates as
// outcome="duplicate"); a wrapper of a sink without it does not.
// sink.GapApplier follows the same rule: a wrapper of a sink that has it
// implements it itself (ClaimGapped as op="claim", ApplyGapped as
// op="apply", DeadLetterGapped as op="dead_letter"), so that the lanes'
// calls are measured; the consumer uses a sink's own GapApplier, never
// one sink.As finds under a wrapper.
package sinkmetrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/promset"
	"github.com/workrouter/workrouter/sink"
)

// ErrConfig is matched by the error Wrap returns for a bad argument.
var ErrConfig = errors.New("sinkmetrics: invalid config")

type metrics struct {
	ops     *prometheus.CounterVec
	dur     *prometheus.HistogramVec
	records *prometheus.CounterVec
	spans   prometheus.Histogram
}

// Instrumented is a sink.Sink[Tx] that records metrics around every call of
// the sink it wraps. It is safe for concurrent use if the wrapped sink is.
type Instrumented[Tx any] struct {
	inner   sink.Sink[Tx]
	backend string
	m       *metrics
}

// Wrap registers the sink metrics on reg with the constant label backend
// and returns s instrumented. Registering twice for the same backend on one
// registry fails with an error matching ErrConfig.
func Wrap[Tx any](s sink.Sink[Tx], reg prometheus.Registerer, backend string) (sink.Sink[Tx], error) {
	if s == nil || reg == nil || backend == "" {
		return nil, fmt.Errorf("%w: need a sink, a registerer and a backend name", ErrConfig)
	}
	cl := prometheus.Labels{"backend": backend}
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workrouter_sink_operations_total",
			Help: "Sink claims and applies by outcome.", ConstLabels: cl}, []string{"op", "outcome"}),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workrouter_sink_operation_duration_seconds",
			Help: "Duration of one sink claim or apply (one atomic unit).", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15)}, []string{"op"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workrouter_sink_records_total",
			Help: "Records the sink applied, skipped as already applied (offset below the checkpoint), or did not run as duplicates (command ID already applied).", ConstLabels: cl}, []string{"outcome"}),
	}
	m.spans = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "workrouter_sink_claim_gap_spans",
		Help: "Done spans above the watermark that one ClaimGapped returned (the size of a gapped checkpoint a new owner resumes).", ConstLabels: cl,
		Buckets: []float64{0, 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536}})
	var set promset.Set
	set.Add("workrouter_sink_operations_total", m.ops)
	set.Add("workrouter_sink_operation_duration_seconds", m.dur)
	set.Add("workrouter_sink_records_total", m.records)
	set.Add("workrouter_sink_claim_gap_spans", m.spans)
	if err := set.Register(reg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for _, op := range []string{"claim", "apply", "dead_letter"} {
		for _, o := range []string{"ok", "fenced", "effect_error", "error"} {
			m.ops.WithLabelValues(op, o)
		}
	}
	for _, o := range []string{"applied", "skipped", "duplicate"} {
		m.records.WithLabelValues(o)
	}
	in := &Instrumented[Tx]{inner: s, backend: backend, m: m}
	// s itself, not a sink under it: ApplyOnce replaces Apply, so a
	// Deduplicator under a wrapper that lacks it would bypass that
	// wrapper's Apply (the consumer decides the same way).
	d, dok := s.(sink.Deduplicator[Tx])
	g, gok := s.(sink.GapApplier[Tx])
	switch {
	case dok && gok:
		return &DeduplicatingGapped[Tx]{Deduplicating: &Deduplicating[Tx]{Instrumented: in, once: d}, gapMetrics: gapMetrics[Tx]{gaps: g, m: m}}, nil
	case dok:
		return &Deduplicating[Tx]{Instrumented: in, once: d}, nil
	case gok:
		return &Gapped[Tx]{Instrumented: in, gapMetrics: gapMetrics[Tx]{gaps: g, m: m}}, nil
	}
	return in, nil
}

// Gapped is what Wrap returns for a sink that is a sink.GapApplier
// itself but no sink.Deduplicator: an *Instrumented that also implements
// sink.GapApplier[Tx], recording its calls. It is safe for concurrent use
// if the wrapped sink is.
type Gapped[Tx any] struct {
	*Instrumented[Tx]
	gapMetrics[Tx]
}

// DeduplicatingGapped is what Wrap returns for a sink that is both a
// sink.Deduplicator and a sink.GapApplier itself (every backend of this
// module): a *Deduplicating that also implements sink.GapApplier[Tx]. It
// is safe for concurrent use if the wrapped sink is.
type DeduplicatingGapped[Tx any] struct {
	*Deduplicating[Tx]
	gapMetrics[Tx]
}

// gapMetrics implements sink.GapApplier for the wrappers, recording each
// call.
type gapMetrics[Tx any] struct {
	gaps sink.GapApplier[Tx]
	m    *metrics
}

// ClaimGapped calls the wrapped sink's ClaimGapped and records it as
// op="claim", and the number of done spans it returned. It may be called
// from any goroutine.
func (g gapMetrics[Tx]) ClaimGapped(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	start := time.Now()
	cp, err := g.gaps.ClaimGapped(ctx, tok, obs)
	g.m.dur.WithLabelValues("claim").Observe(time.Since(start).Seconds())
	g.m.ops.WithLabelValues("claim", outcome(err)).Inc()
	if err == nil {
		g.m.spans.Observe(float64(len(cp.Done)))
	}
	return cp, err
}

// ApplyGapped calls the wrapped sink's ApplyGapped and records it as
// op="apply", with its applied, skipped and duplicate records. It may be
// called from any goroutine.
func (g gapMetrics[Tx]) ApplyGapped(ctx context.Context, tok epochs.Token, b sink.GapBatch, effect sink.Effect[Tx]) (sink.ApplyOnceResult, error) {
	start := time.Now()
	res, err := g.gaps.ApplyGapped(ctx, tok, b, effect)
	g.m.dur.WithLabelValues("apply").Observe(time.Since(start).Seconds())
	g.m.ops.WithLabelValues("apply", outcome(err)).Inc()
	if err == nil {
		g.m.records.WithLabelValues("applied").Add(float64(res.Applied))
		g.m.records.WithLabelValues("skipped").Add(float64(res.Skipped))
		g.m.records.WithLabelValues("duplicate").Add(float64(len(res.Duplicates)))
	}
	return res, err
}

// DeadLetterGapped calls the wrapped sink's DeadLetterGapped and records
// it as op="dead_letter". It may be called from any goroutine.
func (g gapMetrics[Tx]) DeadLetterGapped(ctx context.Context, tok epochs.Token, from int64, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	start := time.Now()
	res, err := g.gaps.DeadLetterGapped(ctx, tok, from, rec)
	g.m.dur.WithLabelValues("dead_letter").Observe(time.Since(start).Seconds())
	g.m.ops.WithLabelValues("dead_letter", outcome(err)).Inc()
	return res, err
}

// Deduplicating is what Wrap returns for a sink that is a
// sink.Deduplicator itself (not one found under a wrapper that lacks
// it): an *Instrumented that also implements
// sink.Deduplicator[Tx], recording ApplyOnce like Apply. It is safe for
// concurrent use if the wrapped sink is.
type Deduplicating[Tx any] struct {
	*Instrumented[Tx]
	once sink.Deduplicator[Tx]
}

// ApplyOnce calls the wrapped sink's ApplyOnce and records it: op="apply",
// its applied, skipped and duplicate records. It may be called from any
// goroutine.
func (s *Deduplicating[Tx]) ApplyOnce(ctx context.Context, tok epochs.Token, offsets []int64, ids []string, effect sink.Effect[Tx]) (sink.ApplyOnceResult, error) {
	start := time.Now()
	res, err := s.once.ApplyOnce(ctx, tok, offsets, ids, effect)
	s.m.dur.WithLabelValues("apply").Observe(time.Since(start).Seconds())
	s.m.ops.WithLabelValues("apply", outcome(err)).Inc()
	if err == nil {
		s.m.records.WithLabelValues("applied").Add(float64(res.Applied))
		s.m.records.WithLabelValues("skipped").Add(float64(res.Skipped))
		s.m.records.WithLabelValues("duplicate").Add(float64(len(res.Duplicates)))
	}
	return res, err
}

// DedupeWindow returns the wrapped sink's window. It may be called from
// any goroutine.
func (s *Deduplicating[Tx]) DedupeWindow() int64 { return s.once.DedupeWindow() }

// Unwrap returns the instrumented sink, so that sink.As finds its optional
// capabilities. It may be called from any goroutine.
func (s *Instrumented[Tx]) Unwrap() sink.Sink[Tx] { return s.inner }

func outcome(err error) string {
	var ee *sink.EffectError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, sink.ErrFenced):
		return "fenced"
	case errors.As(err, &ee):
		return "effect_error"
	}
	return "error"
}

// Claim calls the wrapped sink's Claim and records it.
func (s *Instrumented[Tx]) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (int64, error) {
	start := time.Now()
	next, err := s.inner.Claim(ctx, tok, obs)
	s.m.dur.WithLabelValues("claim").Observe(time.Since(start).Seconds())
	s.m.ops.WithLabelValues("claim", outcome(err)).Inc()
	return next, err
}

// Apply calls the wrapped sink's Apply and records it.
func (s *Instrumented[Tx]) Apply(ctx context.Context, tok epochs.Token, offsets []int64, effect sink.Effect[Tx]) (sink.ApplyResult, error) {
	start := time.Now()
	res, err := s.inner.Apply(ctx, tok, offsets, effect)
	s.m.dur.WithLabelValues("apply").Observe(time.Since(start).Seconds())
	s.m.ops.WithLabelValues("apply", outcome(err)).Inc()
	if err == nil {
		s.m.records.WithLabelValues("applied").Add(float64(res.Applied))
		s.m.records.WithLabelValues("skipped").Add(float64(res.Skipped))
	}
	return res, err
}
