package kafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
)

// barrier returns a function each of n callers calls; it returns when all
// n have called it (or ctx ends).
func barrier(ctx context.Context, n int) func() {
	var mu sync.Mutex
	all := make(chan struct{})
	return func() {
		mu.Lock()
		if n--; n == 0 {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-ctx.Done():
		}
	}
}

// atBarrier wraps eff so that its last record (index last) waits at wait:
// the calls of the effects queue their commits together.
func atBarrier(eff sink.Effect[*kafka.Tx], last int, wait func()) sink.Effect[*kafka.Tx] {
	return func(ctx context.Context, tx *kafka.Tx, i int) error {
		if err := eff(ctx, tx, i); err != nil {
			return err
		}
		if i == last {
			wait()
		}
		return nil
	}
}

// TestGroupCommitStaleMember: the Applies of two tenures of different
// members (two consumer groups, one Sink: BindGroupMember) share one
// transaction, and one of them is stale: its member left its group and
// another member took the partition over. The coordinator refuses the
// stale member's offset commit, which aborts the whole transaction: the
// stale tenure's Apply fails with a *GroupFencedError (UNKNOWN_MEMBER_ID),
// the other's with a sink failure that is not a fence (ErrSharedAbort), its
// NextOffset unchanged; applied again, it commits, and a read_committed
// consumer sees each input's output once, none of the stale batch's.
func TestGroupCommitStaleMember(t *testing.T) {
	forBrokers(t, func(t *testing.T, b *broker) {
		for _, proto := range []string{"classic", "kip848"} {
			t.Run(proto, func(t *testing.T) {
				groupCommitStale(t, b, proto == "kip848")
			})
		}
	})
}

