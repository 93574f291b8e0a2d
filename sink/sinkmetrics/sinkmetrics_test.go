package sinkmetrics_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/memory"
	"github.com/workrouter/workrouter/sink/sinkmetrics"
	"github.com/workrouter/workrouter/sink/sinktest"
)

// The instrumented sink still passes the conformance suite.
func TestConformance(t *testing.T) {
	var inner sync.Map // wrapped sink -> *memory.Sink
	sinktest.Run(t, sinktest.Harness[*memory.Tx]{
		Open: func(t testing.TB) sink.Sink[*memory.Tx] {
			m := memory.New()
			s, err := sinkmetrics.Wrap[*memory.Tx](m, prometheus.NewRegistry(), "memory")
			if err != nil {
				t.Fatal(err)
			}
			inner.Store(s, m)
			return s
		},
		Put: func(_ context.Context, tx *memory.Tx, k, v string) error { tx.Put(k, []byte(v)); return nil },
		Get: func(_ context.Context, s sink.Sink[*memory.Tx], k string) (string, bool, error) {
			m, ok := inner.Load(s)
			if !ok {
				return "", false, errors.New("unknown sink")
			}
			v, found := m.(*memory.Sink).Get(k)
			return string(v), found, nil
		},
		RequireGaps: true,
	})
}

func TestCountsOutcomesAndKeepsCapabilities(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := sinkmetrics.Wrap[*memory.Tx](memory.New(), reg, "memory")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sink.As[fenceadmin.Lister](s); !ok {
		t.Fatal("the wrapper hid fenceadmin.Lister")
	}
	if _, ok := sink.As[fenceadmin.Resetter](s); !ok {
		t.Fatal("the wrapper hid fenceadmin.Resetter")
	}
	ctx := context.Background()
	old := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "a"}
	next := old
	next.Epoch, next.Member = 2, "b"
	noop := func(context.Context, *memory.Tx, int) error { return nil }
	if _, err := s.Claim(ctx, old, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, next, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, old, sink.Batch{Offsets: []int64{0, 1}}, noop); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("stale apply: %v", err)
	}
	if _, err := s.Apply(ctx, next, sink.Batch{Offsets: []int64{0, 1, 2}}, noop); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, next, sink.Batch{Offsets: []int64{2, 3}}, noop); err != nil {
		t.Fatal(err)
	}
	// A batch with IDs is measured too: offset 4 applies "a", offset 5 is
	// a duplicate of it, offset 3 a replay.
	if res, err := s.Apply(ctx, next, sink.Batch{Offsets: []int64{3, 4, 5}, IDs: []string{"z", "a", "a"}}, noop); err != nil || len(res.Duplicates) != 1 {
		t.Fatalf("an Apply with IDs = %+v, %v", res, err)
	}
	expected := `
# HELP workrouter_sink_records_total Records the sink applied, skipped as already applied (offset below the checkpoint), or did not run as duplicates (command ID already applied).
# TYPE workrouter_sink_records_total counter
workrouter_sink_records_total{backend="memory",outcome="applied"} 5
workrouter_sink_records_total{backend="memory",outcome="duplicate"} 1
workrouter_sink_records_total{backend="memory",outcome="skipped"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "workrouter_sink_records_total"); err != nil {
		t.Fatal(err)
	}
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, mf := range got {
		if mf.GetName() != "workrouter_sink_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			values[key] = m.GetCounter().GetValue()
		}
	}
	if values["backend=memory,op=apply,outcome=fenced,"] != 1 || values["backend=memory,op=apply,outcome=ok,"] != 3 || values["backend=memory,op=claim,outcome=ok,"] != 2 {
		t.Fatalf("operations: %v", values)
	}
	problems, err := promlint.NewWithMetricFamilies(got).Lint()
	if err != nil || len(problems) != 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
	if _, err := sinkmetrics.Wrap[*memory.Tx](memory.New(), reg, "memory"); !errors.Is(err, sinkmetrics.ErrConfig) {
		t.Fatalf("second registration: %v", err)
	}
}

// noDedupe is a sink that declares no dedupe window, over one that has
// one, as a wrapper that turns deduplication off might.
type noDedupe struct{ sink.Sink[*memory.Tx] }

func (n noDedupe) Features() sink.Features {
	f := n.Sink.Features()
	f.DedupeWindow = 0
	return f
}

func (n noDedupe) Unwrap() sink.Sink[*memory.Tx] { return n.Sink }

// TestFeaturesOfTheWrapped: the wrapper declares the features of the sink
// it wraps, not of one under it.
func TestFeaturesOfTheWrapped(t *testing.T) {
	s, err := sinkmetrics.Wrap[*memory.Tx](noDedupe{memory.New()}, prometheus.NewRegistry(), "memory")
	if err != nil {
		t.Fatal(err)
	}
	if f := s.Features(); f.DedupeWindow != 0 || !f.Gaps || !f.DeadLetters {
		t.Fatalf("features of the wrapper = %+v, want the wrapped sink's: no dedupe window, gaps and dead letters", f)
	}
}

// TestEveryWriteMeasured: every write through the wrapper is counted: a
// lane's Apply as op="apply" with its records, a lane's and a serial
// DeadLetter as op="dead_letter", and the spans every Claim returned.
func TestEveryWriteMeasured(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := sinkmetrics.Wrap[*memory.Tx](memory.New(), reg, "memory")
	if err != nil {
		t.Fatal(err)
	}
	g := s
	ctx := t.Context()
	a := epochs.Token{Group: "g", Topic: "t", Epoch: 1, Member: "a"}
	if _, err := g.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	nop := func(context.Context, *memory.Tx, int) error { return nil }
	if _, err := g.Apply(ctx, a, sink.Batch{Offsets: []int64{2, 4}, From: []int64{2, 4}, IDs: []string{"x", "x"}}, nop); err != nil {
		t.Fatal(err)
	}
	if _, err := g.DeadLetter(ctx, a, sink.DeadRecord{Offset: 6, Reason: "poison"}.InLane(6)); err != nil {
		t.Fatal(err)
	}
	if cp, err := g.Claim(ctx, a, sink.Observed{}); err != nil || len(cp.Done) != 3 {
		t.Fatalf("Claim = %+v, %v; want 3 spans", cp, err)
	}
	other := epochs.Token{Group: "g", Topic: "t", Partition: 1, Epoch: 1, Member: "a"}
	if _, err := g.Claim(ctx, other, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.DeadLetter(ctx, other, sink.DeadRecord{Offset: 0, Reason: "poison"}); err != nil {
		t.Fatal(err)
	}
	expected := `
