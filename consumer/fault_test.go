package consumer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/memory"
)

// blackholeHeartbeats holds back every heartbeat of member at the broker
// (no reply, no effect) until the returned stop is called; then the held
// heartbeats are processed as the coordinator sees fit. It counts them so
// the test can assert the fault happened.
func blackholeHeartbeats(c *kfake.Cluster, member func() string) (swallowed *atomic.Int64, stop func()) {
	swallowed = new(atomic.Int64)
	stopped := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case <-stopped:
			c.DropControl()
			return nil, nil, false
		default:
		}
		if hb, ok := req.(*kmsg.HeartbeatRequest); ok && hb.MemberID == member() {
			swallowed.Add(1)
			c.SleepControl(func() { <-stopped })
		}
		return nil, nil, false
	})
	return swallowed, func() { once.Do(func() { close(stopped) }) }
}

// appliedBy reports whether member has an accepted Apply in the sink.
func appliedBy(s *memory.Sink, member string) bool {
	for _, ev := range s.Events() {
		if ev.Kind == memory.Apply && ev.Accepted && ev.Token.Member == member {
			return true
		}
	}
	return false
}

func claimedBy(s *memory.Sink, member string) (epochs.Token, bool) {
	for _, ev := range s.Events() {
		if ev.Kind == memory.Claim && ev.Accepted && ev.Token.Member == member {
			return ev.Token, true
		}
	}
	return epochs.Token{}, false
}

// zombieSetup: worker A owns the topic's single partition and blocks in its
// handler; its heartbeats are blackholed so the coordinator evicts it and B
// takes over. bHandler lets a test gate B's writes too.
type zombie struct {
	c        *cluster
	s        *memory.Sink
	a, b     *consumer.Worker[*memory.Tx]
	aGate    *gate
	aFenced  chan error
	stopHole func()
	swallow  *atomic.Int64
	keys     []string
	perKey   int
}

func setupZombie(t *testing.T, bHandler consumer.Handler[*memory.Tx]) *zombie {
	return setupZombieOpts(t, bHandler, zombieOpts{})
}

// zombieOpts vary setupZombie: A's and B's metrics registered on aReg and
// bReg (nil: no metrics), and aFails, if set, the error A's handler
// returns for the command it blocked on.
type zombieOpts struct {
	aReg, bReg prometheus.Registerer
	aFails     error
}

// setupZombieRegs is setupZombie with A's and B's metrics registered on
// aReg and bReg.
func setupZombieRegs(t *testing.T, bHandler consumer.Handler[*memory.Tx], aReg, bReg prometheus.Registerer) *zombie {
	return setupZombieOpts(t, bHandler, zombieOpts{aReg: aReg, bReg: bReg})
}

func setupZombieOpts(t *testing.T, bHandler consumer.Handler[*memory.Tx], zo zombieOpts) *zombie {
	t.Helper()
	aReg, bReg := zo.aReg, zo.bReg
	z := &zombie{c: newFakeCluster(t, 1), s: memory.New(), aGate: newGate(), aFenced: make(chan error, 16), keys: makeKeys(5), perKey: 20}
	var aMember atomic.Value
	aMember.Store("")
	z.swallow, z.stopHole = blackholeHeartbeats(z.c.kf, func() string { return aMember.Load().(string) })

	var blockOnce sync.Once
	aHandler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		first := false
		blockOnce.Do(func() {
			// A "pauses" mid-batch: it ignores its context, like a
			// process frozen by SIGSTOP or a long GC pause.
			aMember.Store(cmd.Token.Member)
			z.aGate.wait()
			first = true
		})
		if first && zo.aFails != nil {
			return zo.aFails
		}
		return appendHandler(ctx, tx, cmd)
	}
	z.a = startWorker(t, z.c, z.s, workerOpts{name: "a", handler: aHandler, revoke: time.Minute,
		onFenced: func(err error) { z.aFenced <- err }, registerer: aReg})
	testwait.For(t, 30*time.Second, "a to own the partition", func() bool { return len(z.a.Owned()) == 1 })
	z.b = startWorker(t, z.c, z.s, workerOpts{name: "b", handler: bHandler, registerer: bReg})
	// Cleanups run last-in first-out: on failure, unblock the handlers and
	// the heartbeats before the workers are closed.
	t.Cleanup(z.stopHole)
	t.Cleanup(z.aGate.open)
	produce(t, z.c, 1, z.keys, 0, z.perKey)
	select {
	case <-z.aGate.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("a never started its first batch")
	}
	return z
}