func groupCommitStale(t *testing.T, b *broker, kip848 bool) {
	ctx := t.Context()
	b = &broker{name: b.name, addrs: b.addrs, kf: b.kf, sfx: suffix()}
	inA, inB := b.topic(t, "in-a", 1, nil), b.topic(t, "in-b", 1, nil)
	outA, outB := b.topic(t, "out-a", 1, nil), b.topic(t, "out-b", 1, nil)
	tp := b.sinkTopics(t)
	groupA, groupB := "wr-kafkasink-group-a-"+b.sfx, "wr-kafkasink-group-b-"+b.sfx

	mA1 := member(t, b, groupA, inA, kip848)
	idA1, genA1 := mA1.GroupMetadata()
	mB := member(t, b, groupB, inB, kip848)
	idB, genB := mB.GroupMetadata()
	tokA := epochs.Token{Group: groupA, Topic: inA, Partition: 0, Epoch: genA1, Member: idA1}
	tokB := epochs.Token{Group: groupB, Topic: inB, Partition: 0, Epoch: genB, Member: idB}
	// One producer and a linger: the two calls queued together share a
	// transaction.
	s := b.newSink(t, tp, func(c *kafka.Config) { c.Producers, c.Linger = 1, 500*time.Millisecond })
	// The stale process's client still believes it is the member at its
	// generation.
	s.BindGroupMember(groupA, func() (string, int32) { return idA1, genA1 })
	s.BindGroupMember(groupB, mB.GroupMetadata)
	for _, tok := range []epochs.Token{tokA, tokB} {
		if cp, err := s.Claim(ctx, tok, sink.Observed{}); err != nil || cp.NextOffset != 0 {
			t.Fatalf("Claim(%s) = %+v, %v; want 0", tok, cp, err)
		}
	}
	// Both tenures apply their first batch, together.
	wait := barrier(ctx, 2)
	errs := make(chan error, 2)
	for _, a := range []struct {
		tok epochs.Token
		out string
		who string
	}{{tokA, outA, "A1"}, {tokB, outB, "B"}} {
		go func() {
			_, err := s.Apply(ctx, a.tok, sink.Batch{Offsets: offsets(0, 5)}, atBarrier(produceEffect(a.out, offsets(0, 5), a.who), 4, wait))
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("first batches: %v", err)
		}
	}
	if st := s.Stats(); st.Transactions != 1 || st.SharedCalls != 2 {
		t.Fatalf("the first batches took %d transactions, %d calls shared; want 1 shared by 2", st.Transactions, st.SharedCalls)
	}

	// Group A's member leaves; another member (another process: a Sink
	// of its own) takes the partition over and applies 5..9.
	mA1.Close()
	mA2 := member(t, b, groupA, inA, kip848)
	idA2, genA2 := mA2.GroupMetadata()
	tokA2 := epochs.Token{Group: groupA, Topic: inA, Partition: 0, Epoch: genA2, Member: idA2}
	s2 := b.newSink(t, tp, nil)
	s2.BindMember(mA2.GroupMetadata)
	if cp, err := s2.Claim(ctx, tokA2, sink.Observed{}); err != nil || cp.NextOffset != 5 {
		t.Fatalf("takeover Claim(%s) = %+v, %v; want 5", tokA2, cp, err)
	}
	if _, err := s2.Apply(ctx, tokA2, sink.Batch{Offsets: offsets(5, 10)}, produceEffect(outA, offsets(5, 10), "A2")); err != nil {
		t.Fatalf("Apply by %s: %v", tokA2, err)
	}

	// The stale tenure's batch and tenure B's share a transaction.
	before := s.Stats()
	wait = barrier(ctx, 2)
	var errA, errB error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, errA = s.Apply(ctx, tokA, sink.Batch{Offsets: offsets(5, 10)}, atBarrier(produceEffect(outA, offsets(5, 10), "stale"), 4, wait))
	}()
	go func() {
		defer wg.Done()
		_, errB = s.Apply(ctx, tokB, sink.Batch{Offsets: offsets(5, 10)}, atBarrier(produceEffect(outB, offsets(5, 10), "B"), 4, wait))
	}()
	wg.Wait()
	if st := s.Stats(); st.Transactions-before.Transactions != 1 || st.SharedCalls-before.SharedCalls != 2 {
		t.Fatalf("the second batches took %d transactions, %d calls shared; want 1 shared by 2",
			st.Transactions-before.Transactions, st.SharedCalls-before.SharedCalls)
	}
	var gf *kafka.GroupFencedError
	if !errors.Is(errA, sink.ErrFenced) || !errors.As(errA, &gf) || errors.Is(errA, kafka.ErrMemberChanged) || !errors.Is(errA, kerr.UnknownMemberID) {
		t.Errorf("the stale tenure's Apply: %v; want a *kafka.GroupFencedError of the coordinator's UNKNOWN_MEMBER_ID", errA)
	} else {
		t.Logf("stale: %v", errA)
	}
	if errB == nil || errors.Is(errB, sink.ErrFenced) || errors.As(errB, &gf) || !s.IsSinkFailure(errB) || !errors.Is(errB, kafka.ErrSharedAbort) {
		t.Fatalf("the other tenure's Apply in the aborted transaction: %v; want a sink failure (ErrSharedAbort), not a fence", errB)
	}
	t.Logf("other: %v", errB)
	// Applied again, without the stale tenure: it commits, from offset 5.
	res, err := s.Apply(ctx, tokB, sink.Batch{Offsets: offsets(5, 10)}, produceEffect(outB, offsets(5, 10), "B"))
	if err != nil || res.Applied != 5 || res.NextOffset != 10 {
		t.Fatalf("tenure B's batch again: %+v, %v; want 5 applied, next 10", res, err)
	}

	for _, o := range []struct {
		topic string
		want  func(off int64) string
	}{
		{outA, func(off int64) string {
			if off < 5 {
				return "A1"
			}
			return "A2"
		}},
		{outB, func(int64) string { return "B" }},
	} {
		got := outputsOf(t, b, o.topic)
		for off := range int64(10) {
			if v := got[off]; len(v) != 1 || v[0] != o.want(off) {
				t.Errorf("%s: input %d: a read_committed consumer sees outputs %q, want exactly [%s]", o.topic, off, v, o.want(off))
			}
		}
		if len(got) != 10 {
			t.Errorf("%s: outputs for %d inputs, want 10: %v", o.topic, len(got), got)
		}
	}
	for _, c := range []struct {
		group, topic string
	}{{groupA, inA}, {groupB, inB}} {
		offs, err := kadm.NewClient(b.client(t)).FetchOffsets(ctx, c.group)
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := offs.Lookup(c.topic, 0); !ok || o.At != 10 {
			t.Errorf("committed offset of %s/0 in %s = %+v, want 10", c.topic, c.group, o)
		}
	}
}
