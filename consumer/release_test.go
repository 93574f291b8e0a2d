package consumer_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/memory"
)

// heldClaims is a sink whose Claims selected by hold wait until release is
// closed. With honourCtx a held claim gives up when its context is
// cancelled (a sink that stops when told), reporting it on cancelled;
// without, it ignores its context (a claim already on the wire) and then
// reaches the sink as sent. refuse, if set, may refuse a claim before it
// reaches the sink (a refusal the test makes up).
type heldClaims struct {
	*memory.Sink
	hold      func(tok epochs.Token, n int) bool // n counts the claims of tok, from 1
	refuse    func(tok epochs.Token, n int) error
	honourCtx bool
	held      chan epochs.Token // the token of each claim that starts to wait
	cancelled chan epochs.Token // the token of each held claim whose context was cancelled
	release   chan struct{}
	once      sync.Once

	mu     sync.Mutex
	counts map[epochs.Token]int
	passed []epochs.Token // the claims that reached the sink, in order
}

func newHeldClaims(s *memory.Sink, honourCtx bool, hold func(epochs.Token, int) bool) *heldClaims {
	return &heldClaims{Sink: s, hold: hold, honourCtx: honourCtx, held: make(chan epochs.Token, 16),
		cancelled: make(chan epochs.Token, 16), release: make(chan struct{}), counts: map[epochs.Token]int{}}
}

func (h *heldClaims) Unwrap() sink.Sink[*memory.Tx] { return h.Sink }

func (h *heldClaims) open() { h.once.Do(func() { close(h.release) }) }

// reached returns the claims that reached the sink so far.
func (h *heldClaims) reached() []epochs.Token {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.passed)
}

func (h *heldClaims) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	h.mu.Lock()
	h.counts[tok]++
	n := h.counts[tok]
	h.mu.Unlock()
	if h.refuse != nil {
		if err := h.refuse(tok, n); err != nil {
			return sink.Checkpoint{}, err
		}
	}
	if h.hold != nil && h.hold(tok, n) {
		h.held <- tok
		if h.honourCtx {
			select {
			case <-h.release:
			case <-ctx.Done():
				h.cancelled <- tok
				return sink.Checkpoint{}, ctx.Err()
			}
		} else {
			<-h.release
			ctx = context.WithoutCancel(ctx) // on the wire already: it reaches the sink as sent
		}
	}
	h.mu.Lock()
	h.passed = append(h.passed, tok)
	h.mu.Unlock()
	return h.Sink.Claim(ctx, tok, obs)
}

// evict holds back every heartbeat of member until the coordinator has
// removed it from the group and then (if not nil) until holds, then lets
// them through: the member learns it lost its partitions (a session that
// expired while it was paused).
func evict(t *testing.T, c *cluster, member string, until func() bool) {
	t.Helper()
	swallowed, stop := blackholeHeartbeats(c.kf, func() string { return member })
	defer stop()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	testwait.For(t, 30*time.Second, "the coordinator to evict "+member, func() bool {
		groups, err := adm.DescribeGroups(t.Context(), c.group)
		if err != nil || groups[c.group].Err != nil {
			return false
		}
		for _, m := range groups[c.group].Members {
			if m.MemberID == member {
				return false
			}
		}
		return true
	})
	if swallowed.Load() == 0 {
		t.Fatal("no heartbeat of the member was held back: the eviction is not the test's")
	}
	if until != nil {
		testwait.For(t, 30*time.Second, "the group to settle without "+member, until)
	}
}

// events is an Observer that keeps every event, for tests that wait on
// one.
type events struct {
	mu  sync.Mutex
	all []consumer.Event
}

