package consumer_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/memory"
)

// keySeq is one command produceKeys writes: an "append" of seq to key.
type keySeq struct {
	key string
	seq int
}

// produceKeys writes recs to partition 0 of c's topic, in this order.
func produceKeys(t *testing.T, c *cluster, recs []keySeq) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := make([]*kgo.Record, 0, len(recs))
	for _, r := range recs {
		kr, err := envelope.Encode(c.topic, 0, envelope.Command{Key: []byte(r.key), Type: "append", Payload: []byte(strconv.Itoa(r.seq))})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, kr)
	}
	if err := cl.ProduceSync(t.Context(), out...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// checkLog asserts that key's log is 0..n-1, in order.
func checkLog(t *testing.T, s *memory.Sink, key string, n int) {
	t.Helper()
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if got := logOf(s, key); !slices.Equal(got, want) {
		t.Errorf("key %s: applied %v, want 0..%d in order", key, got, n-1)
	}
}

// serialOnly is a memory sink that declares no checkpoint with gaps.
type serialOnly struct{ sink.Sink[*memory.Tx] }

func (p serialOnly) Features() sink.Features {
	f := p.Sink.Features()
	f.Gaps = false
	return f
}

func (p serialOnly) Unwrap() sink.Sink[*memory.Tx] { return p.Sink }

// TestKeyConcurrencyNeedsGaps: New refuses KeyConcurrency > 1 with a sink
// that declares no checkpoint with gaps (sink.Features.Gaps), and refuses
// a negative one.
func TestKeyConcurrencyNeedsGaps(t *testing.T) {
	t.Parallel()
	base := consumer.Config[*memory.Tx]{
		Brokers: []string{"127.0.0.1:1"}, Group: "g", Topic: "t",
		Handlers: map[string]consumer.Handler[*memory.Tx]{"append": appendHandler},
	}
	cfg := base
	cfg.Sink, cfg.KeyConcurrency = serialOnly{memory.New()}, 4
	_, err := consumer.New(t.Context(), cfg)
	if !errors.Is(err, sink.ErrUnsupported) || !errors.Is(err, consumer.ErrConfig) || !strings.Contains(err.Error(), "KeyConcurrency 4") {
		t.Fatalf("KeyConcurrency 4 over a sink without gaps: %v, want ErrConfig and sink.ErrUnsupported naming KeyConcurrency 4", err)
	}
	cfg.KeyConcurrency = -1
	if _, err := consumer.New(t.Context(), cfg); !errors.Is(err, consumer.ErrConfig) || errors.Is(err, sink.ErrUnsupported) {
		t.Fatalf("negative KeyConcurrency: %v, want ErrConfig", err)
	}
	// KeyConcurrency 1 takes any sink (the serial path).
	cfg.KeyConcurrency = 1
	if _, err := consumer.New(t.Context(), cfg); errors.Is(err, consumer.ErrConfig) {
		t.Fatalf("KeyConcurrency 1 over a serial sink: %v, want no config error", err)
	}
}

// appliedEvents collects the Applied events of a worker.
type appliedEvents struct {
	mu  sync.Mutex
	evs []consumer.Applied
}

func (a *appliedEvents) Observe(e consumer.Event) {
	if ev, ok := e.(consumer.Applied); ok {
		a.mu.Lock()
		a.evs = append(a.evs, ev)
		a.mu.Unlock()
	}
}

func (a *appliedEvents) lanes() map[int]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[int]bool{}
	for _, ev := range a.evs {
		out[ev.Lane] = true
	}
	return out
}