// TestZombieApplyFenced: a worker whose heartbeats are blackholed while its
// handler is blocked is evicted; the new owner claims and processes; when
// the old handler is released its Apply is rejected with ErrFenced and has
// no effect.
func TestZombieApplyFenced(t *testing.T) {
	t.Parallel()
	z := setupZombie(t, nil)
	aTok := z.a.Owned()[0]

	// B takes over once the coordinator evicts A, and applies everything.
	testwait.For(t, 60*time.Second, "b to apply every command", func() bool {
		return appliedCount(z.s, z.keys) == len(z.keys)*z.perKey
	})
	bMember, _ := z.b.Member()
	bTok, ok := claimedBy(z.s, bMember)
	if !ok || bTok.Epoch <= aTok.Epoch {
		t.Fatalf("b's claim %v is not newer than a's tenure %v", bTok, aTok)
	}
	if z.swallow.Load() == 0 {
		t.Fatal("no heartbeat of a was blackholed: the fault did not happen")
	}
	rejectedBefore := z.s.Rejected()

	// The zombie wakes up and tries to land its batch.
	z.aGate.open()
	var err error
	select {
	case err = <-z.aFenced:
	case <-time.After(30 * time.Second):
		t.Fatal("a's late Apply was not rejected")
	}
	var fe *sink.FencedError
	if !errors.Is(err, sink.ErrFenced) || !errors.As(err, &fe) || fe.Op != sink.OpApply {
		t.Fatalf("a's late write: %v, want a fenced apply", err)
	}
	if fe.Offered != aTok || fe.Stored.Member != bMember {
		t.Fatalf("fenced error tokens: offered %v stored %v; want a=%v b=%s", fe.Offered, fe.Stored, aTok, bMember)
	}
	if z.s.Rejected() <= rejectedBefore || z.a.Stats().FencedApplies == 0 {
		t.Fatalf("rejection not recorded: sink rejected %d (before %d), a stats %+v", z.s.Rejected(), rejectedBefore, z.a.Stats())
	}
	if appliedBy(z.s, aTok.Member) {
		t.Fatal("the zombie's write landed")
	}
	z.stopHole()                              // a's held heartbeats reach the coordinator: it learns it was evicted
	checkInvariants(t, z.s, z.keys, z.perKey) // no duplicate from the zombie
}

// TestZombieWindow (hazard 4): the old owner wakes after the new owner's
// claim but before the new owner's first write. It is still rejected,
// because the new owner claims before it works.
func TestZombieWindow(t *testing.T) {
	t.Parallel()
	bGate := newGate()
	bHandler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		bGate.wait()
		return appendHandler(ctx, tx, cmd)
	}
	z := setupZombie(t, bHandler)
	t.Cleanup(bGate.open)
	aTok := z.a.Owned()[0]

	select {
	case <-bGate.entered: // B has claimed and is inside its first batch
	case <-time.After(60 * time.Second):
		t.Fatal("b never started processing")
	}
	bMember, _ := z.b.Member()
	if _, ok := claimedBy(z.s, bMember); !ok {
		t.Fatal("b processes without having claimed")
	}
	if appliedBy(z.s, bMember) {
		t.Fatal("b already wrote: the window under test is gone")
	}
	if z.swallow.Load() == 0 {
		t.Fatal("no heartbeat of a was blackholed: the fault did not happen")
	}

	z.aGate.open() // the zombie wakes inside the window
	select {
	case err := <-z.aFenced:
		if !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("a: %v, want ErrFenced", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a's write in the zombie window was not rejected")
	}
	if appliedBy(z.s, aTok.Member) {
		t.Fatal("the zombie's write landed in the window")
	}
	z.stopHole()

	bGate.open()
	testwait.For(t, 60*time.Second, "b to apply every command", func() bool {
		return appliedCount(z.s, z.keys) == len(z.keys)*z.perKey
	})
	checkInvariants(t, z.s, z.keys, z.perKey)
}