func (e *events) Observe(ev consumer.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

// find returns the events that match.
func (e *events) find(match func(consumer.Event) bool) []consumer.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []consumer.Event
	for _, ev := range e.all {
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// TestLostWhileReclaimingCancelsTheClaim: a partition whose claims are
// refused (the stored epoch is above any the group hands out) is claimed
// again periodically; one re-claim hangs in the sink. The member is
// evicted and learns it lost the partition: the hanging claim's context
// is cancelled at once (the tenure is gone), the sink sees no claim of the
// old tenure after the loss, and the abandoned claim is reported as
// discarded, not as a block of the partition.
func TestLostWhileReclaimingCancelsTheClaim(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1)
	s := memory.New()
	regressAll(t, c, s, 1) // held at epoch 10 by the previous incarnation
	var first atomic.Pointer[epochs.Token]
	h := newHeldClaims(s, true, func(tok epochs.Token, n int) bool {
		first.CompareAndSwap(nil, &tok)
		return tok == *first.Load() && n == 2 // the first tenure's first re-claim
	})
	rec := &events{}
	var reachedAtLoss atomic.Int64
	reachedAtLoss.Store(-1)
	lossSeen := consumer.ObserverFunc(func(e consumer.Event) {
		if l, ok := e.(consumer.Lost); ok && first.Load() != nil && l.Token == *first.Load() {
			reachedAtLoss.Store(int64(len(h.reached())))
		}
	})
	w := startWorker(t, c, s, workerOpts{noTakeover: true, name: "a", sink: h, reclaimInterval: 50 * time.Millisecond,
		observers: []consumer.Observer{rec, lossSeen}})
	t.Cleanup(h.open) // before the worker's Close

	var old epochs.Token
	select {
	case old = <-h.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the blocked partition was never claimed again")
	}
	if ps := w.Partitions(); len(ps) != 1 || ps[0].State != consumer.StateBlocked || !errors.Is(ps[0].LastErr, consumer.ErrEpochRegressed) {
		t.Fatalf("partitions %+v: want the partition blocked by the regressed epoch", ps)
	}

	evict(t, c, old.Member, nil)
	testwait.For(t, 30*time.Second, "the worker to learn it lost the partition", func() bool { return reachedAtLoss.Load() >= 0 })
	select {
	case tok := <-h.cancelled:
		if tok != old {
			t.Fatalf("cancelled claim of %v, want the lost tenure's %v", tok, old)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the lost tenure's claim was not cancelled: a tenure that is gone keeps claiming")
	}
	testwait.For(t, 30*time.Second, "the abandoned claim reported as discarded", func() bool {
		return len(rec.find(func(e consumer.Event) bool {
			d, ok := e.(consumer.Discarded)
			return ok && d.Token == old && d.Op == sink.OpClaim && errors.Is(d.Err, context.Canceled)
		})) == 1
	})
	// The worker rejoined under a new member ID; its new tenure is refused
	// like the first and claimed again: let a few of its re-claims pass.
	testwait.For(t, 30*time.Second, "the new tenure's re-claims", func() bool {
		n := 0
		for _, tok := range h.reached() {
			if tok.Member != old.Member {
				n++
			}
		}
		return n >= 3
	})
	if got := h.reached()[reachedAtLoss.Load():]; slices.Contains(got, old) {
		t.Fatalf("claims that reached the sink after the loss %v include the lost tenure's %v", got, old)
	}
	if bl := rec.find(func(e consumer.Event) bool {
		b, ok := e.(consumer.Blocked)
		return ok && b.Token == old
	}); len(bl) != 1 {
		t.Errorf("%d Blocked events of the lost tenure, want only the one before the loss", len(bl))
	}
	if st := w.Stats(); st.Discarded != 1 || st.Lost != 1 {
		t.Errorf("stats %+v: want one discarded answer and one lost partition", st)
	}
}

// TestStaleClaimDoesNotStopTheSuccessor: a partition's first tenure is
// blocked (its claim refused as a changed log, which the test makes up)
// and its re-claim is on the wire when the member is evicted. The worker
// rejoins, is assigned the partition again, claims it under a new tenure
// and applies. Then the old tenure's claim reaches the sink, which fences
// it (the successor's epoch is higher): that answer belongs to a tenure
// that is gone, so it must not stop the successor, which goes on applying
// what arrives.
func TestStaleClaimDoesNotStopTheSuccessor(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1)
	s := memory.New()
	keys := makeKeys(3)
	var first atomic.Pointer[epochs.Token]
	h := newHeldClaims(s, false, func(tok epochs.Token, n int) bool {
		return first.Load() != nil && tok == *first.Load() && n == 2
	})
	h.refuse = func(tok epochs.Token, n int) error {
		if first.CompareAndSwap(nil, &tok) { // the first tenure's first claim
			return &sink.LogChangedError{Scope: tok.Scope(), Case: sink.ErrTopicRecreated, StoredTopicID: "made-up", Observed: sink.Observed{TopicID: "another"}}
		}
		return nil
	}
	rec := &events{}
	w := startWorker(t, c, s, workerOpts{name: "a", sink: h, reclaimInterval: 50 * time.Millisecond,
		observers: []consumer.Observer{rec}})
	t.Cleanup(h.open) // before the worker's Close

	var old epochs.Token
	select {
	case old = <-h.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the blocked partition was never claimed again")
	}
	evict(t, c, old.Member, nil)
	testwait.For(t, 30*time.Second, "the successor tenure to own the partition", func() bool {
		owned := w.Owned()
		return len(owned) == 1 && owned[0].Member != old.Member
	})
	succ := w.Owned()[0]
	if succ.Epoch <= old.Epoch {
		t.Fatalf("successor %v is not newer than the old tenure %v", succ, old)
	}
	produce(t, c, 1, keys, 0, 3)
	testwait.For(t, 30*time.Second, "the successor to apply", func() bool { return appliedCount(s, keys) == len(keys)*3 })

	// The old tenure's claim lands now, after the successor's.
	h.open()
	testwait.For(t, 30*time.Second, "the worker to handle the old tenure's late claim", func() bool {
		return len(rec.find(func(e consumer.Event) bool {
			switch e := e.(type) {
			case consumer.Discarded:
				return e.Token == old
			case consumer.Fenced:
				return e.Token == old
			}
			return false
		})) > 0
	})
	refused := false
	for _, ev := range s.Events() {
		if ev.Kind == memory.Claim && ev.Token == old && !ev.Accepted && ev.Stored == succ {
			refused = true
		}
	}
	if !refused {
		t.Fatal("the sink did not refuse the old tenure's late claim against the successor: the fault did not happen")
	}
	produce(t, c, 1, keys, 3, 6)
	testwait.For(t, 30*time.Second, "the successor to apply what arrives after the stale claim", func() bool {
		return appliedCount(s, keys) == len(keys)*6
	})
	checkInvariants(t, s, keys, 6)
	if ps := w.Partitions(); len(ps) != 1 || ps[0].Token != succ || ps[0].State != consumer.StateRunning {
		t.Errorf("partitions %+v: want the successor running", ps)
	}
	if f := rec.find(func(e consumer.Event) bool { _, ok := e.(consumer.Fenced); return ok }); len(f) != 0 {
		t.Errorf("Fenced events %v: the stale claim's answer was reported as a fence", f)
	}
	if st := w.Stats(); st.Discarded != 1 {
		t.Errorf("Stats.Discarded = %d, want 1", st.Discarded)
	}
}

// TestHungReclaimHoldsUpOnlyItsPartition: both partitions are blocked
// (regressed epochs); partition 0's re-claim hangs in the sink, ignoring
// its context. The operator resets partition 1's fence: it is claimed
// again and applies while partition 0's claim still hangs.
func TestHungReclaimHoldsUpOnlyItsPartition(t *testing.T) {
	t.Parallel()
	const partitions = 2
	c := newCluster(t, partitions)
	s := memory.New()
	regressAll(t, c, s, partitions)
	h := newHeldClaims(s, false, func(tok epochs.Token, n int) bool { return tok.Partition == 0 && n == 2 })
	w := startWorker(t, c, s, workerOpts{noTakeover: true, name: "a", sink: h, reclaimInterval: 50 * time.Millisecond})
	t.Cleanup(h.open) // before the worker's Close
	select {
	case <-h.held:
	case <-time.After(30 * time.Second):
		t.Fatal("partition 0 was never claimed again")
	}
	testwait.For(t, 30*time.Second, "both partitions blocked", func() bool {
		ps := w.Partitions()
		return len(ps) == partitions && ps[0].State == consumer.StateBlocked && ps[1].State == consumer.StateBlocked
	})
	fs, err := s.Fences(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Scope.Partition == 1 {
			if _, err := s.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: f.Scope, Expect: f, Reason: "group recreated (test)"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys := []string{}
	for _, k := range makeKeys(20) {
		if envelope.Partition([]byte(k), partitions) == 1 {
			keys = append(keys, k)
		}
	}
	produce(t, c, partitions, keys, 0, 2)
	testwait.For(t, 30*time.Second, "partition 1 to resume while partition 0's claim hangs", func() bool {
		return appliedCount(s, keys) == len(keys)*2
	})
	if owned := w.Owned(); len(owned) != 1 || owned[0].Partition != 1 {
		t.Fatalf("owned %v: want partition 1 only", owned)
	}
	select {
	case <-h.release:
		t.Fatal("the hung claim was released: the test did not hold it")
	default:
	}
	checkInvariants(t, s, keys, 2)
}
