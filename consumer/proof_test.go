package consumer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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
			c := newCluster(t, partitions)
			s := memory.New()
			keys := makeKeys(40)
			a := startWorker(t, c, s, workerOpts{name: "a", protocol: proto, protocolChosen: true, reclaimInterval: 100 * time.Millisecond})
			testwait.For(t, 30*time.Second, "a to own every partition", func() bool { return len(a.Owned()) == partitions })
			produce(t, c, partitions, keys, 0, 2)
			testwait.For(t, 30*time.Second, "the first commands applied", func() bool { return appliedCount(s, keys) == len(keys)*2 })

			b := startWorker(t, c, s, workerOpts{name: "b", protocol: proto, protocolChosen: true, reclaimInterval: 100 * time.Millisecond})
			var kept epochs.Token
			testwait.For(t, 30*time.Second, "a and b to split the partitions, a's epoch past a kept token's", func() bool {
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
			testwait.For(t, 60*time.Second, "every command applied after the reset", func() bool { return appliedCount(s, keys) == len(keys)*4 })
			checkInvariants(t, s, keys, 4)
			if a.Stats().Claims <= claimsBefore {
				t.Fatalf("a never claimed again after the reset: %+v", a.Stats())
			}
			hs, err := s.History(ctx, kept.Scope())
			if err != nil || len(hs) < 2 {
				t.Fatalf("history %+v, %v", hs, err)
			}
			last, before := hs[len(hs)-1], hs[len(hs)-2]
			if before.Kind != fenceadmin.KindReset || last.Kind != fenceadmin.KindClaim || last.Token != kept || !last.Proven {
				t.Fatalf("the history ends with %+v then %+v: want the reset, then a's proven claim with its own token %v", before, last, kept)
			}
			if _, epoch := a.Member(); epoch <= kept.Epoch {
				t.Fatalf("a's epoch %d did not stay past the token's %d: the proof was not made under a moved epoch", epoch, kept.Epoch)
			}
		})
	}
}

// staleProofSink is a memory sink that, once, resets the fence again
// between a worker's proof and its proven claim: the proof the claim
// carries was made at a version the fence has moved past.
type staleProofSink struct {
	*memory.Sink
	moved atomic.Bool
}

func (s *staleProofSink) Unwrap() sink.Sink[*memory.Tx] { return s.Sink }

func (s *staleProofSink) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	if obs.Proof != nil && s.moved.CompareAndSwap(false, true) {
		fs, err := s.Fences(ctx)
		if err != nil {
			return sink.Checkpoint{}, err
		}
		for _, f := range fs {
			if f.Scope == tok.Scope() {
				if _, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: f.Scope, Expect: f, Reason: "a second reset between the proof and the claim (test)"}); err != nil {
					return sink.Checkpoint{}, err
				}
			}
		}
	}
	return s.Sink.Claim(ctx, tok, obs)
}

// TestStaleProofProvesAgain: a worker proves its membership after a
// reset, and before its proven claim lands the fence moves again (a
// second reset; in production, another claim). The sink refuses the claim
// as made on a stale proof (a member that proved, paused and woke in a
// later incarnation must not pass on it); the worker proves again,
// against the version the refusal names, and claims: proven, recorded as
// such, and the partition applies.
func TestStaleProofProvesAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	mem := memory.New()
	s := &staleProofSink{Sink: mem}
	keys := makeKeys(4)
	regressAll(t, c, mem, 1)
	produce(t, c, 1, keys, 0, 1)
	w := startWorker(t, c, mem, workerOpts{noTakeover: true, name: "live", reclaimInterval: 100 * time.Millisecond, sink: s})
	testwait.For(t, 60*time.Second, "the worker to be blocked by the regressed epoch", func() bool { return blockedBy(w.Partitions(), 1) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	operatorReset(t, cl, mem, c, admin.Checkpoint{Keep: true}, func(r admin.Report) bool { return len(r.Problems) > 0 })
	testwait.For(t, 60*time.Second, "the worker to claim with a fresh proof and apply", func() bool { return appliedCount(mem, keys) == len(keys) })
	if !s.moved.Load() {
		t.Fatal("the fence never moved between a proof and its claim: the stale proof was not exercised")
	}
	var stale, proven int
	for _, ev := range mem.Events() {
		switch {
		case ev.Kind == memory.Reset && ev.Reason == "a second reset between the proof and the claim (test)":
			stale++
		case ev.Kind == memory.Claim && ev.Accepted && stale > 0:
			if !ev.Proven {
				t.Fatalf("claim %+v after the second reset was accepted unproven", ev)
			}
			proven++
		}
	}
	if stale != 1 || proven == 0 {
		t.Fatalf("%d second resets, %d proven claims after it: want 1 and at least 1", stale, proven)
	}
	checkInvariants(t, mem, keys, 1)
}

// TestProofAtTheTokenEpoch: the proof of membership is made at the
// token's own epoch. A member ID can outlive its group's incarnation (a
// KIP-848 member ID is the client's own and survives a rejoin into a
// recreated group), so a tenure of the previous incarnation, at an epoch
// that incarnation reached, must not prove itself on the member's current
// membership: its commit at its own epoch is refused (STALE_MEMBER_EPOCH
// under KIP-848, ILLEGAL_GENERATION under the classic protocol). It is red
// when the proof is made at the member's current epoch.
func TestProofAtTheTokenEpoch(t *testing.T) {
	t.Parallel()
	for _, proto := range []consumer.Protocol{consumer.Cooperative, consumer.KIP848} {
		t.Run(proto.String(), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 1)
			s := memory.New()
			a := startWorker(t, c, s, workerOpts{name: "a", protocol: proto, protocolChosen: true})
			testwait.For(t, 30*time.Second, "a to own the partition", func() bool { return len(a.Owned()) == 1 })
			tok := a.Owned()[0]
			if err := consumer.ProveMembership(t.Context(), a, tok); err != nil {
				t.Fatalf("the proof of a's own token %s: %v", tok, err)
			}
			_, epoch := a.Member()
			previous := tok
			previous.Epoch = epoch + 5 // an epoch the previous incarnation reached
			err := consumer.ProveMembership(t.Context(), a, previous)
			want := kerr.IllegalGeneration
			if proto == consumer.KIP848 {
				want = kerr.StaleMemberEpoch
			}
			if !errors.Is(err, want) {
				t.Fatalf("the proof of %s (the member is at epoch %d): %v, want %v", previous, epoch, err, want)
			}
		})
	}
}