// TestKeyConcurrencyOrderPerKey: with 8 lanes per partition every key's
// commands are applied exactly once and in offset order, the batches are
// the lanes' (gapped applies, several lanes), and each partition's
// watermark reaches the end of its log.
func TestKeyConcurrencyOrderPerKey(t *testing.T) {
	t.Parallel()
	const partitions, perKey = 3, 30
	c := newCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(48)
	produce(t, c, partitions, keys, 0, perKey)
	var seen appliedEvents
	var calls atomic.Int64
	h := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		if calls.Add(1)%7 == 0 {
			time.Sleep(time.Millisecond) // lanes finish out of offset order
		}
		return appendHandler(ctx, tx, cmd)
	}
	w := startWorker(t, c, s, workerOpts{name: "lanes", handler: h, keyConcurrency: 8, maxBatch: 8, observers: []consumer.Observer{&seen}})
	testwait.For(t, 60*time.Second, "every command applied", func() bool { return appliedCount(s, keys) == len(keys)*perKey })
	checkInvariants(t, s, keys, perKey)
	if n := len(seen.lanes()); n < 2 {
		t.Errorf("batches applied by %d lane(s), want several", n)
	}
	gapped := 0
	for _, ev := range s.Events() {
		if ev.Kind == memory.Apply && ev.Accepted {
			if !ev.Gapped {
				t.Fatalf("an ungapped apply %+v by a worker with lanes", ev)
			}
			gapped++
		}
	}
	if gapped == 0 {
		t.Fatal("no gapped apply recorded")
	}
	ends := logEnds(t, c)
	testwait.For(t, 30*time.Second, "every partition's watermark at its log end", func() bool {
		for _, p := range w.Partitions() {
			if p.NextOffset != ends[p.Token.Partition] {
				return false
			}
		}
		return len(w.Partitions()) == partitions
	})
	fences, err := s.Fences(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fences {
		if f.NextOffset != ends[f.Scope.Partition] || len(f.Done) != 0 {
			t.Errorf("partition %d: sink checkpoint %d with %d spans, want the log end %d and none", f.Scope.Partition, f.NextOffset, len(f.Done), ends[f.Scope.Partition])
		}
	}
	// Kafka's committed offset is the watermark.
	testwait.For(t, 30*time.Second, "the committed offsets at the log ends", func() bool {
		committed := committedOffsets(t, c)
		for p, end := range ends {
			if committed[p] != end {
				return false
			}
		}
		return true
	})
	if st := w.Stats(); st.Records != int64(len(keys)*perKey) || st.Skipped != 0 {
		t.Errorf("stats %+v: want %d records applied, none skipped", st, len(keys)*perKey)
	}
}

// TestKeyConcurrencyOrderPerKeyUnderReassignment: keys go idle between
// rounds and come back in another order, landing in other lanes (the
// least-loaded lane when a key has nothing pending); within a round a
// key's records stay on its lane, whose handlers finish out of order with
// the other lanes'. Every key's commands are applied exactly once and in
// offset order across the moves, and the table of keys bound to lanes is
// empty whenever the partition is idle.
func TestKeyConcurrencyOrderPerKeyUnderReassignment(t *testing.T) {
	t.Parallel()
	const lanes, rounds, perRound = 4, 4, 6
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(16)
	var mu sync.Mutex
	keyAt := map[int64]string{} // offset -> key, as the handlers saw them
	var calls atomic.Int64
	h := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		mu.Lock()
		keyAt[cmd.Offset] = string(cmd.Key)
		mu.Unlock()
		if calls.Add(1)%3 == 0 {
			time.Sleep(time.Millisecond) // lanes finish out of offset order
		}
		return appendHandler(ctx, tx, cmd)
	}
	var seen appliedEvents
	// One record per batch: an Applied event's FirstOffset and Lane say
	// which lane applied which record.
	w := startWorker(t, c, s, workerOpts{name: "lanes", handler: h, keyConcurrency: lanes, maxBatch: 1, observers: []consumer.Observer{&seen}})
	total := 0
	for r := range rounds {
		rotated := append(slices.Clone(keys[r*3:]), keys[:r*3]...)
		var recs []keySeq
		for _, k := range rotated { // a key's records of a round one after the other: they would race on two lanes
			for seq := r * perRound; seq < (r+1)*perRound; seq++ {
				recs = append(recs, keySeq{k, seq})
			}
		}
		produceKeys(t, c, recs)
		total += len(recs)
		testwait.For(t, 60*time.Second, "round "+strconv.Itoa(r)+" applied, the watermark at its end", func() bool {
			ps := w.Partitions()
			return len(ps) == 1 && ps[0].NextOffset == int64(total)
		})
		if n, pending, ok := consumer.PendingKeys(w, 0); !ok || n != 0 || pending != 0 {
			t.Fatalf("round %d done, the partition idle: %d keys bound, %d records pending (tenure with lanes %v); want none", r, n, pending, ok)
		}
	}
	checkInvariants(t, s, keys, rounds*perRound)
	lanesOf := map[string]map[int]bool{}
	seen.mu.Lock()
	for _, ev := range seen.evs {
		if ev.Records != 1 {
			t.Fatalf("batch %+v of %d records, want 1", ev, ev.Records)
		}
		mu.Lock()
		k := keyAt[ev.FirstOffset]
		mu.Unlock()
		if lanesOf[k] == nil {
			lanesOf[k] = map[int]bool{}
		}
		lanesOf[k][ev.Lane] = true
	}
	seen.mu.Unlock()
	moved := 0
	for _, k := range keys {
		if len(lanesOf[k]) > 1 {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("no key applied by more than one lane over %d rounds (%v): no reassignment to see", rounds, lanesOf)
	}
	t.Logf("%d of %d keys applied by more than one lane", moved, len(keys))
}

