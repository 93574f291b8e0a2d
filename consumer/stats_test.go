package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/eventlog"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/memory"
)

// keepRegistry is a registry whose Unregister keeps the collectors: the
// Worker's Stopped event unregisters its metrics, and the test reads them
// after Close.
type keepRegistry struct{ *prometheus.Registry }

func (keepRegistry) Unregister(prometheus.Collector) bool { return true }

// TestStatsAreTheEvents: a Worker records its work once, as events. A run
// through poison records (dead letters, a retry after a good prefix, a
// stall), duplicates, another group's redrive, records without an ID, a
// misrouted record, a paused fetch and a fenced partition — serially and
// on lanes — ends with Stats equal, field by field, to the counts of the
// event stream as consumer/eventlog wrote it, and to the series
// consumer/consumerprom kept; and the counts are the scenario's own.
func TestStatsAreTheEvents(t *testing.T) {
	t.Parallel()
	for _, kc := range []int{1, 3} {
		t.Run("KeyConcurrency="+strconv.Itoa(kc), func(t *testing.T) {
			t.Parallel()
			statsScenario(t, kc)
		})
	}
}

func statsScenario(t *testing.T, keyConcurrency int) {
	const partitions = 3
	c := newCluster(t, partitions)
	s := memory.New()
	var flaky atomic.Int64 // failures of the flaky record's handler
	handler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		switch string(cmd.Payload) {
		case "flaky":
			if flaky.Load() < 2 {
				flaky.Add(1)
				return errors.New("flaky: not yet")
			}
		case "refused":
			return consumer.Permanent(errors.New("refused for good"))
		case "slow":
			time.Sleep(20 * time.Millisecond)
		}
		return appendHandler(ctx, tx, cmd)
	}
	var stream bytes.Buffer
	evlog := eventlog.NewWriter(&stream, func(err error) { t.Errorf("event stream: %v", err) })
	rec := &eventRecorder{}
	reg := keepRegistry{prometheus.NewRegistry()}
	// An Observer sees every event it is given counted in Stats already.
	var (
		self        atomic.Pointer[consumer.Worker[*memory.Tx]]
		seen, ahead atomic.Int64
	)
	counted := consumer.ObserverFunc(func(e consumer.Event) {
		if _, ok := e.(consumer.Applied); !ok {
			return
		}
		n := seen.Add(1)
		if w := self.Load(); w != nil && w.Stats().Batches < n {
			ahead.Add(1)
		}
	})
	w := startWorker(t, c, s, workerOpts{name: "a", maxBatch: 8, queueSize: 8, keyConcurrency: keyConcurrency,
		handlers:   map[string]consumer.Handler[*memory.Tx]{"append": handler},
		poison:     consumer.PoisonPolicy{NoHandler: consumer.PoisonDeadLetter, MaxAttempts: 5},
		observers:  []consumer.Observer{counted, evlog, rec},
		registerer: reg})
	self.Store(w)
	testwait.For(t, 30*time.Second, "the worker to own every partition", func() bool { return len(w.Owned()) == partitions })

	raw := newRawProducer(t, c)
	cmd := func(p int32, key, typ, payload, id, redriveFor string) *kgo.Record {
		r, err := envelope.Encode(c.topic, p, envelope.Command{Key: []byte(key), Type: typ, ID: id, Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		if redriveFor != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: envelope.RedriveForHeader, Value: []byte(redriveFor)})
		}
		return r
	}
	k0, k1, k2 := keyOn(0, partitions), keyOn(1, partitions), keyOn(2, partitions)
	good := func(p int32, key string, n int) []*kgo.Record {
		var out []*kgo.Record
		for range n {
			out = append(out, cmd(p, key, "append", "x", "", ""))
		}
		return out
	}

	// Partition 0: three commands with IDs, two of them sent again, a
	// redrive for another group, then poison among records without IDs: a
	// handler that fails twice behind a good prefix, one refused for good
	// behind a prefix, one of a type nobody handles.
	var p0 []*kgo.Record
	p0 = append(p0, cmd(0, k0, "append", "a", "id-a", ""), cmd(0, k0, "append", "b", "id-b", ""), cmd(0, k0, "append", "c", "id-c", ""),
		cmd(0, k0, "append", "a", "id-a", ""), cmd(0, k0, "append", "b", "id-b", ""), cmd(0, k0, "append", "z", "id-z", "another-group"))
	p0 = append(p0, good(0, k0, 3)...)
	p0 = append(p0, cmd(0, k0, "append", "flaky", "", ""))
	p0 = append(p0, good(0, k0, 3)...)
	p0 = append(p0, cmd(0, k0, "append", "refused", "", ""))
	p0 = append(p0, good(0, k0, 2)...)
	p0 = append(p0, cmd(0, k0, "no-such-type", "x", "", ""))
	p0 = append(p0, good(0, k0, 2)...)
	raw.send(p0...)
	const withID, duplicates, redrives, deadLetters, flakyFailures = 3, 2, 1, 2, 2

	// Partition 2: a misrouted record (its key maps to partition 0), then
	// more slow records than its queue holds: its fetching pauses.
	const misrouted, slow = 1, 40
	p2 := []*kgo.Record{cmd(2, k0, "append", "x", "", "")}
	for range slow {
		p2 = append(p2, cmd(2, k2, "append", "slow", "", ""))
	}
	raw.send(p2...)

	// Partition 1: a batch applied, then a newer tenure's claim in the
	// sink; the next batch is fenced.
	raw.send(good(1, k1, 4)...)
	testwait.For(t, 30*time.Second, "a batch of partition 1 applied", func() bool {
		for _, a := range eventsOf[consumer.Applied](rec) {
			if a.Token.Partition == 1 {
				return true
			}
		}
		return false
	})
	var held epochs.Token
	for _, tok := range w.Owned() {
		if tok.Partition == 1 {
			held = tok
		}
	}
	newer := held
	newer.Epoch, newer.Member = held.Epoch+100, "a-newer-member"
	if _, err := s.Claim(t.Context(), newer, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	raw.send(good(1, k1, 4)...)

	testwait.For(t, 60*time.Second, "partition 1 fenced", func() bool { return len(eventsOf[consumer.Fenced](rec)) > 0 })
	testwait.For(t, 60*time.Second, "every dead letter stored", func() bool {
		dls, _ := s.DeadLetters(t.Context(), dlq.Filter{})
		return len(dls) == deadLetters
	})
	testwait.For(t, 60*time.Second, "partitions 0 and 2 applied to their ends", func() bool {
		fs, _ := s.Fences(t.Context())
		done := 0
		for _, f := range fs {
			if (f.Scope.Partition == 0 && f.NextOffset == int64(len(p0))) || (f.Scope.Partition == 2 && f.NextOffset == int64(len(p2))) {
				done++
			}
		}
		return done == 2
	})

	// Partition 2 again: an operator resets its fence under the tenure;
	// the next batch is refused, the partition claims again (with a
	// proof of membership) and applies it.
	f2 := fenceOn(t, s, 2)
	if _, err := s.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: f2.Scope, Expect: f2, Reason: "stats scenario (test)"}); err != nil {
		t.Fatal(err)
	}
	const afterReset = 3
	raw.send(good(2, k2, afterReset)...)
	testwait.For(t, 60*time.Second, "partition 2 applied past the reset", func() bool {
		f, ok := fenceOf2(s, 2)
		return ok && f.Holder.Member != "" && f.NextOffset == int64(len(p2)+afterReset)
	})
	w.Close()
	st := w.Stats()
	t.Logf("Stats: %+v", st)

	if n := ahead.Load(); n != 0 {
		t.Errorf("Stats.Batches: an Observer was given %d Applied events before Stats counted them", n)
	}
	// The scenario happened, and Stats counts it.
	if st.Assigned != partitions || st.Revoked != partitions {
		t.Errorf("Stats %+v: want %d partitions assigned and revoked", st, partitions)
	}
	if st.Claims != partitions+1 || st.FenceResets != 1 {
		t.Errorf("Stats.Claims = %d, Stats.FenceResets = %d: want %d claims, one after the fence reset", st.Claims, st.FenceResets, partitions+1)
	}
	want := map[string]int64{"Duplicates": duplicates, "RedrivesSkipped": redrives, "DeadLettered": deadLetters, "Misrouted": misrouted}
	got := map[string]int64{"Duplicates": st.Duplicates, "RedrivesSkipped": st.RedrivesSkipped, "DeadLettered": st.DeadLettered, "Misrouted": st.Misrouted}
	for f, n := range want {
		if got[f] != n {
			t.Errorf("Stats.%s = %d, want %d (the scenario's)", f, got[f], n)
		}
	}
	if st.WithoutID != st.Records-withID {
		t.Errorf("Stats.WithoutID = %d, want Records - %d = %d", st.WithoutID, withID, st.Records-withID)
	}
	if st.FencedApplies < 1 || st.Pauses < 1 || st.Batches < 1 {
		t.Errorf("Stats.FencedApplies = %d, Stats.Pauses = %d, Stats.Batches = %d: want each at least 1", st.FencedApplies, st.Pauses, st.Batches)
	}
	// Every failure of the flaky handler is a retry, the one behind the
	// good prefix (retried at once) too.
	effectStalls, prefixes := 0, 0
	for _, e := range eventsOf[consumer.Stalled](rec) {
		if e.Cause == consumer.CauseEffect {
			effectStalls++
		}
		if e.Prefix > 0 {
			prefixes++
		}
	}
	if int64(effectStalls) != flaky.Load() || flaky.Load() != flakyFailures {
		t.Errorf("Stats.Retries: %d Stalled events of cause effect for %d failures of the flaky handler, want %d", effectStalls, flaky.Load(), flakyFailures)
	}
	if prefixes == 0 {
		t.Errorf("no Stalled event of a retry after a good prefix: the scenario did not exercise it")
	}
	if n := int64(len(eventsOf[consumer.DuplicateSkipped](rec))); n != st.Duplicates {
		t.Errorf("Stats.Duplicates = %d, but %d DuplicateSkipped events", st.Duplicates, n)
	}
	if n := int64(len(eventsOf[consumer.RedriveSkipped](rec))); n != st.RedrivesSkipped {
		t.Errorf("Stats.RedrivesSkipped = %d, but %d RedriveSkipped events", st.RedrivesSkipped, n)
	}

	// One invariant across the three: Stats, the event stream, the metrics.
	fromLog := statsFromEventlog(t, &stream)
	for _, d := range diffStats(st, fromLog, nil) {
		t.Errorf("Stats and the event stream differ: %s", d)
	}
	fromProm, fields := statsFromProm(t, reg, c.group)
	for _, d := range diffStats(st, fromProm, fields) {
		t.Errorf("Stats and consumerprom's series differ: %s", d)
	}
}

