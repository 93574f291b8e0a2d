package consumer_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// idRec is one record produceIDs writes to partition 0: an "append" of
// payload for key "k", with command ID id ("" for none) and, if set, the
// redrive header naming the group it is for.
type idRec struct {
	id, payload, redriveFor string
}

// produceIDs writes recs to partition 0 with a plain kgo client, as a
// producer that re-sends a command writes it again: the same envelope, the
// same ID, a new offset.
func produceIDs(t *testing.T, c *cluster, recs ...idRec) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for _, r := range recs {
		kr, err := envelope.Encode(c.topic, 0, envelope.Command{Key: []byte("k"), Type: "append", ID: r.id, Payload: []byte(r.payload)})
		if err != nil {
			t.Fatal(err)
		}
		if r.redriveFor != "" {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: envelope.RedriveForHeader, Value: []byte(r.redriveFor)})
		}
		out = append(out, kr)
	}
	if err := cl.ProduceSync(context.Background(), out...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// eventRecorder keeps every event a Worker reports.
type eventRecorder struct {
	mu     sync.Mutex
	events []consumer.Event
}

func (r *eventRecorder) Observe(e consumer.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// of returns the recorded events of type E.
func eventsOf[E consumer.Event](r *eventRecorder) []E {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []E
	for _, e := range r.events {
		if e, ok := e.(E); ok {
			out = append(out, e)
		}
	}
	return out
}

// checkApplied asserts that every Applied event splits its records into
// applied, skipped, duplicates and other groups' redrives, and that they
// sum to the Worker's Stats.
func checkApplied(t *testing.T, r *eventRecorder, st consumer.Stats) {
	t.Helper()
	var applied, skipped, dups, other, noID int64
	for _, a := range eventsOf[consumer.Applied](r) {
		if a.Applied+a.Skipped+a.Duplicates+a.OtherGroup != a.Records {
			t.Errorf("Applied event %+v: applied+skipped+duplicates+other_group != records", a)
		}
		applied, skipped, dups, other, noID = applied+int64(a.Applied), skipped+int64(a.Skipped), dups+int64(a.Duplicates), other+int64(a.OtherGroup), noID+int64(a.WithoutID)
	}
	if applied != st.Records || skipped != st.Skipped || dups != st.Duplicates || other != st.RedrivesSkipped || noID != st.WithoutID {
		t.Errorf("Applied events sum to applied %d skipped %d duplicates %d other %d without ID %d; Stats %+v", applied, skipped, dups, other, noID, st)
	}
}

// waitApplied waits until the Worker reported the batch that moved
// partition 0's checkpoint to next: its Stats and events are complete
// then (the sink's fence row moves before the Worker counts).
func waitApplied(t *testing.T, r *eventRecorder, next int64) {
	t.Helper()
	testwait.For(t, 30*time.Second, "the batch up to offset "+strconv.FormatInt(next, 10)+" reported", func() bool {
		for _, a := range eventsOf[consumer.Applied](r) {
			if a.NextOffset == next {
				return true
			}
		}
		return false
	})
}

// waitSeries waits until the series name of partition 0 is want: the
// metrics observer sees an event after the test's recorder does.
func waitSeries(t *testing.T, g prometheus.Gatherer, c *cluster, name string, want float64) {
	t.Helper()
	var v float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		if v, _ = series(t, g, name, partition0(c)); v == want || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v != want {
		t.Errorf("%s = %v, want %v", name, v, want)
	}
}

func partition0(c *cluster) map[string]string {
	return map[string]string{"group": c.group, "topic": c.topic, "partition": "0"}
}

func fenceOf(t *testing.T, s *memory.Sink, c *cluster) sink.Fence {
	t.Helper()
	fs, err := s.Fences(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Scope == (epochs.Scope{Group: c.group, Topic: c.topic, Partition: 0}) {
			return f
		}
	}
	t.Fatalf("no fence of partition 0 in %v", fs)
	return sink.Fence{}
}

// TestDuplicateCommandAppliedOnce: a command written twice (same ID, two
// offsets: once in a later batch, once within one batch) is applied once;
// each copy is skipped inside the fenced unit, reported as a
// DuplicateSkipped event, counted in Stats, in
// workrouter_consumer_duplicates_skipped_total and in the sink's fence
// row. Red with Apply in place of an Apply with IDs (the log holds the payload
// twice).
func TestDuplicateCommandAppliedOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	reg := prometheus.NewPedanticRegistry()
	rec := &eventRecorder{}
	w := startWorker(t, c, s, workerOpts{name: "dedupe", registerer: reg, observers: []consumer.Observer{rec}})
	if v, ok := series(t, reg, "workrouter_consumer_dedupe_window_offsets", map[string]string{"topic": c.topic}); !ok || v != float64(s.Features().DedupeWindow) {
		t.Errorf("dedupe_window_offsets = %v (exported %v), want the memory sink's window %d", v, ok, s.Features().DedupeWindow)
	}
	testwait.For(t, 30*time.Second, "the worker to own the partition", func() bool { return len(w.Owned()) == 1 })
	if v, ok := series(t, reg, "workrouter_consumer_duplicates_skipped_total", partition0(c)); !ok || v != 0 {
		t.Errorf("duplicates_skipped_total = %v (exported %v) before any duplicate, want a series at 0", v, ok)
	}

	produceIDs(t, c, idRec{id: "a", payload: "0"})
	waitApplied(t, rec, 1)
	// The same command again in a later batch (offset 1), then a new one
	// and a copy of it in one batch (offsets 2 and 3).
	produceIDs(t, c, idRec{id: "a", payload: "0"}, idRec{id: "b", payload: "1"}, idRec{id: "b", payload: "1"})
	waitApplied(t, rec, 4)

	if got := logOf(s, "k"); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("log %v, want [0 1]: a command written twice was applied twice", got)
	}
	st := w.Stats()
	if st.Duplicates != 2 || st.Records != 2 || st.WithoutID != 0 {
		t.Errorf("Stats %+v, want 2 duplicates, 2 records applied, none without ID", st)
	}
	var got []consumer.DuplicateSkipped
	for _, d := range eventsOf[consumer.DuplicateSkipped](rec) {
		got = append(got, consumer.DuplicateSkipped{Offset: d.Offset, ID: d.ID})
	}
	if want := []consumer.DuplicateSkipped{{Offset: 1, ID: "a"}, {Offset: 3, ID: "b"}}; !slices.Equal(got, want) {
		t.Errorf("DuplicateSkipped events %+v, want %+v", got, want)
	}
	checkApplied(t, rec, st)
	waitSeries(t, reg, c, "workrouter_consumer_duplicates_skipped_total", 2)
	waitSeries(t, reg, c, "workrouter_consumer_records_applied_total", 2)
	if f := fenceOf(t, s, c); f.Duplicates != 2 {
		t.Errorf("the fence row counts %d duplicates, want 2", f.Duplicates)
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
}

// TestRedriveScopedToGroup: a redrive for another group is skipped (no
// handler call, even with a dedupe window of 1 offset), counted, evented,
// and its ID is not recorded, so a redrive of the same command for this
// group is applied; a second redrive for this group is a duplicate. Red
// when the other group's redrive is handled (the log holds its payload),
// and red when its ID is recorded (this group's redrive is skipped as a
// duplicate).
func TestRedriveScopedToGroup(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s, err := memory.NewWithConfig(memory.Config{DedupeWindow: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	rec := &eventRecorder{}
	logs := &lockedBuffer{}
	logObs := consumer.NewLogObserver(slog.New(slog.NewTextHandler(logs, nil)))
	w := startWorker(t, c, s, workerOpts{name: "redrive", registerer: reg, observers: []consumer.Observer{rec, logObs}})
	testwait.For(t, 30*time.Second, "the worker to own the partition", func() bool { return len(w.Owned()) == 1 })
	if v, ok := series(t, reg, "workrouter_consumer_redrives_skipped_total", partition0(c)); !ok || v != 0 {
		t.Errorf("redrives_skipped_total = %v (exported %v) before any redrive, want a series at 0", v, ok)
	}

	// Offsets 0-1: other groups' redrives of command "x" (the first one far
	// behind the window once the others are applied).
	produceIDs(t, c, idRec{id: "x", payload: "7", redriveFor: "billing"}, idRec{id: "x", payload: "8", redriveFor: "audit"})
	waitApplied(t, rec, 2)
	scope := epochs.Scope{Group: c.group, Topic: c.topic, Partition: 0}
	if n := s.CommandIDs(scope); n != 0 {
		t.Errorf("the sink remembers %d command IDs after two redrives for other groups, want 0", n)
	}
	// Offset 2: this group's redrive of "x": applied. Offset 3: this
	// group's redrive again: a duplicate.
	produceIDs(t, c, idRec{id: "x", payload: "1", redriveFor: c.group})
	waitApplied(t, rec, 3)
	produceIDs(t, c, idRec{id: "x", payload: "2", redriveFor: c.group})
	waitApplied(t, rec, 4)

	if got := logOf(s, "k"); !slices.Equal(got, []int{1}) {
		t.Fatalf("log %v, want [1]: only this group's first redrive is applied", got)
	}
	st := w.Stats()
	if st.RedrivesSkipped != 2 || st.Duplicates != 1 || st.Records != 1 {
		t.Errorf("Stats %+v, want 2 redrives skipped, 1 duplicate, 1 record applied", st)
	}
	var got []consumer.RedriveSkipped
	for _, r := range eventsOf[consumer.RedriveSkipped](rec) {
		got = append(got, consumer.RedriveSkipped{Offset: r.Offset, ID: r.ID, For: r.For})
	}
	if want := []consumer.RedriveSkipped{{Offset: 0, ID: "x", For: "billing"}, {Offset: 1, ID: "x", For: "audit"}}; !slices.Equal(got, want) {
		t.Errorf("RedriveSkipped events %+v, want %+v", got, want)
	}
	if d := eventsOf[consumer.DuplicateSkipped](rec); len(d) != 1 || d[0].Offset != 3 || d[0].ID != "x" {
		t.Errorf("DuplicateSkipped events %+v, want one at offset 3 for x", d)
	}
	checkApplied(t, rec, st)
	waitSeries(t, reg, c, "workrouter_consumer_redrives_skipped_total", 2)
	waitSeries(t, reg, c, "workrouter_consumer_duplicates_skipped_total", 1)
	out := logs.String()
	for _, want := range []string{"redrive for another consumer group skipped", "redrive_for=billing", "redrive_for=audit",
		"duplicate commands skipped", "duplicates=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}

// TestRecordsWithoutIDCounted: records without a command ID are applied
// as before (a copy is applied again: per offset only) and counted. Red
// without the count.
func TestRecordsWithoutIDCounted(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	reg := prometheus.NewPedanticRegistry()
	rec := &eventRecorder{}
	w := startWorker(t, c, s, workerOpts{name: "noid", registerer: reg, observers: []consumer.Observer{rec}})
	testwait.For(t, 30*time.Second, "the worker to own the partition", func() bool { return len(w.Owned()) == 1 })
	if v, ok := series(t, reg, "workrouter_consumer_records_without_id_total", partition0(c)); !ok || v != 0 {
		t.Errorf("records_without_id_total = %v (exported %v) before any record, want a series at 0", v, ok)
	}
	produceIDs(t, c, idRec{payload: "0"}, idRec{payload: "0"}, idRec{id: "a", payload: "1"})
	waitApplied(t, rec, 3)
	if got := logOf(s, "k"); !slices.Equal(got, []int{0, 0, 1}) {
		t.Fatalf("log %v, want [0 0 1]", got)
	}
	st := w.Stats()
	if st.WithoutID != 2 || st.Duplicates != 0 || st.Records != 3 {
		t.Errorf("Stats %+v, want 2 records without ID, no duplicate, 3 applied", st)
	}
	checkApplied(t, rec, st)
	waitSeries(t, reg, c, "workrouter_consumer_records_without_id_total", 2)
}

// plainSink is a memory sink that declares no dedupe window (nor any
// capability beside the write).
type plainSink struct{ sink.Sink[*memory.Tx] }

func (p plainSink) Features() sink.Features {
	f := p.Sink.Features()
	f.DedupeWindow = 0
	return f
}

// TestSinkWithoutDedupe: with a sink that cannot deduplicate, a command
// written twice is applied twice (per offset only, as the gauge and the
// Worker's warning say), and another group's redrive is still skipped.
// Red if the Worker reports deduplication it does not have.
func TestSinkWithoutDedupe(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	reg := prometheus.NewPedanticRegistry()
	rec := &eventRecorder{}
	w := startWorker(t, c, s, workerOpts{name: "plain", sink: plainSink{s}, registerer: reg, observers: []consumer.Observer{rec}})
	if v, ok := series(t, reg, "workrouter_consumer_dedupe_window_offsets", map[string]string{"topic": c.topic}); !ok || v != 0 {
		t.Errorf("dedupe_window_offsets = %v (exported %v), want 0 for a sink without a dedupe window", v, ok)
	}
	testwait.For(t, 30*time.Second, "the worker to own the partition", func() bool { return len(w.Owned()) == 1 })
	produceIDs(t, c, idRec{id: "a", payload: "0"}, idRec{id: "a", payload: "0"}, idRec{id: "a", payload: "9", redriveFor: "billing"})
	waitApplied(t, rec, 3)
	if got := logOf(s, "k"); !slices.Equal(got, []int{0, 0}) {
		t.Fatalf("log %v, want [0 0]: applied per offset, the other group's redrive skipped", got)
	}
	st := w.Stats()
	if st.Duplicates != 0 || st.RedrivesSkipped != 1 || st.Records != 2 {
		t.Errorf("Stats %+v, want no duplicate, 1 redrive skipped, 2 applied", st)
	}
	checkApplied(t, rec, st)
	if n := s.CommandIDs(epochs.Scope{Group: c.group, Topic: c.topic, Partition: 0}); n != 0 {
		t.Errorf("the sink remembers %d command IDs through a sink without a dedupe window", n)
	}
}

// applyWrapper wraps a sink, counting its Applies, and unwraps to it (as
// a fault or tracing wrapper does).
type applyWrapper struct {
	sink.Sink[*memory.Tx]
	applies atomic.Int64
}

func (a *applyWrapper) Unwrap() sink.Sink[*memory.Tx] { return a.Sink }

func (a *applyWrapper) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*memory.Tx]) (sink.Result, error) {
	a.applies.Add(1)
	return a.Sink.Apply(ctx, tok, b, effect)
}

// TestWrapperIsTheDoor: a batch with command IDs enters the sink through
// the wrapper the Worker was given (one door: deduplication is a property
// of the batch, not a second method found under the wrapper), and the
// features it declares, those of the sink it wraps, decide: the command
// written twice is applied once.
func TestWrapperIsTheDoor(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	reg := prometheus.NewPedanticRegistry()
	rec := &eventRecorder{}
	wrap := &applyWrapper{Sink: s}
	w := startWorker(t, c, s, workerOpts{name: "wrapped", sink: wrap, registerer: reg, observers: []consumer.Observer{rec}})
	if v, ok := series(t, reg, "workrouter_consumer_dedupe_window_offsets", map[string]string{"topic": c.topic}); !ok || v != float64(s.Features().DedupeWindow) {
		t.Errorf("dedupe_window_offsets = %v (exported %v), want the wrapped sink's %d", v, ok, s.Features().DedupeWindow)
	}
	testwait.For(t, 30*time.Second, "the worker to own the partition", func() bool { return len(w.Owned()) == 1 })
	produceIDs(t, c, idRec{id: "a", payload: "0"}, idRec{id: "a", payload: "0"})
	waitApplied(t, rec, 2)
	if n := wrap.applies.Load(); n == 0 {
		t.Fatal("the wrapper's Apply was never called")
	}
	if got := logOf(s, "k"); !slices.Equal(got, []int{0}) {
		t.Fatalf("log %v, want [0]: the duplicate skipped through the wrapper", got)
	}
}