// TestEpochBumpKeepsTenure (hazard 2): a cooperative rebalance bumps the
// generation while the owner keeps some partitions; its writes under the
// original tenure token keep succeeding.
func TestEpochBumpKeepsTenure(t *testing.T) {
	t.Parallel()
	const partitions = 4
	c := newCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(40)
	a := startWorker(t, c, s, workerOpts{name: "a"})
	testwait.For(t, 30*time.Second, "a to own every partition", func() bool { return len(a.Owned()) == partitions })
	initial := map[int32]epochs.Token{}
	for _, tok := range a.Owned() {
		initial[tok.Partition] = tok
	}
	produce(t, c, partitions, keys, 0, 10)
	testwait.For(t, 30*time.Second, "first half applied", func() bool { return appliedCount(s, keys) == 400 })

	b := startWorker(t, c, s, workerOpts{name: "b"})
	testwait.For(t, 30*time.Second, "b to own partitions", func() bool { return len(b.Owned()) > 0 })
	_, gen := a.Member()
	kept := a.Owned()
	if len(kept) == 0 || len(kept) == partitions {
		t.Fatalf("a kept %d partitions; the test needs a split", len(kept))
	}
	for _, tok := range kept {
		if tok != initial[tok.Partition] {
			t.Fatalf("kept partition %d changed token: %v -> %v", tok.Partition, initial[tok.Partition], tok)
		}
		if gen <= tok.Epoch {
			t.Fatalf("generation did not move past the tenure epoch (%d <= %d): no bump happened", gen, tok.Epoch)
		}
	}
	bumpSeq := uint64(len(s.Events()))
	produce(t, c, partitions, keys, 10, 20)
	testwait.For(t, 30*time.Second, "second half applied", func() bool { return appliedCount(s, keys) == 800 })

	// a's writes after the bump were accepted under the original token.
	keptAfter := map[int32]bool{}
	for _, ev := range s.Events() {
		if ev.Seq <= bumpSeq || ev.Kind != memory.Apply || !ev.Accepted {
			continue
		}
		for _, tok := range kept {
			if ev.Token == tok {
				keptAfter[tok.Partition] = true
			}
		}
	}
	if len(keptAfter) == 0 {
		t.Fatal("no write of a kept partition landed after the bump under the original token")
	}
	if a.Stats().FencedApplies+a.Stats().FencedClaims+b.Stats().FencedApplies+b.Stats().FencedClaims != 0 {
		t.Fatalf("owner fenced itself: a=%+v b=%+v", a.Stats(), b.Stats())
	}
	checkInvariants(t, s, keys, 20)
}

// recreatedGroup runs three members of a group in turn over a
// two-partition topic, each claiming at a higher generation, then deletes
// the group, so that its next members start again at a low generation:
// every stored holder is of an earlier incarnation.
func recreatedGroup(t *testing.T) (*cluster, *memory.Sink, []string) {
	t.Helper()
	const partitions = 2
	c := newCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(10)
	produce(t, c, partitions, keys, 0, 5)

	// Three members in turn: each claims at a higher generation.
	for i, name := range []string{"w1", "w2", "w3"} {
		w := startWorker(t, c, s, workerOpts{name: name})
		testwait.For(t, 30*time.Second, name+" to own both partitions", func() bool { return len(w.Owned()) == partitions })
		produce(t, c, partitions, keys, 5+i, 6+i)
		want := len(keys) * (6 + i)
		testwait.For(t, 30*time.Second, "applied", func() bool { return appliedCount(s, keys) == want })
		w.Close()
	}
	fences, _ := s.Fences(context.Background())
	var stored int32
	for _, f := range fences {
		stored = max(stored, f.Holder.Epoch)
	}
	if stored < 3 {
		t.Fatalf("stored epochs only reached %d; the test needs > 1", stored)
	}

	// The group is deleted and recreated: generations restart.
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if res, err := adm.DeleteGroups(context.Background(), c.group); err != nil || res.Error() != nil {
		t.Fatalf("delete group: %v %v", err, res.Error())
	}
	return c, s, keys
}