// fenceOn returns the fence of partition p of the test's topic.
func fenceOn(t *testing.T, s *memory.Sink, p int32) sink.Fence {
	t.Helper()
	f, ok := fenceOf2(s, p)
	if !ok {
		t.Fatalf("no fence of partition %d", p)
	}
	return f
}

func fenceOf2(s *memory.Sink, p int32) (sink.Fence, bool) {
	fs, _ := s.Fences(context.Background())
	for _, f := range fs {
		if f.Scope.Partition == p {
			return f, true
		}
	}
	return sink.Fence{}, false
}

// keyOn returns a key that the default partitioner maps to partition p of
// n.
func keyOn(p int32, n int32) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("key-%d-%d", p, i)
		if envelope.Partition([]byte(k), n) == p {
			return k
		}
	}
}

// diffStats names the fields (of only, if not nil) in which a and b
// differ.
func diffStats(a, b consumer.Stats, only []string) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := range va.NumField() {
		name := va.Type().Field(i).Name
		if only != nil && !slices.Contains(only, name) {
			continue
		}
		if x, y := va.Field(i).Int(), vb.Field(i).Int(); x != y {
			out = append(out, fmt.Sprintf("%s: %d != %d", name, x, y))
		}
	}
	return out
}

// statsFromEventlog counts the event stream r holds, as Stats documents
// which event feeds which field.
func statsFromEventlog(t *testing.T, r io.Reader) consumer.Stats {
	t.Helper()
	var st consumer.Stats
	rd := eventlog.NewReader(r)
	for {
		e, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return st
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case consumer.KindAssigned:
			st.Assigned++
		case consumer.KindRevoked:
			st.Revoked++
		case consumer.KindLost:
			st.Lost++
		case consumer.KindClaimed:
			st.Claims++
			if e.Fields["took_over_from"] != "" {
				st.Takeovers++
			}
		case consumer.KindFenced:
			if e.Op == string(sink.OpClaim) {
				st.FencedClaims++
			} else {
				st.FencedApplies++
			}
		case consumer.KindBlocked:
			switch e.Cause {
			case consumer.BlockFenceReset:
				st.FenceResets++
			case consumer.BlockResourceFenced:
				st.ResourceRefusals++
			case consumer.BlockMemberChanged:
				st.MemberChanges++
			}
		case consumer.KindApplied:
			st.Batches++
			st.Records += int64(e.Applied)
			st.Skipped += int64(e.Skipped)
			st.Duplicates += int64(e.Duplicates)
			st.RedrivesSkipped += int64(e.OtherGroup)
			st.WithoutID += int64(e.WithoutID)
		case consumer.KindStalled:
			st.Retries++
		case consumer.KindPaused:
			st.Pauses++
		case consumer.KindDeadLettered:
			st.DeadLettered++
		case consumer.KindLogChanged:
			st.LogChanged++
			n, _ := strconv.ParseInt(e.Fields["newly_lost"], 10, 64)
			st.LostToRetention += n
		case consumer.KindMisrouted:
			st.Misrouted++
		case consumer.KindDiscarded:
			st.Discarded++
		}
	}
}