// logEnds returns the end offset of every partition of c's topic.
func logEnds(t *testing.T, c *cluster) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[int32]int64{}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := kadm.NewClient(cl).ListEndOffsets(ctx, c.topic)
	if err != nil {
		t.Fatal(err)
	}
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// committedOffsets returns the group's committed offset of every
// partition of c's topic.
func committedOffsets(t *testing.T, c *cluster) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, c.group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == c.topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

// TestKeyConcurrencyKeylessAndPoisonKeepTheOrder: records without a key
// (not commands: dead-lettered at once) and a command whose handler fails
// permanently (dead-lettered) in the middle of a partition break neither
// the order nor the exactly-once of the keys around them; the watermark
// passes over them.
func TestKeyConcurrencyKeylessAndPoisonKeepTheOrder(t *testing.T) {
	t.Parallel()
	const perKey = 20
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(12)
	produce(t, c, 1, keys, 0, perKey/2)
	// Three records without a key (no type header either) in the middle.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: c.topic, Partition: 0, Value: []byte("keyless-" + strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	produce(t, c, 1, keys, perKey/2, perKey)
	poisonKey, poisonSeq := keys[5], "7"
	h := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		if string(cmd.Key) == poisonKey && string(cmd.Payload) == poisonSeq {
			return consumer.Permanent(errors.New("refused"))
		}
		return appendHandler(ctx, tx, cmd)
	}
	w := startWorker(t, c, s, workerOpts{name: "lanes", handler: h, keyConcurrency: 4, maxBatch: 4})
	total := len(keys)*perKey + 3
	testwait.For(t, 60*time.Second, "every record applied or dead-lettered", func() bool {
		ps := w.Partitions()
		return len(ps) == 1 && ps[0].NextOffset == int64(total)
	})
	for _, k := range keys {
		want := make([]int, 0, perKey)
		for i := range perKey {
			if k == poisonKey && strconv.Itoa(i) == poisonSeq {
				continue
			}
			want = append(want, i)
		}
		if got := logOf(s, k); !slices.Equal(got, want) {
			t.Errorf("key %s: applied %v, want %v", k, got, want)
		}
	}
	dls, err := s.DeadLetters(t.Context(), dlq.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, d := range dls {
		reasons[d.Record.Reason]++
	}
	if reasons[consumer.ReasonUndecodable] != 3 || reasons[consumer.ReasonPermanent] != 1 || len(dls) != 4 {
		t.Errorf("dead letters by reason %v, want 3 undecodable and 1 permanent", reasons)
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
}

// TestKeyConcurrencyHotKeyDoesNotStarveOthers: a hot key (every other
// record of the partition) whose handler hangs on its first record holds
// up its own records only: no other key is bound to its lane, whose
// pending records always outnumber the least-loaded lane's (keys move to
// the least-loaded lane when idle; with a fixed hash of the key some of
// them would wait behind it). Every other key is applied meanwhile, the
// sink's checkpoint has gaps (the workrouter_consumer_gapped_spans gauge
// shows them) and the watermark stays at the stuck record. Once it
// returns, every key is applied in order, the watermark reaches the end,
// the gaps are gone and no key is left bound to a lane.
func TestKeyConcurrencyHotKeyDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	const lanes, hotRecs, perKey = 4, 48, 4
	c := newCluster(t, 1)
	s := memory.New()
	hot, others := "hot", makeKeys(hotRecs/perKey)
	var recs []keySeq
	for i := range hotRecs {
		recs = append(recs, keySeq{hot, i}, keySeq{others[i%len(others)], i / len(others)})
	}
	g := newGate()
	var once sync.Once
	h := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		if string(cmd.Key) == hot {
			once.Do(g.wait)
		}
		return appendHandler(ctx, tx, cmd)
	}
	reg := prometheus.NewRegistry()
	// Room in every lane's queue for all of the hot key's records (the
	// back-pressure test has a full one).
	w := startWorker(t, c, s, workerOpts{name: "lanes", handler: h, keyConcurrency: lanes, maxBatch: 4, queueSize: lanes * len(recs), registerer: reg})
	t.Cleanup(g.open) // before the worker's Close (cleanups run last first): a failed test must not leave the handler stuck
	produceKeys(t, c, recs)
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the hot key's handler never ran")
	}
	testwait.For(t, 60*time.Second, "the other keys applied while the hot key is stuck", func() bool { return appliedCount(s, others) == len(others)*perKey })
	if n := len(logOf(s, hot)); n != 0 {
		t.Errorf("the stuck hot key has %d records applied", n)
	}
	ps := w.Partitions()
	if len(ps) != 1 || ps[0].NextOffset != 0 {
		t.Errorf("partition status %+v: the watermark passed the stuck record at offset 0", ps)
	}
	fences, err := s.Fences(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(fences) != 1 || len(fences[0].Done) == 0 {
		t.Fatalf("sink fences %+v: want a checkpoint with gaps while a key is stuck", fences)
	}
	if v, ok := series(t, reg, "workrouter_consumer_gapped_spans", map[string]string{"partition": "0"}); !ok || v < 1 {
		t.Errorf("gapped_spans = %v (exported %v), want the spans above the watermark", v, ok)
	}
	if v, ok := series(t, reg, "workrouter_consumer_lanes_busy", map[string]string{"partition": "0"}); !ok || v < 1 {
		t.Errorf("lanes_busy = %v (exported %v), want the stuck lane", v, ok)
	}
	if keys, pending, ok := consumer.PendingKeys(w, 0); !ok || keys != 1 || pending != hotRecs {
		t.Errorf("pending: %d keys, %d records (tenure with lanes %v); want the hot key's %d records only", keys, pending, ok, hotRecs)
	}

	g.open()
	testwait.For(t, 60*time.Second, "every command applied", func() bool { return appliedCount(s, append([]string{hot}, others...)) == len(recs) })
	checkLog(t, s, hot, hotRecs)
	checkInvariants(t, s, others, perKey)
	testwait.For(t, 30*time.Second, "the watermark at the log end, no gap", func() bool {
		ps := w.Partitions()
		fences, err := s.Fences(t.Context())
		v, _ := series(t, reg, "workrouter_consumer_gapped_spans", map[string]string{"partition": "0"})
		return err == nil && len(ps) == 1 && ps[0].NextOffset == int64(len(recs)) && len(fences) == 1 && len(fences[0].Done) == 0 && v == 0
	})
	if keys, pending, ok := consumer.PendingKeys(w, 0); !ok || keys != 0 || pending != 0 {
		t.Errorf("idle partition: %d keys, %d records pending (tenure with lanes %v); want none", keys, pending, ok)
	}
	w.Close()
	if _, ok := series(t, reg, "workrouter_consumer_gapped_spans", map[string]string{"partition": "0"}); ok {
		t.Error("gapped_spans series left after Close")
	}
}

