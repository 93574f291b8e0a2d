package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// memberCheckSink is a memory sink that, like the Kafka sink's
// client-side check (kafka.ErrMemberChanged), refuses the writes of a
// token whose member is not the consumer's current member ID.
type memberCheckSink struct {
	*memory.Sink
	member  func() string
	refused atomic.Int64
	mu      sync.Mutex
	refusal []epochs.Token
}

func (s *memberCheckSink) Unwrap() sink.Sink[*memory.Tx] { return s.Sink }

func (s *memberCheckSink) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*memory.Tx]) (sink.Result, error) {
	if m := s.member(); m != tok.Member {
		s.refused.Add(1)
		s.mu.Lock()
		s.refusal = append(s.refusal, tok)
		s.mu.Unlock()
		return sink.Result{}, fmt.Errorf("member check: the consumer is member %q now, not %s: %w", m, tok, sink.ErrFenced)
	}
	return s.Sink.Apply(ctx, tok, b, effect)
}

// TestMemberIDResetKeepsPartition: the coordinator forgets the member (a
// broker that lost its group state, or a member expired while it
// rejoined) and answers its rejoin with UNKNOWN_MEMBER_ID; kgo joins
// again under a new member ID and, cooperative-sticky, keeps the
// partition without a new assignment callback for it. The tenure's token
// names the old member ID, which a sink that checks the member (the Kafka
// sink) refuses. The Worker, which still owns the partition under its new
// member ID, ends that tenure and claims the partition again with its
// current token instead of leaving it stopped until the next rebalance.
func TestMemberIDResetKeepsPartition(t *testing.T) {
	t.Parallel()
	c, mem, keys, s, _, w := startMemberChecked(t)
	old, _ := w.Member()

	// One heartbeat of the old member is answered REBALANCE_IN_PROGRESS
	// (kgo rejoins, cooperative: keeping its partitions), and its rejoins
	// UNKNOWN_MEMBER_ID: the coordinator forgot it. The coordinator then
	// expires the old member after its session timeout.
	var rebalanced, forgotten atomic.Int64
	c.kf.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.kf.KeepControl()
		if hb, ok := req.(*kmsg.HeartbeatRequest); ok && hb.MemberID == old && rebalanced.Add(1) == 1 {
			resp := hb.ResponseKind().(*kmsg.HeartbeatResponse)
			resp.ErrorCode = kerr.RebalanceInProgress.Code
			return resp, nil, true
		}
		return nil, nil, false
	})
	c.kf.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.kf.KeepControl()
		if j, ok := req.(*kmsg.JoinGroupRequest); ok && j.MemberID == old {
			forgotten.Add(1)
			resp := j.ResponseKind().(*kmsg.JoinGroupResponse)
			resp.ErrorCode = kerr.UnknownMemberID.Code
			return resp, nil, true
		}
		return nil, nil, false
	})
	testwait.For(t, 30*time.Second, "the worker to rejoin under a new member ID", func() bool {
		m, _ := w.Member()
		return m != "" && m != old && w.Ready()
	})
	if forgotten.Load() == 0 {
		t.Fatal("no rejoin of the old member was refused: the fault did not happen")
	}
	if len(w.Owned()) != 1 {
		t.Fatalf("owned %v: the worker did not keep the partition", w.Owned())
	}

	produce(t, c, 1, keys, 3, 6)
	testwait.For(t, 30*time.Second, "the new commands applied under the new member ID", func() bool {
		return appliedCount(mem, keys) == len(keys)*6
	})
	checkInvariants(t, mem, keys, 6)
	now, _ := w.Member()
	if s.refused.Load() == 0 {
		t.Fatal("the sink never refused the old member's token: the partition was assigned anew, not kept")
	}
	s.mu.Lock()
	for _, tok := range s.refusal {
		if tok.Member != old {
			t.Errorf("the sink refused %s, not a token of the old member %s", tok, old)
		}
	}
	s.mu.Unlock()
	if !appliedBy(mem, now) {
		t.Fatalf("nothing applied by the new member %s", now)
	}
	if tok, ok := claimedBy(mem, now); !ok || tok.Partition != 0 {
		t.Fatalf("no claim by the new member %s", now)
	}
	st := w.Stats()
	if st.MemberChanges == 0 || st.FencedApplies != 0 {
		t.Errorf("stats %+v: want the member change counted, and no fenced apply (the partition is still this client's)", st)
	}
}

