package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestPreviousIncarnationBelowTheResetEpoch: the stored holder is at
// epoch 10, of the group's previous incarnation; the live worker of the
// new incarnation, at a lower epoch, is blocked until an operator resets
// the fence; it then claims with a proof and applies. Members of the
// previous incarnation that never proved anything claim afterwards: at
// epoch 9 (above the live holder's epoch, below the one the reset
// cleared) and at epoch 12 (a partition that moved to another member of
// that incarnation, which paused before its claim, so the sink never saw
// its epoch). The sink must still ask each for a proof
// (docs/design.md#admin-reset): the proof requirement outlives the first
// claim, at every epoch. Their claims are refused, they write nothing,
// and the live worker applies every command without ever being fenced.
func TestPreviousIncarnationBelowTheResetEpoch(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(4)
	regressAll(t, c, s, 1) // held at epoch 10 by the previous incarnation
	produce(t, c, 1, keys, 0, 1)

	w := startWorker(t, c, s, workerOpts{noTakeover: true, name: "live", reclaimInterval: 100 * time.Millisecond})
	testwait.For(t, 60*time.Second, "the live worker to be blocked by the regressed epoch", func() bool { return blockedBy(w.Partitions(), 1) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The diagnosis names what the protocol shows: under KIP-848 the
	// group's epoch below the holder's, under the classic protocol a
	// holder that is not a member.
	want := admin.HolderGone
	if c.defaultProtocol() == consumer.KIP848 {
		want = admin.EpochRegressed
	}
	operatorReset(t, cl, s, c, admin.Checkpoint{Keep: true}, func(r admin.Report) bool {
		return len(r.Problems) > 0 && r.Problems[0].Kind == want
	})
	testwait.For(t, 60*time.Second, "the live worker to claim with a proof and apply", func() bool { return appliedCount(s, keys) == len(keys) })
	live, ok := claimedBy(s, w.Partitions()[0].Token.Member)
	if !ok || live.Epoch >= 9 {
		t.Fatalf("the live worker's claim %v (claimed %v): want one below epoch 9", live, ok)
	}

	// The previous incarnation's members wake and claim, unproven.
	zombies := []epochs.Token{
		{Group: c.group, Topic: c.topic, Partition: 0, Epoch: 9, Member: "previous-incarnation-2"},
		{Group: c.group, Topic: c.topic, Partition: 0, Epoch: 12, Member: "previous-incarnation-3"},
	}
	for _, zombie := range zombies {
		if _, err := s.Claim(t.Context(), zombie, sink.Observed{}); !errors.Is(err, sink.ErrProofRequired) {
			t.Fatalf("an unproven claim by %s after a reset that cleared epoch 10: %v, want ErrProofRequired", zombie, err)
		}
		if _, err := s.Apply(t.Context(), zombie, sink.Batch{Offsets: []int64{1}}, func(_ context.Context, tx *memory.Tx, _ int) error {
			tx.Put("zombie", []byte("landed"))
			return nil
		}); !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("the write of %s: %v, want ErrFenced", zombie, err)
		}
	}

	produce(t, c, 1, keys, 1, 3)
	testwait.For(t, 60*time.Second, "every command applied", func() bool { return appliedCount(s, keys) == len(keys)*3 })
	checkInvariants(t, s, keys, 3)
	if _, landed := s.Get("zombie"); landed || appliedBy(s, zombies[0].Member) || appliedBy(s, zombies[1].Member) {
		t.Fatal("the previous incarnation's write landed")
	}
	if st := w.Stats(); st.FencedApplies != 0 {
		t.Fatalf("the live worker was fenced after its proven claim: %+v", st)
	}
	if fs, _ := s.Fences(t.Context()); len(fs) != 1 || fs[0].Holder.Member != live.Member {
		t.Fatalf("the fence's holder is %+v, want the live worker %s", fs, live.Member)
	}
}