// TestKeyConcurrencyStuckLaneBackPressures: lanes' queues are bounded; a
// stuck lane whose queue is full holds the dispatcher, so the partition's
// queue fills and its fetching pauses.
func TestKeyConcurrencyStuckLaneBackPressures(t *testing.T) {
	t.Parallel()
	const lanes, perKey = 4, 40
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(16)
	g := newGate()
	t.Cleanup(g.open)
	var once sync.Once
	h := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		if string(cmd.Key) == keys[0] {
			once.Do(g.wait)
		}
		return appendHandler(ctx, tx, cmd)
	}
	w := startWorker(t, c, s, workerOpts{name: "lanes", handler: h, keyConcurrency: lanes, maxBatch: 4, queueSize: 8})
	produce(t, c, 1, keys, 0, perKey)
	<-g.entered
	testwait.For(t, 60*time.Second, "the partition's fetching paused", func() bool { return w.Stats().Pauses > 0 })
	if n := appliedCount(s, keys); n == len(keys)*perKey {
		t.Fatal("everything applied while a lane is stuck: no back-pressure to see")
	}
	g.open()
	testwait.For(t, 60*time.Second, "every command applied", func() bool { return appliedCount(s, keys) == len(keys)*perKey })
	checkInvariants(t, s, keys, perKey)
}