// statsFromProm reads, from the series consumerprom keeps on g for group,
// the Stats fields they count, and returns which fields those are.
func statsFromProm(t *testing.T, g prometheus.Gatherer, group string) (consumer.Stats, []string) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// sum adds up the series of name whose labels include match.
	sum := func(name string, match map[string]string) int64 {
		var v float64
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, lp := range m.GetLabel() {
					labels[lp.GetName()] = lp.GetValue()
				}
				if labels["group"] != group {
					continue
				}
				for k, want := range match {
					if labels[k] != want {
						continue next
					}
				}
				v += metricValue(m)
			}
		}
		return int64(v)
	}
	const p = "workrouter_consumer_"
	st := consumer.Stats{
		Assigned:        sum(p+"partitions_assigned_total", nil),
		Revoked:         sum(p+"partitions_revoked_total", nil),
		Lost:            sum(p+"partitions_lost_total", nil),
		Claims:          sum(p+"claims_total", map[string]string{"outcome": "ok"}) + sum(p+"claims_total", map[string]string{"outcome": "takeover"}),
		Takeovers:       sum(p+"claims_total", map[string]string{"outcome": "takeover"}),
		FencedClaims:    sum(p+"fenced_total", map[string]string{"op": "claim"}),
		FencedApplies:   sum(p+"fenced_total", map[string]string{"op": "apply"}),
		Batches:         sum(p+"batches_applied_total", nil),
		Records:         sum(p+"records_applied_total", nil),
		Duplicates:      sum(p+"duplicates_skipped_total", nil),
		RedrivesSkipped: sum(p+"redrives_skipped_total", nil),
		WithoutID:       sum(p+"records_without_id_total", nil),
		Retries:         sum(p+"retries_total", nil),
		DeadLettered:    sum(p+"dead_letters_total", nil),
		LogChanged:      sum(p+"log_changed_total", nil),
		LostToRetention: sum(p+"records_lost_total", nil),
		Misrouted:       sum(p+"misrouted_total", nil),
	}
	if fenced := sum(p+"claims_total", map[string]string{"outcome": "fenced"}); fenced != st.FencedClaims {
		t.Errorf("claims_total{outcome=fenced} = %d, fenced_total{op=claim} = %d", fenced, st.FencedClaims)
	}
	fields := []string{"Assigned", "Revoked", "Lost", "Claims", "Takeovers", "FencedClaims", "FencedApplies", "Batches", "Records",
		"Duplicates", "RedrivesSkipped", "WithoutID", "Retries", "DeadLettered", "LogChanged", "LostToRetention", "Misrouted"}
	return st, fields
}

