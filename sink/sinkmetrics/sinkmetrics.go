// Package sinkmetrics instruments any fenced sink with Prometheus metrics,
// so that every backend (memory, SQLite, PostgreSQL, your own) reports the
// same series:
//
//   - workrouter_sink_operations_total{backend, op="claim"|"apply"|"dead_letter", outcome="ok"|"fenced"|"effect_error"|"error"}
//   - workrouter_sink_operation_duration_seconds{backend, op} (histogram)
//   - workrouter_sink_records_total{backend, outcome="applied"|"skipped"|"duplicate"}
//   - workrouter_sink_claim_gap_spans{backend} (histogram): the done spans
//     above the watermark each Claim returned (docs/design.md#gaps)
//
// The wrapper measures the sink's three writes (Claim, Apply, DeadLetter:
// serial or a lane's, with or without command IDs) and declares the
// features of the sink it wraps. It implements sink.Unwrapper: the
// optional capabilities beside the write of the sink it wraps
// (fenceadmin.Lister, fenceadmin.Resetter, fenceadmin.Historian, …) stay reachable through
// sink.As, which the conformance suite checks for every backend.
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
			Help: "Sink claims, applies and dead letters by outcome.", ConstLabels: cl}, []string{"op", "outcome"}),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workrouter_sink_operation_duration_seconds",
			Help: "Duration of one sink claim, apply or dead letter (one atomic unit).", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15)}, []string{"op"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workrouter_sink_records_total",
			Help: "Records the sink applied, skipped as already applied (offset below the checkpoint), or did not run as duplicates (command ID already applied).", ConstLabels: cl}, []string{"outcome"}),
	}
	m.spans = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "workrouter_sink_claim_gap_spans",
		Help: "Done spans above the watermark that one Claim returned (the size of a gapped checkpoint a new owner resumes).", ConstLabels: cl,
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
	return &Instrumented[Tx]{inner: s, backend: backend, m: m}, nil
}

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

// Features returns the wrapped sink's features. It may be called from any
// goroutine.
func (s *Instrumented[Tx]) Features() sink.Features { return s.inner.Features() }

// Claim calls the wrapped sink's Claim and records it as op="claim", and
// the number of done spans it returned. It may be called from any
// goroutine.
func (s *Instrumented[Tx]) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	start := time.Now()
	cp, err := s.inner.Claim(ctx, tok, obs)
	s.m.dur.WithLabelValues("claim").Observe(time.Since(start).Seconds())
	s.m.ops.WithLabelValues("claim", outcome(err)).Inc()
	if err == nil {
		s.m.spans.Observe(float64(len(cp.Done)))
	}
	return cp, err
}

// Apply calls the wrapped sink's Apply and records it as op="apply", with
// its applied, skipped and duplicate records. It may be called from any
// goroutine.
func (s *Instrumented[Tx]) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[Tx]) (sink.Result, error) {
	start := time.Now()
	res, err := s.inner.Apply(ctx, tok, b, effect)
	s.m.dur.WithLabelValues("apply").Observe(time.Since(start).Seconds())
	s.m.ops.WithLabelValues("apply", outcome(err)).Inc()
	if err == nil {
		s.m.records.WithLabelValues("applied").Add(float64(res.Applied))
		s.m.records.WithLabelValues("skipped").Add(float64(res.Skipped))
		s.m.records.WithLabelValues("duplicate").Add(float64(len(res.Duplicates)))
	}
	return res, err
}

// DeadLetter calls the wrapped sink's DeadLetter and records it as
// op="dead_letter". It may be called from any goroutine.
func (s *Instrumented[Tx]) DeadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	start := time.Now()
	res, err := s.inner.DeadLetter(ctx, tok, rec)
	s.m.dur.WithLabelValues("dead_letter").Observe(time.Since(start).Seconds())
	s.m.ops.WithLabelValues("dead_letter", outcome(err)).Inc()
	return res, err
}