// TestKeyConcurrencyZombieLanesFenced: a worker whose lanes are all inside
// their effects (frozen, ignoring their context) is evicted; the new owner
// claims and applies everything; when the zombie's lanes wake, every one
// of their late a lane's Apply calls is refused by the sink (one per lane in
// flight, none accepted), the zombie stops all its lanes, and nothing of
// it lands.
func TestKeyConcurrencyZombieLanesFenced(t *testing.T) {
	t.Parallel()
	const lanes, perKey = 4, 10
	c := newFakeCluster(t, 1)
	s := memory.New()
	keys := makeKeys(16)
	var aMember atomic.Value
	aMember.Store("")
	swallow, stopHole := blackholeHeartbeats(c.kf, func() string { return aMember.Load().(string) })
	aGate := newGate()
	// Every call waits for the gate: the first lanes calls are one per
	// lane (a lane runs one handler at a time), and 16 keys with nothing
	// done are spread over every lane.
	const inLane = lanes
	var entered atomic.Int32
	var allIn = make(chan struct{})
	aHandler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		aMember.Store(cmd.Token.Member)
		if entered.Add(1) == inLane {
			close(allIn)
		}
		<-aGate.ch // frozen mid-batch: ignores ctx
		return appendHandler(ctx, tx, cmd)
	}
	a := startWorker(t, c, s, workerOpts{name: "a", handler: aHandler, revoke: time.Minute, keyConcurrency: lanes, maxBatch: 4})
	testwait.For(t, 30*time.Second, "a to own the partition", func() bool { return len(a.Owned()) == 1 })
	aTok := a.Owned()[0]
	aSig, ok := consumer.TenureSignalsOf(a, 0)
	if !ok || aSig.Token != aTok {
		t.Fatalf("a's tenure of partition 0: %v %v, want %v", aSig.Token, ok, aTok)
	}
	b := startWorker(t, c, s, workerOpts{name: "b", keyConcurrency: lanes, maxBatch: 4})
	t.Cleanup(stopHole)
	t.Cleanup(aGate.open)
	produce(t, c, 1, keys, 0, perKey)
	select {
	case <-allIn:
	case <-time.After(30 * time.Second):
		t.Fatal("a's lanes never were all inside their effects")
	}
	testwait.For(t, 60*time.Second, "b to apply every command", func() bool { return appliedCount(s, keys) == len(keys)*perKey })
	bMember, _ := b.Member()
	if bTok, ok := claimedBy(s, bMember); !ok || bTok.Epoch <= aTok.Epoch {
		t.Fatalf("b's claim %v is not newer than a's tenure %v", bTok, aTok)
	}
	if swallow.Load() == 0 {
		t.Fatal("no heartbeat of a was blackholed: the fault did not happen")
	}

	aGate.open() // the zombie's lanes wake up and try to land their batches
	testwait.For(t, 30*time.Second, "every lane of a fenced", func() bool { return a.Stats().FencedApplies >= int64(inLane) })
	// Every lane of the fenced tenure exits; one that went on after its
	// fence would have been refused again before.
	select {
	case <-aSig.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the lanes of a's fenced tenure never exited")
	}
	select {
	case <-aSig.Halted:
	default:
		t.Error("a's lanes exited without being halted")
	}
	if n := a.Stats().FencedApplies; n != int64(inLane) {
		t.Errorf("a's fenced applies: %d, want %d (one per lane in flight, then every lane stopped)", n, inLane)
	}
	refused, accepted := 0, 0
	for _, ev := range s.Events() {
		if ev.Kind != memory.Apply || ev.Token != aTok {
			continue
		}
		if ev.Accepted {
			accepted++
		} else if ev.Gapped && ev.Stored.Member == bMember {
			refused++
		}
	}
	if refused != inLane || accepted != 0 {
		t.Fatalf("the sink refused %d and accepted %d of a's lanes' applies; want %d refused (one per lane in flight), none accepted", refused, accepted, inLane)
	}
	if st := a.Partitions(); len(st) == 1 && st[0].State != consumer.StateFenced && st[0].Token == aTok {
		t.Errorf("a's partition %+v, want fenced", st[0])
	}
	stopHole()
	checkInvariants(t, s, keys, perKey) // nothing of the zombie, no duplicate
	// a's lanes are stopped: it applies nothing more (goleak checks that
	// they exited when the test's workers close).
	if n := a.Stats().Batches; n != 0 {
		t.Errorf("a applied %d batches", n)
	}
}