# HELP workrouter_sink_records_total Records the sink applied, skipped as already applied (offset below the checkpoint), or did not run as duplicates (command ID already applied).
# TYPE workrouter_sink_records_total counter
workrouter_sink_records_total{backend="memory",outcome="applied"} 1
workrouter_sink_records_total{backend="memory",outcome="duplicate"} 1
workrouter_sink_records_total{backend="memory",outcome="skipped"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "workrouter_sink_records_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "workrouter_sink_claim_gap_spans"); n != 1 {
		t.Fatalf("workrouter_sink_claim_gap_spans: %d series", n)
	}
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range got {
		switch mf.GetName() {
		case "workrouter_sink_claim_gap_spans":
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 3 || h.GetSampleSum() != 3 {
				t.Fatalf("claim gap spans: %d claims, %v spans; want 3 claims, 3 spans", h.GetSampleCount(), h.GetSampleSum())
			}
		case "workrouter_sink_operations_total":
			for _, m := range mf.GetMetric() {
				var op, oc string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "op":
						op = l.GetValue()
					case "outcome":
						oc = l.GetValue()
					}
				}
				want := map[string]float64{"claim/ok": 3, "apply/ok": 1, "dead_letter/ok": 2}[op+"/"+oc]
				if m.GetCounter().GetValue() != want {
					t.Errorf("operations{op=%s,outcome=%s} = %v, want %v", op, oc, m.GetCounter().GetValue(), want)
				}
			}
		}
	}
}
