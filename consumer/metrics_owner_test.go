package consumer_test

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// partitionGauges are the series a Worker exports for a partition while it
// holds it; none may outlive its ownership.
var partitionGauges = []string{
	"workrouter_consumer_partition_stalled",
	"workrouter_consumer_partition_stalled_since_timestamp_seconds",
	"workrouter_consumer_tenure_epoch",
	"workrouter_consumer_lag",
}

// heldSeries returns the partition gauges reg exports for partition p.
func heldSeries(t *testing.T, reg prometheus.Gatherer, p int32) []string {
	t.Helper()
	var out []string
	for _, name := range partitionGauges {
		if v, ok := series(t, reg, name, map[string]string{"partition": strconv.Itoa(int(p))}); ok {
			out = append(out, name+"="+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	return out
}

// TestMetricsBlockedThenRevoked: a worker's two partitions are blocked
// (stalled = 1); a second worker joins and one of them is revoked. The
// revoked partition's series are gone from the first worker's registry,
// the kept one still shows its block.
func TestMetricsBlockedThenRevoked(t *testing.T) {
	t.Parallel()
	const partitions = 2
	c := newCluster(t, partitions)
	s := memory.New()
	regressAll(t, c, s, partitions)
	reg := prometheus.NewPedanticRegistry()
	rec := &events{}
	a := startWorker(t, c, s, workerOpts{noTakeover: true, name: "a", registerer: reg, reclaimInterval: 50 * time.Millisecond, observers: []consumer.Observer{rec}})
	testwait.For(t, 30*time.Second, "a's partitions blocked", func() bool { return blockedBy(a.Partitions(), partitions) })
	for p := range int32(partitions) {
		testwait.For(t, 30*time.Second, "stalled = 1 for a blocked partition", func() bool {
			v, ok := series(t, reg, "workrouter_consumer_partition_stalled", map[string]string{"partition": strconv.Itoa(int(p))})
			return ok && v == 1
		})
	}

	b := startWorker(t, c, s, workerOpts{noTakeover: true, name: "b", reclaimInterval: 50 * time.Millisecond})
	testwait.For(t, 30*time.Second, "b to be assigned a partition", func() bool { return len(b.Partitions()) == 1 })
	testwait.For(t, 30*time.Second, "a to keep one partition", func() bool { return len(a.Partitions()) == 1 })
	revoked := rec.find(func(e consumer.Event) bool { _, ok := e.(consumer.Revoked); return ok })
	if len(revoked) != 1 {
		t.Fatalf("revoked events %v, want one", revoked)
	}
	gone := revoked[0].(consumer.Revoked).Token.Partition
	kept := a.Partitions()[0].Token.Partition
	if got := heldSeries(t, reg, gone); len(got) != 0 {
		t.Errorf("a still exports %v for partition %d, revoked while blocked", got, gone)
	}
	if v, ok := series(t, reg, "workrouter_consumer_partition_stalled", map[string]string{"partition": strconv.Itoa(int(kept))}); !ok || v != 1 {
		t.Errorf("a's kept partition %d: stalled = %v (present %v), want 1", kept, v, ok)
	}
	if n := testutil.CollectAndCount(reg, "workrouter_consumer_partition_stalled"); n != 1 {
		t.Errorf("%d stalled series in a's registry, want 1 (the kept partition)", n)
	}
}

// TestMetricsBlockedThenLost: a worker's blocked partition is lost (the
// worker is evicted while another member waits) and goes to the other
// member. The worker rejoins with nothing; its registry shows no series of
// the partition, though stalled was 1 when it lost it.
func TestMetricsBlockedThenLost(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1)
	s := memory.New()
	regressAll(t, c, s, 1)
	reg := prometheus.NewPedanticRegistry()
	rec := &events{}
	a := startWorker(t, c, s, workerOpts{noTakeover: true, name: "a", registerer: reg, reclaimInterval: 50 * time.Millisecond, observers: []consumer.Observer{rec}})
	testwait.For(t, 30*time.Second, "a's partition blocked", func() bool { return blockedBy(a.Partitions(), 1) })
	b := startWorker(t, c, s, workerOpts{noTakeover: true, name: "b", reclaimInterval: 50 * time.Millisecond})
	testwait.For(t, 30*time.Second, "b in the group", func() bool { m, _ := b.Member(); return m != "" })
	if v, ok := series(t, reg, "workrouter_consumer_partition_stalled", map[string]string{"partition": "0"}); !ok || v != 1 {
		t.Fatalf("a's blocked partition: stalled = %v (present %v), want 1", v, ok)
	}
	old, _ := a.Member()
	evict(t, c, old, func() bool { return blockedBy(b.Partitions(), 1) })
	testwait.For(t, 30*time.Second, "a to rejoin with nothing", func() bool {
		m, _ := a.Member()
		return m != old && m != "" && len(a.Partitions()) == 0
	})
	if lost := rec.find(func(e consumer.Event) bool { l, ok := e.(consumer.Lost); return ok && l.Token.Member == old }); len(lost) != 1 {
		t.Fatalf("lost events %v, want one for a's blocked tenure", lost)
	}
	if got := heldSeries(t, reg, 0); len(got) != 0 {
		t.Errorf("a still exports %v for partition 0, lost while blocked", got)
	}
}

// TestMetricsFencedClaim: a worker's claim is held until another member
// has claimed the partition at a newer epoch; then it is fenced. The
// worker shows no series of the partition any more (the fence is counted
// in fenced_total, which stays).
func TestMetricsFencedClaim(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1)
	s := memory.New()
	reg := prometheus.NewPedanticRegistry()
	var first atomic.Pointer[epochs.Token]
	h := newHeldClaims(s, false, func(tok epochs.Token, _ int) bool {
		return first.CompareAndSwap(nil, &tok) // a's first claim, the first of all
	})
	rec := &events{}
	// a's look at the group after its fenced claim waits behind its held
	// heartbeat (one connection) until it times out, and the claim is
	// reported fenced: a short timeout spares the test 5 s.
	startWorker(t, c, s, workerOpts{name: "a", sink: h, registerer: reg, observers: []consumer.Observer{rec},
		diagnoseTimeout: 200 * time.Millisecond})
	t.Cleanup(h.open) // before a's Close
	var aTok epochs.Token
	select {
	case aTok = <-h.held:
	case <-time.After(30 * time.Second):
		t.Fatal("a never claimed")
	}
	if _, ok := series(t, reg, "workrouter_consumer_partition_stalled", map[string]string{"partition": "0"}); !ok {
		t.Fatal("a exports no stalled series for its assigned partition")
	}
	// a is evicted while its claim is on the wire, and does not learn it
	// (its heartbeats are held); b takes the partition over and claims it.
	swallowed, stopHole := blackholeHeartbeats(c.kf, func() string { return aTok.Member })
	t.Cleanup(stopHole) // before a's Close, after the claim's release
	b := startWorker(t, c, s, workerOpts{name: "b"})
	testwait.For(t, 60*time.Second, "b to own the partition", func() bool { return len(b.Owned()) == 1 })
	if swallowed.Load() == 0 {
		t.Fatal("no heartbeat of a was held back: the fault did not happen")
	}
	h.open()
	testwait.For(t, 30*time.Second, "a's claim fenced", func() bool {
		return len(rec.find(func(e consumer.Event) bool {
			f, ok := e.(consumer.Fenced)
			return ok && f.Token == aTok && f.Op == sink.OpClaim && errors.Is(f.Err, sink.ErrFenced)
		})) == 1
	})
	if got := heldSeries(t, reg, 0); len(got) != 0 {
		t.Errorf("a still exports %v for partition 0 after its claim was fenced", got)
	}
	if v, _ := series(t, reg, "workrouter_consumer_fenced_total", map[string]string{"partition": "0", "op": "claim"}); v != 1 {
		t.Errorf("a's fenced_total{op=claim} = %v, want 1", v)
	}
	if v, _ := series(t, reg, "workrouter_consumer_owned_partitions", nil); v != 0 {
		t.Errorf("a's owned_partitions = %v, want 0", v)
	}
}
