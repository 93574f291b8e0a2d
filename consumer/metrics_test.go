package consumer_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/consumerprom"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/router/routerprom"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// series returns the value of the counter or gauge name whose labels
// include want, and whether it exists.
func series(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			return metricValue(m), true
		}
	}
	return 0, false
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// sumOf sums every series of the counter or gauge name.
func sumOf(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += metricValue(m)
			}
		}
	}
	return sum
}

// TestMetricsZombie is TestZombieApplyFenced seen through each worker's
// registry: the zombie's rejected Apply is counted as a fenced apply on the
// old owner, whose tenure epoch series disappears, while the new owner
// shows the epoch it claimed at.
func TestMetricsZombie(t *testing.T) {
	t.Parallel()
	aReg, bReg := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	z := setupZombieRegs(t, nil, aReg, bReg)
	aTok := z.a.Owned()[0]
	part := map[string]string{"group": z.c.group, "topic": z.c.topic, "partition": strconv.Itoa(int(aTok.Partition))}

	if v, ok := series(t, aReg, "workrouter_consumer_tenure_epoch", part); !ok || v != float64(aTok.Epoch) {
		t.Fatalf("a's tenure_epoch = %v (present %v), want %d", v, ok, aTok.Epoch)
	}
	testwait.For(t, 60*time.Second, "b to apply every command", func() bool {
		return appliedCount(z.s, z.keys) == len(z.keys)*z.perKey
	})
	bMember, _ := z.b.Member()
	bTok, ok := claimedBy(z.s, bMember)
	if !ok || bTok.Epoch <= aTok.Epoch {
		t.Fatalf("b's claim %v is not newer than a's tenure %v", bTok, aTok)
	}
	fencedApply := map[string]string{"topic": z.c.topic, "partition": part["partition"], "op": "apply"}
	before, _ := series(t, aReg, "workrouter_consumer_fenced_total", fencedApply)

	z.aGate.open() // the zombie's late Apply
	select {
	case err := <-z.aFenced:
		if !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("a: %v, want ErrFenced", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a's late Apply was not rejected")
	}
	// The rejection reaches aFenced from inside the sink call; the worker
	// counts the fenced outcome (and drops the series) after it returns.
	testwait.For(t, 10*time.Second, "a to count its fenced Apply", func() bool {
		after, _ := series(t, aReg, "workrouter_consumer_fenced_total", fencedApply)
		return after > before
	})
	testwait.For(t, 10*time.Second, "a to drop the partition's series after its Apply was fenced", func() bool {
		return len(heldSeries(t, aReg, aTok.Partition)) == 0
	})
	if got := heldSeries(t, aReg, aTok.Partition); len(got) != 0 {
		t.Errorf("a still exports %v for the partition after its Apply was fenced", got)
	}
	if v, _ := series(t, aReg, "workrouter_consumer_owned_partitions", nil); v != 0 {
		t.Errorf("a's owned_partitions = %v, want 0", v)
	}
	if v, ok := series(t, bReg, "workrouter_consumer_tenure_epoch", part); !ok || v != float64(bTok.Epoch) {
		t.Errorf("b's tenure_epoch = %v (present %v), want its claim epoch %d", v, ok, bTok.Epoch)
	}
	if v, _ := series(t, bReg, "workrouter_consumer_owned_partitions", nil); v != 1 {
		t.Errorf("b's owned_partitions = %v, want 1", v)
	}
	applied := sumOf(t, aReg, "workrouter_consumer_records_applied_total") + sumOf(t, bReg, "workrouter_consumer_records_applied_total")
	if want := appliedCount(z.s, z.keys); applied != float64(want) {
		t.Errorf("records_applied_total sums to %v over both workers, the sink holds %d effects", applied, want)
	}
	if st := z.a.Stats(); st.FencedApplies == 0 {
		t.Errorf("Stats not kept: %+v", st)
	}
	z.stopHole()
	checkInvariants(t, z.s, z.keys, z.perKey)
}

// TestMetricsLint runs a router and a worker on one registry, sends
// traffic, and lints everything gathered; every metric either package
// lists must be exported, and nothing else.
func TestMetricsLint(t *testing.T) {
	t.Parallel()
	const partitions = 2
	c := newCluster(t, partitions)
	reg := prometheus.NewPedanticRegistry()
	s := memory.New()
	w := startWorker(t, c, s, workerOpts{name: "lint", registerer: reg, lagInterval: 20 * time.Millisecond})
	testwait.For(t, 30*time.Second, "the worker to own the partitions", func() bool { return len(w.Owned()) == partitions && w.Ready() })

	ctx := context.Background()
	rm, err := routerprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(ctx, router.Config{Brokers: c.ListenAddrs(), Topic: c.topic, Observers: []router.Observer{rm}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := routerprom.New(reg); !errors.Is(err, router.ErrConfig) {
		t.Fatalf("second router's metrics on one registry: %v, want ErrConfig", err)
	}
	keys := makeKeys(10)
	for _, k := range keys {
		if _, err := r.Send(ctx, router.Command{Key: []byte(k), Type: "append", Payload: []byte("0")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Send(ctx, router.Command{Type: "append"}); !errors.Is(err, envelope.ErrEmptyKey) {
		t.Fatalf("send without key: %v", err)
	}
	testwait.For(t, 30*time.Second, "every command applied", func() bool { return appliedCount(s, keys) == len(keys) })
	testwait.For(t, 30*time.Second, "lag to reach zero on every partition", func() bool {
		for p := range partitions {
			if v, ok := series(t, reg, "workrouter_consumer_lag", map[string]string{"partition": strconv.Itoa(p)}); !ok || v != 0 {
				return false
			}
		}
		return true
	})
	if v, _ := series(t, reg, "workrouter_router_sends_total", map[string]string{"outcome": "ok"}); v != float64(len(keys)) {
		t.Errorf("sends_total{outcome=ok} = %v, want %d", v, len(keys))
	}
	if v, _ := series(t, reg, "workrouter_router_sends_total", map[string]string{"outcome": "error"}); v != 1 {
		t.Errorf("sends_total{outcome=error} = %v, want 1", v)
	}
	// The counter moves right after the sink's Apply returns, so a
	// command can be visible in the sink a moment before it is counted.
	testwait.For(t, 30*time.Second, "records_applied_total to count every command", func() bool {
		return sumOf(t, reg, "workrouter_consumer_records_applied_total") >= float64(len(keys))
	})
	if n := sumOf(t, reg, "workrouter_consumer_records_applied_total"); n != float64(len(keys)) {
		t.Errorf("records_applied_total = %v, want %d", n, len(keys))
	}
	if n := testutil.CollectAndCount(reg, "workrouter_consumer_tenure_epoch"); n != partitions {
		t.Errorf("%d tenure_epoch series, want %d", n, partitions)
	}
	for _, reason := range consumer.Reasons() { // alerts on rate() need each series before its first increment
		if v, ok := series(t, reg, "workrouter_consumer_dead_letters_total", map[string]string{"reason": reason}); !ok || v != 0 {
			t.Errorf("dead_letters_total{reason=%q} = %v (exported %v), want a series at 0", reason, v, ok)
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	var gathered []string
	for _, mf := range mfs {
		gathered = append(gathered, mf.GetName())
	}
	want := append(consumerprom.MetricNames(), routerprom.MetricNames()...)
	// A worker without lanes (KeyConcurrency 1) has no series of the
	// lanes' gauges (TestKeyConcurrencyMetrics has them).
	want = slices.DeleteFunc(want, func(n string) bool {
		return n == "workrouter_consumer_gapped_spans" || n == "workrouter_consumer_lanes_busy"
	})
	slices.Sort(want)
	if !slices.Equal(gathered, want) {
		t.Errorf("gathered families %v\nwant (MetricNames) %v", gathered, want)
	}
	for _, name := range want {
		if !strings.HasPrefix(name, "workrouter_") {
			t.Errorf("metric %q lacks the workrouter_ prefix", name)
		}
	}

	// One registry holds one worker's metrics per group.
	if _, err = consumerprom.New(reg, c.group); !errors.Is(err, consumer.ErrConfig) {
		t.Fatalf("second worker of the group on one registry: %v, want ErrConfig", err)
	}

	// Close deletes the partitions' series and unregisters the metrics.
	w.Close()
	if n := testutil.CollectAndCount(reg, "workrouter_consumer_tenure_epoch", "workrouter_consumer_lag"); n != 0 {
		t.Errorf("%d tenure_epoch/lag series after Close", n)
	}
	if w.Ready() {
		t.Error("Ready after Close")
	}
}
