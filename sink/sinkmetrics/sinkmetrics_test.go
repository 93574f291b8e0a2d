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
	})
}

func TestCountsOutcomesAndKeepsCapabilities(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := sinkmetrics.Wrap[*memory.Tx](memory.New(), reg, "memory")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sink.As[sink.Lister](s); !ok {
		t.Fatal("the wrapper hid sink.Lister")
	}
	if _, ok := sink.As[sink.Resetter](s); !ok {
		t.Fatal("the wrapper hid sink.Resetter")
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
	if _, err := s.Apply(ctx, old, []int64{0, 1}, noop); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("stale apply: %v", err)
	}
	if _, err := s.Apply(ctx, next, []int64{0, 1, 2}, noop); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, next, []int64{2, 3}, noop); err != nil {
		t.Fatal(err)
	}
	// ApplyOnce is measured too: offset 4 applies "a", offset 5 is a
	// duplicate of it, offset 3 a replay.
	d, ok := s.(sink.Deduplicator[*memory.Tx])
	if !ok {
		t.Fatalf("the wrapper %T of a deduplicating sink does not implement sink.Deduplicator itself", s)
	}
	if res, err := d.ApplyOnce(ctx, next, []int64{3, 4, 5}, []string{"z", "a", "a"}, noop); err != nil || len(res.Duplicates) != 1 {
		t.Fatalf("ApplyOnce = %+v, %v", res, err)
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

// unwrapsOnly wraps a sink and unwraps to it without implementing
// sink.Deduplicator, as a tracing or fault wrapper might.
type unwrapsOnly struct{ sink.Sink[*memory.Tx] }

func (u unwrapsOnly) Unwrap() sink.Sink[*memory.Tx] { return u.Sink }

// TestNoDeduplicatorFromUnderAWrapper: Wrap of a wrapper that lacks
// ApplyOnce is no Deduplicator either, though sink.As finds one under it:
// its ApplyOnce would bypass the inner wrapper's Apply. Red with sink.As in
// Wrap.
func TestNoDeduplicatorFromUnderAWrapper(t *testing.T) {
	s, err := sinkmetrics.Wrap[*memory.Tx](unwrapsOnly{memory.New()}, prometheus.NewRegistry(), "memory")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(sink.Deduplicator[*memory.Tx]); ok {
		t.Fatalf("Wrap of a wrapper without ApplyOnce returned a Deduplicator (%T)", s)
	}
}