// TestGenerationBackwards (hazard 3): after the group is deleted and
// recreated, with Config.NoTakeover, claims fail loudly with an error
// naming the likely cause; an explicit, audited reset lets work resume
// with nothing applied twice.
func TestGenerationBackwards(t *testing.T) {
	t.Parallel()
	const partitions = 2
	c, s, keys := recreatedGroup(t)

	blocked := make(chan error, 64)
	w := startWorker(t, c, s, workerOpts{name: "w4", reclaimInterval: 100 * time.Millisecond, noTakeover: true,
		observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			if b, ok := e.(consumer.Blocked); ok {
				select {
				case blocked <- b.Err:
				default:
				}
			}
		})}})
	var got error
	select {
	case got = <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("claims after recreating the group were not refused")
	}
	if !errors.Is(got, consumer.ErrEpochRegressed) || !errors.Is(got, sink.ErrFenced) {
		t.Fatalf("error %v should match ErrEpochRegressed and sink.ErrFenced", got)
	}
	for _, want := range []string{"went backwards", "deleted and recreated", "reset"} {
		if !strings.Contains(got.Error(), want) {
			t.Errorf("error does not name the cause (%q): %v", want, got)
		}
	}
	if len(w.Owned()) != 0 {
		t.Fatalf("worker processes partitions despite refused claims: %v", w.Owned())
	}
	testwait.For(t, 30*time.Second, "both partitions blocked by the regression", func() bool {
		ps := w.Partitions()
		for _, p := range ps {
			if p.State != consumer.StateBlocked || !errors.Is(p.LastErr, consumer.ErrEpochRegressed) {
				return false
			}
		}
		return len(ps) == partitions
	})

	// The operator's explicit, audited reset (a compare-and-set on what
	// the operator saw, keeping the checkpoint). The running worker notices
	// and claims again by itself, proving its membership first.
	fences, err := s.Fences(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fences {
		if _, err := s.ResetFence(context.Background(), fenceadmin.ResetRequest{Scope: f.Scope, Expect: f, Reason: "group g recreated; ticket OPS-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.Audit()) != partitions {
		t.Fatalf("audit trail has %d entries, want %d", len(s.Audit()), partitions)
	}
	testwait.For(t, 30*time.Second, "w4 to claim both partitions again by itself", func() bool { return len(w.Owned()) == partitions })
	produce(t, c, partitions, keys, 8, 10)
	testwait.For(t, 30*time.Second, "all applied", func() bool { return appliedCount(s, keys) == len(keys)*10 })
	checkInvariants(t, s, keys, 10)
}

// TestGenerationBackwardsTakenOver (hazard 3, docs/design.md#expired-groups):
// after the group is deleted and recreated (or expired), the first member
// of the new incarnation takes every partition over by itself: it proves
// its membership, and the sink accepts its claim below the stored holder
// because the group epoch it saw is below that holder's, auditing the
// takeover as a reset of the holder. No operator acts, nothing is applied
// twice, and the previous incarnation's last holder, which wakes and
// claims again, is refused (a proof is required of every later claim) and
// cannot write.
func TestGenerationBackwardsTakenOver(t *testing.T) {
	t.Parallel()
	const partitions = 2
	c, s, keys := recreatedGroup(t)
	before, err := s.Fences(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var took []consumer.Claimed
	w := startWorker(t, c, s, workerOpts{name: "w4", reclaimInterval: 100 * time.Millisecond,
		observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			if cl, ok := e.(consumer.Claimed); ok && cl.TookOver != nil {
				mu.Lock()
				took = append(took, cl)
				mu.Unlock()
			}
		})}})
	testwait.For(t, 30*time.Second, "w4 to take both partitions over", func() bool { return len(w.Owned()) == partitions })
	produce(t, c, partitions, keys, 8, 10)
	testwait.For(t, 30*time.Second, "all applied", func() bool { return appliedCount(s, keys) == len(keys)*10 })
	mu.Lock()
	n := len(took)
	mu.Unlock()
	if n != partitions {
		t.Fatalf("%d claims were takeovers, want %d (one per partition)", n, partitions)
	}
	for _, f := range before {
		hs, err := s.History(context.Background(), f.Scope)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(hs, func(e fenceadmin.Entry) bool { return e.Kind == fenceadmin.KindReset })
		if i < 0 || hs[i].Token != f.Holder || hs[i].Reason != fenceadmin.TakeoverReason || i+1 >= len(hs) || !hs[i+1].Proven ||
			hs[i+1].Token.Epoch >= f.Holder.Epoch {
			t.Fatalf("history of %s = %+v: want the takeover audited as a reset of %s, then a proven claim below it", f.Scope, hs, f.Holder)
		}
		// The previous incarnation's last holder wakes.
		if _, err := s.Claim(context.Background(), f.Holder, sink.Observed{}); !errors.Is(err, sink.ErrProofRequired) {
			t.Fatalf("the previous holder %s claims again: %v, want ErrProofRequired", f.Holder, err)
		}
		if _, err := s.Apply(context.Background(), f.Holder, sink.Batch{Offsets: []int64{0}}, func(context.Context, *memory.Tx, int) error { return nil }); !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("the previous holder %s writes: %v, want ErrFenced", f.Holder, err)
		}
	}
	if st := w.Stats(); st.FencedApplies != 0 {
		t.Fatalf("the new worker was fenced: %+v", st)
	}
	checkInvariants(t, s, keys, 10)
}