// TestKeyConcurrencyCoversOffsetsWithoutRecords: the offsets a
// read_committed consumer never sees (transaction markers, an aborted
// transaction's records) are done with the record after them (its From),
// whatever lane it goes to: the watermark reaches the last record (the
// last commit marker waits for a record after it, as without lanes) and
// the sink's checkpoint has no gap left.
func TestKeyConcurrencyCoversOffsetsWithoutRecords(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(8)
	p := newTxnProducer(t, c)
	var last []int64
	for seq := range 6 {
		var recs []*kgo.Record
		for _, k := range keys {
			recs = append(recs, command(t, c.topic, 0, k, "append", strconv.Itoa(seq)))
		}
		p.txn(true, recs[:4]...)
		p.txn(false, command(t, c.topic, 0, keys[0], "append", "aborted")) // never seen
		last = p.txn(true, recs[4:]...)
	}
	w := startWorker(t, c, s, workerOpts{name: "lanes", keyConcurrency: 4, maxBatch: 2})
	end := last[len(last)-1] + 1
	if logEnd := logEnds(t, c)[0]; logEnd != end+1 {
		t.Fatalf("log end %d, want a commit marker after the last record at %d", logEnd, end-1)
	}
	testwait.For(t, 60*time.Second, "every command applied", func() bool { return appliedCount(s, keys) == len(keys)*6 })
	checkInvariants(t, s, keys, 6)
	testwait.For(t, 30*time.Second, "the watermark after the last record", func() bool {
		ps := w.Partitions()
		return len(ps) == 1 && ps[0].NextOffset == end
	})
	fences, err := s.Fences(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(fences) != 1 || fences[0].NextOffset != end || len(fences[0].Done) != 0 {
		t.Fatalf("sink fences %+v: want the checkpoint after the last record, %d, no gap", fences, end)
	}
}

// TestKeyConcurrencyTakesOverAGappedCheckpoint: a worker stops while one
// of its lanes is stuck on a hot key (its in-flight batch cancelled at
// the revoke timeout; no other key is bound to that lane, see
// TestKeyConcurrencyHotKeyDoesNotStarveOthers) and the others ran ahead, leaving a checkpoint with gaps; a new
// worker, with lanes or without, claims it and applies exactly the
// records the checkpoint does not hold: every key in order, exactly once.
// The one with lanes skips the done records itself, before the sink.
func TestKeyConcurrencyTakesOverAGappedCheckpoint(t *testing.T) {
	t.Parallel()
	for _, next := range []int{4, 1} {
		t.Run("then KeyConcurrency "+strconv.Itoa(next), func(t *testing.T) {
			t.Parallel()
			const lanes, perKey = 4, 10
			c := newCluster(t, 1)
			s := memory.New()
			keys := makeKeys(16)
			hot, others := keys[0], keys[1:]
			var recs []keySeq
			for i := range len(others) * perKey {
				recs = append(recs, keySeq{hot, i}, keySeq{others[i%len(others)], i / len(others)})
			}
			produceKeys(t, c, recs)
			g := newGate()
			t.Cleanup(g.open)
			h := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
				if string(cmd.Key) == hot {
					select { // stuck until the worker gives up on it
					case <-g.ch:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return appendHandler(ctx, tx, cmd)
			}
			a := startWorker(t, c, s, workerOpts{name: "a", handler: h, keyConcurrency: lanes, maxBatch: 4,
				queueSize: lanes * len(recs), revoke: 50 * time.Millisecond})
			testwait.For(t, 60*time.Second, "the other keys applied", func() bool { return appliedCount(s, others) == len(others)*perKey })
			a.Close()
			fences, err := s.Fences(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(fences) != 1 || len(fences[0].Done) == 0 || fences[0].NextOffset != 0 {
				t.Fatalf("sink fences after a stopped %+v: want a checkpoint at 0 with gaps (the fault did not happen)", fences)
			}
			left := len(recs) - appliedCount(s, keys)
			b := startWorker(t, c, s, workerOpts{name: "b", keyConcurrency: next, maxBatch: 4})
			testwait.For(t, 60*time.Second, "every command applied", func() bool { return appliedCount(s, keys) == len(recs) })
			checkLog(t, s, hot, len(others)*perKey)
			checkInvariants(t, s, others, perKey)
			st := b.Stats()
			if st.Records != int64(left) {
				t.Errorf("b applied %d records, want the %d the checkpoint did not hold", st.Records, left)
			}
			if next > 1 && st.Skipped != 0 {
				t.Errorf("b handed %d done records to the sink; a worker with lanes skips them itself", st.Skipped)
			}
		})
	}
}

// TestKeyConcurrencyRevokeFinishesInFlight: a worker closed (its
// partition revoked) while every lane is inside its batch lets each lane
// finish it: every in-flight batch lands, under the worker's own tenure,
// the revoke does not time out, and the offset it commits at once is the
// watermark after them.
func TestKeyConcurrencyRevokeFinishesInFlight(t *testing.T) {
	t.Parallel()
	const lanes, perKey = 4, 2
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(16)
	g := newGate()
	t.Cleanup(g.open)
	// Every call waits for the gate: the first lanes calls are one per
	// lane, every lane inside its batch.
	const inLane = lanes
	var entered atomic.Int32
	allIn := make(chan struct{})
	h := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		if entered.Add(1) == inLane {
			close(allIn)
		}
		<-g.ch // ignores ctx: only a graceful revoke lets the batch land
		return appendHandler(ctx, tx, cmd)
	}
	var revoked []consumer.Revoked
	var rmu sync.Mutex
	obs := consumer.ObserverFunc(func(e consumer.Event) {
		if r, ok := e.(consumer.Revoked); ok {
			rmu.Lock()
			revoked = append(revoked, r)
			rmu.Unlock()
		}
	})
	w := startWorker(t, c, s, workerOpts{name: "a", handler: h, keyConcurrency: lanes, maxBatch: 64, revoke: time.Minute,
		commitPace: time.Hour, observers: []consumer.Observer{obs}})
	testwait.For(t, 30*time.Second, "the partition owned", func() bool { return len(w.Owned()) == 1 })
	tok := w.Owned()[0]
	sig, ok := consumer.TenureSignalsOf(w, 0)
	if !ok || sig.Token != tok {
		t.Fatalf("the tenure of partition 0: %v %v, want %v", sig.Token, ok, tok)
	}
	produce(t, c, 1, keys, 0, perKey)
	select {
	case <-allIn:
	case <-time.After(30 * time.Second):
		t.Fatal("the lanes never were all inside their batches")
	}
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	// The revoke begins while every lane is in flight, held by the gate.
	select {
	case <-sig.Stopping:
	case <-time.After(30 * time.Second):
		t.Fatal("Close never began the revoke")
	}
	select {
	case <-sig.Exited:
		t.Fatal("the tenure exited while its lanes were held in their batches")
	default:
	}
	g.open()
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Fatal("Close did not return")
	}
	checkInvariants(t, s, keys, perKey)
	accepted := 0
	for _, ev := range s.Events() {
		if ev.Kind == memory.Apply && ev.Accepted {
			if ev.Token != tok || !ev.Gapped {
				t.Errorf("apply %+v, want only the worker's gapped applies", ev)
			}
			accepted++
		}
	}
	if accepted < inLane {
		t.Errorf("%d applies landed, want at least one per lane in flight (%d)", accepted, inLane)
	}
	rmu.Lock()
	defer rmu.Unlock()
	if len(revoked) != 1 || revoked[0].TimedOut || revoked[0].NextOffset != int64(len(keys)*perKey) {
		t.Fatalf("revoked events %+v, want one, not timed out, at the watermark %d", revoked, len(keys)*perKey)
	}
	if got := committedOffsets(t, c)[0]; got != int64(len(keys)*perKey) {
		t.Errorf("committed offset %d after the revoke, want the watermark %d (the committer's pace is an hour: the revoke committed it)", got, len(keys)*perKey)
	}
}

// TestKeyConcurrencyDeduplicates: with lanes, a deduplicating sink gets
// the records' command IDs (a lane's Apply with IDs): a command written
// twice, in a later batch or in the same one, is applied once.
func TestKeyConcurrencyDeduplicates(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	var seen appliedEvents
	w := startWorker(t, c, s, workerOpts{name: "dedupe", keyConcurrency: 4, observers: []consumer.Observer{&seen}})
	testwait.For(t, 30*time.Second, "the worker to own the partition", func() bool { return len(w.Owned()) == 1 })
	produceIDs(t, c, idRec{id: "a", payload: "0"})
	testwait.For(t, 30*time.Second, "the first command applied", func() bool { return len(logOf(s, "k")) == 1 })
	produceIDs(t, c, idRec{id: "a", payload: "0"}, idRec{id: "b", payload: "1"}, idRec{id: "b", payload: "1"})
	testwait.For(t, 30*time.Second, "the watermark past every record", func() bool {
		ps := w.Partitions()
		return len(ps) == 1 && ps[0].NextOffset == 4
	})
	// The position moves before the batch's Applied event is counted.
	testwait.For(t, 30*time.Second, "every record counted in Stats", func() bool {
		st := w.Stats()
		return st.Records+st.Duplicates >= 4
	})
	if got := logOf(s, "k"); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("log %v, want [0 1]: a command written twice was applied twice", got)
	}
	if st := w.Stats(); st.Duplicates != 2 || st.Records != 2 {
		t.Errorf("Stats %+v, want 2 duplicates and 2 records applied", st)
	}
	for _, ev := range s.Events() {
		if ev.Kind == memory.Apply && ev.Accepted && (!ev.Gapped || ev.IDs == nil) {
			t.Errorf("apply %+v: want gapped applies with IDs", ev)
		}
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
}
