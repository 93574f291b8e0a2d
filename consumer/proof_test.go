package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestProofAfterTheEpochMoved: a member keeps a partition through a
// rebalance, so the group's generation (classic) or its member epoch
// (KIP-848) moves past the tenure's token epoch; an operator then resets
// that partition's fence under the running worker. The worker's re-claim
// needs a proof of membership for a token whose epoch is no longer
// current. Under KIP-848 the coordinator accepts a commit at the epoch the
// partition was assigned at; under the classic protocol only the current
// generation, which the worker then proves at (docs/design.md#admin-reset).
// Either way the re-claim succeeds with the tenure's own token and the
// partition goes on applying. It is red if the classic proof is made only
// at the token's epoch (the partition stays blocked).
func TestProofAfterTheEpochMoved(t *testing.T) {
	t.Parallel()
	for _, proto := range []consumer.Protocol{consumer.Cooperative, consumer.KIP848} {
		t.Run(proto.String(), func(t *testing.T) {
			t.Parallel()
			const partitions = 4
			c := newFakeCluster(t, partitions)
			s := memory.New()
			keys := makeKeys(40)
			a := startWorker(t, c, s, workerOpts{name: "a", protocol: proto, reclaimInterval: 100 * time.Millisecond})
			waitFor(t, 30*time.Second, "a to own every partition", func() bool { return len(a.Owned()) == partitions })
			produce(t, c, partitions, keys, 0, 2)
			waitFor(t, 30*time.Second, "the first commands applied", func() bool { return appliedCount(s, keys) == len(keys)*2 })

			b := startWorker(t, c, s, workerOpts{name: "b", protocol: proto, reclaimInterval: 100 * time.Millisecond})
			var kept epochs.Token
			waitFor(t, 30*time.Second, "a and b to split the partitions, a's epoch past a kept token's", func() bool {
				owned := a.Owned()
				if len(b.Owned()) == 0 || len(owned) == 0 || len(owned)+len(b.Owned()) != partitions {
					return false
				}
				_, epoch := a.Member()
				if epoch <= owned[0].Epoch {
					return false
				}
				kept = owned[0]
				return true
			})

			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			fs, err := s.Fences(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var fence sink.Fence
			for _, f := range fs {
				if f.Scope == kept.Scope() {
					fence = f
				}
			}
			if fence.Holder != kept {
				t.Fatalf("the kept partition's fence %+v is not held by a's token %v", fence, kept)
			}
			if _, err := admin.Reset(ctx, cl, s, admin.Request{Scope: fence.Scope, Expect: admin.ExpectToken(fence),
				Checkpoint: admin.Checkpoint{Keep: true}, Reason: "reset under a moved epoch (test)", Force: true}); err != nil {
				t.Fatal(err)
			}
			claimsBefore := a.Stats().Claims

			produce(t, c, partitions, keys, 2, 4)
			waitFor(t, 60*time.Second, "every command applied after the reset", func() bool { return appliedCount(s, keys) == len(keys)*4 })
			checkInvariants(t, s, keys, 4)
			if a.Stats().Claims <= claimsBefore {
				t.Fatalf("a never claimed again after the reset: %+v", a.Stats())
			}
			hs, err := s.History(ctx, kept.Scope())
			if err != nil || len(hs) < 2 {
				t.Fatalf("history %+v, %v", hs, err)
			}
			last, before := hs[len(hs)-1], hs[len(hs)-2]
			if before.Kind != sink.HistoryReset || last.Kind != sink.HistoryClaim || last.Token != kept {
				t.Fatalf("the history ends with %+v then %+v: want the reset, then a's claim with its own token %v", before, last, kept)
			}
			if _, epoch := a.Member(); epoch <= kept.Epoch {
				t.Fatalf("a's epoch %d did not stay past the token's %d: the proof was not made under a moved epoch", epoch, kept.Epoch)
			}
		})
	}
}