// TestResetUnderLiveTenure: an operator force-resets the fence of a
// partition a worker is processing, moving its checkpoint back. The
// worker's next write is refused (nobody holds the scope), and instead of
// giving the partition up as a zombie it claims again — proving its
// membership — and resumes at the checkpoint the reset left.
func TestResetUnderLiveTenure(t *testing.T) {
	t.Parallel()
	const partitions = 1
	c := newCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(4)
	produce(t, c, partitions, keys, 0, 5)

	var mu sync.Mutex
	var blocked []error
	var firsts []int64
	w := startWorker(t, c, s, workerOpts{name: "w1", reclaimInterval: time.Hour, // only the reset's own wake-up re-claims
		observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e := e.(type) {
			case consumer.Blocked:
				blocked = append(blocked, e.Err)
			case consumer.Applied:
				firsts = append(firsts, e.FirstOffset)
			}
		})}})
	testwait.For(t, 30*time.Second, "applied", func() bool { return appliedCount(s, keys) == len(keys)*5 })

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	reports, err := admin.Diagnose(ctx, cl, s, c.group, c.topic)
	if err != nil || len(reports) != 1 {
		t.Fatalf("diagnose: %v, %d reports", err, len(reports))
	}
	r := reports[0]
	if len(r.Problems) != 0 || r.Fence.NextOffset != int64(len(keys)*5) {
		t.Fatalf("a healthy scope was diagnosed %+v", r)
	}
	req := admin.Request{Scope: r.Fence.Scope, Expect: admin.ExpectToken(r.Fence), Checkpoint: admin.Checkpoint{RestartAt: "15"}, Reason: "replay the last five (test)"}
	if _, err := admin.Reset(ctx, cl, s, req); !errors.Is(err, admin.ErrNoCause) {
		t.Fatalf("unforced reset of a healthy scope: %v, want ErrNoCause", err)
	}
	req.Force = true
	res, err := admin.Reset(ctx, cl, s, req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Resumes {
		t.Fatalf("the reset says no worker resumes: %+v", res)
	}
	mu.Lock()
	firsts = nil
	mu.Unlock()

	// The worker's next write finds the fence reset.
	produce(t, c, partitions, keys, 5, 6)
	testwait.For(t, 30*time.Second, "the worker to claim again and apply past the reset", func() bool {
		fs, _ := s.Fences(ctx)
		// The Applied event is emitted after the sink's Apply returns:
		// wait for it too, not only for the fence that Apply moved.
		mu.Lock()
		reported := len(firsts) > 0
		mu.Unlock()
		return reported && len(fs) == 1 && fs[0].Holder.Member == r.Fence.Holder.Member && fs[0].NextOffset == int64(len(keys)*6)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(blocked) == 0 || !errors.Is(blocked[0], consumer.ErrFenceReset) || !errors.Is(blocked[0], sink.ErrFenced) {
		t.Fatalf("blocked events %v: want one matching ErrFenceReset and sink.ErrFenced", blocked)
	}
	if len(firsts) == 0 || firsts[0] != 15 {
		t.Fatalf("applies after the reset start at %v, want 15 (the reset's checkpoint)", firsts)
	}
	if got := w.Stats(); got.Claims < 2 || got.FenceResets < 1 || got.FencedApplies != 0 {
		t.Fatalf("stats %+v: want a second claim after an apply refused under a reset fence, and no fenced apply", got)
	}
	if hs, _ := s.History(ctx, r.Fence.Scope); hs[len(hs)-1].Kind != "claim" || hs[len(hs)-2].Kind != "reset" {
		t.Fatalf("history does not end with the reset and the worker's claim: %+v", hs[len(hs)-2:])
	}
}

// TestTopicRecreatedBlocksUntilReset: the topic is deleted and created
// again under a running worker. Its claim on the new log is refused as a
// changed log (never silently restarted at offset 0, never mistaken for a
// zombie); nothing of the new log is applied until an operator resets the
// fence onto it; then the same worker resumes by itself and every key's
// commands are applied exactly once, in order, across both logs.
func TestTopicRecreatedBlocksUntilReset(t *testing.T) {
	t.Parallel()
	const partitions = 1
	c := newCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(4)
	produce(t, c, partitions, keys, 0, 5)

	var mu sync.Mutex
	var changed []*sink.LogChangedError
	var recreated []consumer.TopicRecreated
	w := startWorker(t, c, s, workerOpts{name: "w1", reclaimInterval: 100 * time.Millisecond, lagInterval: 200 * time.Millisecond,
		topicCheck: 300 * time.Millisecond, observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e := e.(type) {
			case consumer.LogChanged:
				changed = append(changed, e.Err)
			case consumer.TopicRecreated:
				recreated = append(recreated, e)
			}
		})}})
	testwait.For(t, 30*time.Second, "the old log applied", func() bool { return appliedCount(s, keys) == len(keys)*5 })

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if _, err := adm.DeleteTopics(ctx, c.topic); err != nil {
		t.Fatal(err)
	}
	created, err := adm.CreateTopic(ctx, partitions, 1, nil, c.topic)
	if err != nil {
		t.Fatal(err)
	}
	// A real broker answers CreateTopics once the controller has the
	// topic; its own metadata may still name the old one for a moment,
	// and a record produced then lands in the old log. kfake's metadata
	// is the new topic at once.
	testwait.For(t, 30*time.Second, "the broker's metadata to name the new topic", func() bool {
		md, err := adm.Metadata(ctx, c.topic)
		return err == nil && md.Topics[c.topic].Err == nil && md.Topics[c.topic].ID == created.ID
	})
	produce(t, c, partitions, keys, 5, 8)
	testwait.For(t, 60*time.Second, "the claim on the new log to be refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(changed) > 0
	})
	mu.Lock()
	first := changed[0]
	// Apache Kafka's KIP-848 coordinator revokes a deleted topic's
	// partitions itself, often before the worker sees the new topic ID:
	// the event then names no partition of this worker's.
	wantParts := []int{1}
	if c.kf == nil && c.defaultProtocol() == consumer.KIP848 {
		wantParts = []int{0, 1}
	}
	if len(recreated) == 0 || recreated[0].OldID == recreated[0].NewID || !slices.Contains(wantParts, len(recreated[0].Partitions)) {
		t.Errorf("TopicRecreated events %+v: want one naming both IDs and %v partitions", recreated, wantParts)
	}
	mu.Unlock()
	if !errors.Is(first, sink.ErrTopicRecreated) || errors.Is(first, sink.ErrFenced) {
		t.Fatalf("LogChanged %v: want ErrTopicRecreated, not ErrFenced", first)
	}
	// The recreated topic may also bring a new generation, whose claim
	// passes through StateClaiming before it is refused the same way: wait
	// for the partition to settle blocked.
	testwait.For(t, 30*time.Second, "the one partition blocked by the changed log", func() bool {
		ps := w.Partitions()
		return len(ps) == 1 && ps[0].State == consumer.StateBlocked && errors.Is(ps[0].LastErr, sink.ErrLogChanged)
	})
	if n := appliedCount(s, keys); n != len(keys)*5 {
		t.Fatalf("%d effects applied before the reset, want %d (nothing of the new log)", n, len(keys)*5)
	}

	operatorReset(t, cl, s, c, admin.Checkpoint{RestartAt: "earliest"}, func(r admin.Report) bool {
		return len(r.Problems) == 1 && r.Problems[0].Kind == admin.TopicRecreated
	})
	testwait.For(t, 30*time.Second, "the new log applied", func() bool { return appliedCount(s, keys) == len(keys)*8 })
	checkInvariants(t, s, keys, 8)
}