// TestOlderEpochProofOnKafkaBefore43: under KIP-848 a member kept a
// partition through a rebalance, so its member epoch moved past the
// token's; its proof of membership is an offset commit at the token's
// epoch. Apache Kafka 4.3 and later (KIP-1251) accept it, as kfake does
// (and TestProofAfterTheEpochMoved shows on both); a broker before 4.3
// answers STALE_MEMBER_EPOCH, simulated here by kfake's interception of
// that one commit. The refusal must name the broker behaviour
// (ErrOlderEpochProofRefused) and keep the coordinator's code. Red
// without the wrap in proveMembership.
func TestOlderEpochProofOnKafkaBefore43(t *testing.T) {
	t.Parallel()
	const partitions = 4
	c := newFakeCluster(t, partitions)
	s := memory.New()
	a := startWorker(t, c, s, workerOpts{name: "a", protocol: consumer.KIP848, protocolChosen: true})
	testwait.For(t, 30*time.Second, "a to own every partition", func() bool { return len(a.Owned()) == partitions })
	b := startWorker(t, c, s, workerOpts{name: "b", protocol: consumer.KIP848, protocolChosen: true})
	var kept epochs.Token
	var epoch int32
	testwait.For(t, 30*time.Second, "a's epoch past a kept token's", func() bool {
		owned := a.Owned()
		if len(b.Owned()) == 0 || len(owned) == 0 || len(owned)+len(b.Owned()) != partitions {
			return false
		}
		_, epoch = a.Member()
		kept = owned[0]
		return epoch > kept.Epoch
	})
	if err := consumer.ProveMembership(t.Context(), a, kept); err != nil {
		t.Fatalf("kfake refused the proof of %s at an older epoch (member at %d): %v; it accepts it as Kafka 4.3+ does", kept, epoch, err)
	}

	// A broker before KIP-1251: a commit below the member's epoch is stale.
	var refused atomic.Int64
	c.kf.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetCommitRequest)
		if req.MemberID != kept.Member || req.Generation >= epoch {
			c.kf.KeepControl()
			return nil, nil, false
		}
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.StaleMemberEpoch.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	err := consumer.ProveMembership(t.Context(), a, kept)
	if refused.Load() != 1 {
		t.Fatalf("%d commits refused as a broker before 4.3 would, want the proof's one", refused.Load())
	}
	if !errors.Is(err, consumer.ErrOlderEpochProofRefused) || !errors.Is(err, kerr.StaleMemberEpoch) || !strings.Contains(err.Error(), "4.3") {
		t.Fatalf("the proof refused by a broker before 4.3: %v, want ErrOlderEpochProofRefused naming the version, wrapping STALE_MEMBER_EPOCH", err)
	}
}

// TestOlderEpochProofOfAPartitionGone: under KIP-848, a member's proof of
// membership for a partition it no longer holds, at the epoch it held it
// at. Apache Kafka (4.3+, KIP-1251) checks the commit's epoch against the
// partition's assignment and refuses it (STALE_MEMBER_EPOCH, reported as
// ErrOlderEpochProofRefused): a tenure that lost its partition cannot
// prove itself after a reset. kfake accepts it; the sink's ordering rule
// is then what refuses such a tenure's claim below the owner's
// (docs/kafka.md). The test asserts each broker's answer, so that a change
// of either is seen.
func TestOlderEpochProofOfAPartitionGone(t *testing.T) {
	t.Parallel()
	const partitions = 4
	c := newCluster(t, partitions)
	s := memory.New()
	a := startWorker(t, c, s, workerOpts{name: "a", protocol: consumer.KIP848, protocolChosen: true})
	testwait.For(t, 30*time.Second, "a to own every partition", func() bool { return len(a.Owned()) == partitions })
	before := a.Owned()
	b := startWorker(t, c, s, workerOpts{name: "b", protocol: consumer.KIP848, protocolChosen: true})
	testwait.For(t, 30*time.Second, "b to own some of a's partitions", func() bool {
		return len(b.Owned()) > 0 && len(a.Owned())+len(b.Owned()) == partitions
	})
	var gone epochs.Token
	for _, tok := range before {
		if !slices.ContainsFunc(a.Owned(), func(o epochs.Token) bool { return o.Partition == tok.Partition }) {
			gone = tok
			break
		}
	}
	if gone.IsZero() {
		t.Fatalf("a kept every partition %v though b owns %v", a.Owned(), b.Owned())
	}
	err := consumer.ProveMembership(t.Context(), a, gone)
	if c.kf != nil {
		if err != nil {
			t.Fatalf("kfake refused the proof of %s, a partition a no longer holds: %v; docs/kafka.md says it accepts it", gone, err)
		}
		return
	}
	if !errors.Is(err, consumer.ErrOlderEpochProofRefused) || !errors.Is(err, kerr.StaleMemberEpoch) {
		t.Fatalf("Kafka's answer to the proof of %s, a partition a no longer holds: %v, want STALE_MEMBER_EPOCH (ErrOlderEpochProofRefused)", gone, err)
	}
}