// TestRevokedCountedOnceTheBatchIsOver: a revoked partition is counted
// (Stats.Revoked, with its Revoked event) once its tenure's in-flight
// batch is over, not when the revoke begins: while the batch runs the
// partition is still being given up.
func TestRevokedCountedOnceTheBatchIsOver(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	g := newGate()
	var (
		self            atomic.Pointer[consumer.Worker[*memory.Tx]]
		revokedAtApply  atomic.Int64
		appliedReported atomic.Bool
	)
	counted := consumer.ObserverFunc(func(e consumer.Event) {
		if _, ok := e.(consumer.Applied); ok {
			if w := self.Load(); w != nil {
				revokedAtApply.Store(w.Stats().Revoked)
				appliedReported.Store(true)
			}
		}
	})
	w := startWorker(t, c, s, workerOpts{name: "a", revoke: 30 * time.Second, observers: []consumer.Observer{counted},
		handler: func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
			g.wait()
			return appendHandler(ctx, tx, cmd)
		}})
	self.Store(w)
	testwait.For(t, 30*time.Second, "the worker to own the partition", func() bool { return len(w.Owned()) == 1 })
	produce(t, c, 1, []string{"k"}, 0, 1)
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler was never called")
	}
	closed := make(chan struct{})
	go func() {
		w.Close()
		close(closed)
	}()
	testwait.For(t, 30*time.Second, "the revoke to begin", func() bool { return len(w.Owned()) == 0 })
	if st := w.Stats(); st.Revoked != 0 {
		t.Errorf("Stats.Revoked = %d while the partition's batch is in flight, want 0", st.Revoked)
	}
	g.open()
	<-closed
	if !appliedReported.Load() || revokedAtApply.Load() != 0 {
		t.Errorf("the in-flight batch reported (%v) with Stats.Revoked = %d, want it reported before the revoke is counted", appliedReported.Load(), revokedAtApply.Load())
	}
	if st := w.Stats(); st.Revoked != 1 || st.Records != 1 {
		t.Errorf("Stats %+v: want the partition revoked once, after its record applied", st)
	}
}