// TestRetentionUnderLiveWorker: records a running worker has not fetched
// yet are deleted (DeleteRecords, as retention would). Its next fetch is
// out of range; the worker must not jump to the new log start (the deleted
// records would be skipped without a word): it claims again, the claim
// finds the retention loss and counts it, and the partition waits for an
// operator, who accepts the loss with a reset at the new log start.
func TestRetentionUnderLiveWorker(t *testing.T) {
	t.Parallel()
	const partitions = 1
	c := newFakeCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(1)
	produce(t, c, partitions, keys, 0, 5)

	var mu sync.Mutex
	var changed []*sink.LogChangedError
	w := startWorker(t, c, s, workerOpts{name: "w1", reclaimInterval: 100 * time.Millisecond,
		observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			if lc, ok := e.(consumer.LogChanged); ok {
				mu.Lock()
				changed = append(changed, lc.Err)
				mu.Unlock()
			}
		})}})
	testwait.For(t, 30*time.Second, "the first records applied", func() bool { return appliedCount(s, keys) == 5 })

	// Hold the worker's fetches while records 5..19 are produced and
	// 5..14 deleted, then let them through.
	release := make(chan struct{})
	var held atomic.Int64
	c.kf.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.kf.KeepControl()
		select {
		case <-release:
			c.kf.DropControl()
		default:
			held.Add(1)
			c.kf.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	testwait.For(t, 30*time.Second, "a fetch held", func() bool { return held.Load() > 0 })
	produce(t, c, partitions, keys, 5, 20)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: c.topic, Partition: 0, At: 15})
	if res, err := adm.DeleteRecords(ctx, del); err != nil || res.Error() != nil {
		t.Fatalf("delete records: %v %v", err, res.Error())
	}
	close(release)

	testwait.For(t, 30*time.Second, "the retention loss to be reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(changed) > 0
	})
	mu.Lock()
	first := changed[0]
	mu.Unlock()
	if !errors.Is(first, sink.ErrRetentionLoss) || first.Lost() != 10 {
		t.Fatalf("LogChanged %v (lost %d): want a retention loss of 10", first, first.Lost())
	}
	if got := w.Stats().LostToRetention; got != 10 {
		t.Fatalf("Stats.LostToRetention = %d, want 10", got)
	}
	if n := appliedCount(s, keys); n != 5 {
		t.Fatalf("%d records applied before the operator decided, want 5 (nothing past the gap)", n)
	}

	// The operator accepts the loss: restart at the log start.
	operatorReset(t, cl, s, c, admin.Checkpoint{RestartAt: "earliest"}, func(r admin.Report) bool { return r.Lost() == 10 })
	testwait.For(t, 30*time.Second, "the records past the gap applied", func() bool { return appliedCount(s, keys) == 10 })
	if got := logOf(s, keys[0]); !slices.Equal(got, []int{0, 1, 2, 3, 4, 15, 16, 17, 18, 19}) {
		t.Fatalf("applied %v", got)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

// gatedClaims is a sink whose Claims wait on gate (ignoring their context,
// like a process paused before it claims) from the n-th call on.
type gatedClaims struct {
	*memory.Sink
	from    int64
	calls   atomic.Int64
	gate    *gate
	members chan string
}

func (g *gatedClaims) Unwrap() sink.Sink[*memory.Tx] { return g.Sink }

func (g *gatedClaims) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	if g.calls.Add(1) >= g.from {
		select {
		case g.members <- tok.Member:
		default:
		}
		g.gate.wait()
	}
	return g.Sink.Claim(ctx, tok, obs)
}