// TestMemberIDResetLostPartitionStaysFenced is the zombie's side of
// TestMemberIDResetKeepsPartition: the client rejoins under a new member
// ID, its tenure's apply is refused (old member) while the rejoin is
// under way, and the new assignment does not give the partition back. The
// tenure must stay fenced — not renewed with the new member's token —
// and the partition be revoked.
func TestMemberIDResetLostPartitionStaysFenced(t *testing.T) {
	t.Parallel()
	c, _, keys, s, rec, w := startMemberChecked(t)
	old, _ := w.Member()

	// As in TestMemberIDResetKeepsPartition, plus: the new member's first
	// SyncGroup is held until the test releases it, then answered with an
	// empty assignment (the partition went elsewhere).
	var rebalanced, forgotten, synced atomic.Int64
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseSync := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseSync)
	c.kf.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.kf.KeepControl()
		if hb, ok := req.(*kmsg.HeartbeatRequest); ok && hb.MemberID == old && rebalanced.Add(1) == 1 {
			resp := hb.ResponseKind().(*kmsg.HeartbeatResponse)
			resp.ErrorCode = kerr.RebalanceInProgress.Code
			return resp, nil, true
		}
		return nil, nil, false
	})
	c.kf.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.kf.KeepControl()
		if j, ok := req.(*kmsg.JoinGroupRequest); ok && j.MemberID == old {
			forgotten.Add(1)
			resp := j.ResponseKind().(*kmsg.JoinGroupResponse)
			resp.ErrorCode = kerr.UnknownMemberID.Code
			return resp, nil, true
		}
		return nil, nil, false
	})
	c.kf.ControlKey(int16(kmsg.SyncGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.kf.KeepControl()
		sg, ok := req.(*kmsg.SyncGroupRequest)
		if !ok || sg.MemberID == old || forgotten.Load() == 0 || synced.Add(1) != 1 {
			return nil, nil, false
		}
		c.kf.SleepControl(func() { <-release })
		resp := sg.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ProtocolType, resp.Protocol = sg.ProtocolType, sg.Protocol
		assignment := kmsg.NewConsumerMemberAssignment()
		resp.MemberAssignment = assignment.AppendTo(nil)
		return resp, nil, true
	})
	testwait.For(t, 30*time.Second, "the rejoin's SyncGroup held under a new member ID", func() bool {
		m, _ := w.Member()
		return synced.Load() > 0 && m != "" && m != old
	})

	// The tenure of the old member applies while the rejoin is held: the
	// sink refuses it, and the client does not own the partition under
	// the new member yet (no assignment ran under it).
	produce(t, c, 1, keys, 3, 4)
	testwait.For(t, 30*time.Second, "the old member's apply refused", func() bool { return s.refused.Load() > 0 })
	testwait.For(t, 30*time.Second, "the refusal reported as fenced", func() bool { return w.Stats().FencedApplies > 0 })
	releaseSync()
	testwait.For(t, 30*time.Second, "the partition revoked", func() bool { return w.Stats().Revoked > 0 })
	kinds := rec.kinds()
	fenced := slices.Index(kinds, consumer.KindFenced)
	revoked := slices.Index(kinds, consumer.KindRevoked)
	if fenced < 0 || revoked < fenced || slices.Contains(kinds[fenced:revoked], consumer.KindBlocked) || slices.Contains(kinds[fenced:revoked], consumer.KindClaimed) {
		t.Fatalf("events %v: want the fenced tenure revoked, never renewed", kinds)
	}
	if st := w.Stats(); st.MemberChanges != 0 {
		t.Fatalf("stats %+v: a tenure of a partition the client lost was renewed", st)
	}
}

// startMemberChecked starts a worker (cooperative) on a one-partition
// kfake cluster behind a memberCheckSink that checks the worker's current
// member ID, and waits until the first commands are applied.
func startMemberChecked(t *testing.T) (*cluster, *memory.Sink, []string, *memberCheckSink, *recorder, *consumer.Worker[*memory.Tx]) {
	t.Helper()
	c := newFakeCluster(t, 1)
	mem := memory.New()
	keys := makeKeys(4)
	produce(t, c, 1, keys, 0, 3)

	var wp atomic.Pointer[consumer.Worker[*memory.Tx]]
	s := &memberCheckSink{Sink: mem, member: func() string {
		if w := wp.Load(); w != nil {
			m, _ := w.Member()
			return m
		}
		return ""
	}}
	rec := &recorder{}
	w := startWorker(t, c, mem, workerOpts{name: "w", sink: s, protocol: consumer.Cooperative, protocolChosen: true,
		reclaimInterval: time.Hour, observers: []consumer.Observer{rec}})
	wp.Store(w)
	testwait.For(t, 30*time.Second, "the first commands applied", func() bool { return appliedCount(mem, keys) == len(keys)*3 })
	return c, mem, keys, s, rec, w
}