// TestOldIncarnationCannotComeBackAfterReset is the scenario of a reset
// opening the door to a zombie: the stored holder is at epoch 10 (the
// group's previous incarnation); member OLD was assigned the partition and
// paused before claiming; the coordinator evicted it and NEW, assigned the
// partition at a lower epoch, is refused (epochs went backwards); the
// operator resets the fence; OLD wakes and claims. The reset requires a
// proof of membership, which OLD (unknown to the coordinator now) cannot
// give: its claim is refused, it never writes, and NEW then claims and
// applies every command exactly once.
func TestOldIncarnationCannotComeBackAfterReset(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1)
	s := memory.New()
	keys := makeKeys(5)
	regressAll(t, c, s, 1) // held at epoch 10 by the previous incarnation
	produce(t, c, 1, keys, 0, 4)

	var oldMember atomic.Value
	oldMember.Store("")
	// OLD's heartbeats are answered "fine" by the test, never seen by the
	// coordinator: the coordinator evicts OLD while OLD believes it is
	// still a member (a paused process; its connections stay usable).
	var swallowed atomic.Int64
	c.kf.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.kf.KeepControl()
		if hb, ok := req.(*kmsg.HeartbeatRequest); ok && hb.MemberID == oldMember.Load().(string) {
			swallowed.Add(1)
			resp := hb.ResponseKind().(*kmsg.HeartbeatResponse)
			return resp, nil, true
		}
		return nil, nil, false
	})
	oldSink := &gatedClaims{Sink: s, from: 1, gate: newGate(), members: make(chan string, 1)}
	var mu sync.Mutex
	var oldRefusals []error
	old := startWorker(t, c, s, workerOpts{noTakeover: true, name: "old", sink: oldSink, reclaimInterval: time.Hour,
		observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			if st, ok := e.(consumer.Stalled); ok && st.Op == sink.OpClaim {
				mu.Lock()
				oldRefusals = append(oldRefusals, st.Err)
				mu.Unlock()
			}
		})}})
	t.Cleanup(oldSink.gate.open)
	select {
	case m := <-oldSink.members:
		oldMember.Store(m)
	case <-time.After(30 * time.Second):
		t.Fatal("old was never assigned the partition")
	}

	// NEW's first claim is refused (the stored epoch is higher); its later
	// claims wait on a gate the test opens once OLD has tried.
	newSink := &gatedClaims{Sink: s, from: 2, gate: newGate(), members: make(chan string, 1)}
	nw := startWorker(t, c, s, workerOpts{noTakeover: true, name: "new", sink: newSink, reclaimInterval: 100 * time.Millisecond})
	t.Cleanup(newSink.gate.open) // before new's Close (cleanups run last first)
	testwait.For(t, 60*time.Second, "new to be blocked by the regressed epoch", func() bool { return blockedBy(nw.Partitions(), 1) })
	if swallowed.Load() == 0 {
		t.Fatal("old's heartbeats were never held back: the coordinator did not evict it")
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	operatorReset(t, cl, s, c, admin.Checkpoint{Keep: true}, func(r admin.Report) bool {
		return len(r.Problems) > 0 && r.Problems[0].Kind == admin.HolderGone
	})

	// OLD wakes right after the reset and claims first.
	oldSink.gate.open()
	testwait.For(t, 30*time.Second, "old's claim to be refused for want of a proof", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(oldRefusals, func(err error) bool { return errors.Is(err, sink.ErrProofRequired) })
	})
	if _, claimed := claimedBy(s, oldMember.Load().(string)); claimed || appliedBy(s, oldMember.Load().(string)) {
		t.Fatal("the previous incarnation's member claimed or wrote after the reset")
	}

	// NEW claims, proving its membership, and applies everything.
	newSink.gate.open()
	testwait.For(t, 60*time.Second, "new to apply every command", func() bool { return appliedCount(s, keys) == len(keys)*4 })
	checkInvariants(t, s, keys, 4)
	if _, claimed := claimedBy(s, oldMember.Load().(string)); claimed || appliedBy(s, oldMember.Load().(string)) {
		t.Fatal("the previous incarnation's member claimed or wrote")
	}
	_ = old
}

// TestEqualEpochAfterDataLoss: after a broker lost its data, the new group
// hands out epoch 1 again — often the very epoch stored, held by a member
// that no longer exists. The claim is refused (same epoch, another member)
// but it is not a zombie's: the partition is blocked as a regression (not
// stopped for good), and resumes by itself after the operator's reset.
func TestEqualEpochAfterDataLoss(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(3)
	produce(t, c, 1, keys, 0, 3)
	// The stored holder is at the very epoch of the worker's first claim:
	// which epoch a new group hands out first is the broker's (kfake's
	// classic generation and Kafka's are 1; Kafka 4.4's first KIP-848
	// assignment is at epoch 2), so it is planted right before that claim.
	lost := &plantedHolderSink{Sink: s, member: "lost-with-the-broker"}
	w := startWorker(t, c, s, workerOpts{name: "w", sink: lost, reclaimInterval: 100 * time.Millisecond})
	testwait.For(t, 30*time.Second, "the partition blocked as a regression", func() bool { return blockedBy(w.Partitions(), 1) })
	if st := w.Stats(); st.FencedClaims != 0 {
		t.Fatalf("stats %+v: a regression counted as a fenced claim (it is a block, not a newer tenure's fence)", st)
	}
	fs, _ := s.Fences(t.Context())
	if _, err := s.ResetFence(t.Context(), fenceadmin.ResetRequest{Scope: fs[0].Scope, Expect: fs[0], Reason: "broker lost its data (test)"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "every command applied after the reset", func() bool { return appliedCount(s, keys) == 9 })
	checkInvariants(t, s, keys, 3)
}

// plantedHolderSink is a memory sink on whose scope, right before the
// first claim, a token of member at the claim's own epoch is installed: a
// holder the group lost with the broker's data, at the epoch the new group
// hands out again.
type plantedHolderSink struct {
	*memory.Sink
	member  string
	planted atomic.Bool
}

func (s *plantedHolderSink) Unwrap() sink.Sink[*memory.Tx] { return s.Sink }

func (s *plantedHolderSink) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	if s.planted.CompareAndSwap(false, true) {
		lost := tok
		lost.Member = s.member
		if _, err := s.Sink.Claim(ctx, lost, sink.Observed{}); err != nil {
			return sink.Checkpoint{}, err
		}
	}
	return s.Sink.Claim(ctx, tok, obs)
}

// operatorReset diagnoses the cluster's only partition as an operator
// would, checks the diagnosis with ok, and resets its fence with cp.
func operatorReset(t *testing.T, cl *kgo.Client, s *memory.Sink, c *cluster, cp admin.Checkpoint, ok func(admin.Report) bool) {
	t.Helper()
	reports, err := admin.Diagnose(t.Context(), cl, s, c.group, c.topic)
	if err != nil || len(reports) != 1 || !ok(reports[0]) {
		t.Fatalf("diagnose: %v, %+v", err, reports)
	}
	if _, err := admin.Reset(t.Context(), cl, s, admin.Request{Scope: reports[0].Fence.Scope, Expect: admin.ExpectToken(reports[0].Fence),
		Checkpoint: cp, Reason: "the operator's reset (test)"}); err != nil {
		t.Fatal(err)
	}
}
