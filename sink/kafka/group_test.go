package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
)

// together runs calls (each a call of s) so that they share one
// transaction: s's committers take nothing until all of them are queued.
func together(t *testing.T, s *kafka.Sink, calls ...func()) {
	t.Helper()
	release := kafka.HoldCommits(s)
	var wg sync.WaitGroup
	for _, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call()
		}()
	}
	testwait.For(t, 30*time.Second, "the calls to queue", func() bool { return kafka.Queued(s) == len(calls) })
	release()
	wg.Wait()
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
	s := b.newSink(t, tp, nil)
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
	var err1A, err1B error
	together(t, s, func() {
		_, err1A = s.Apply(ctx, tokA, sink.Batch{Offsets: offsets(0, 5)}, produceEffect(outA, offsets(0, 5), "A1"))
	}, func() {
		_, err1B = s.Apply(ctx, tokB, sink.Batch{Offsets: offsets(0, 5)}, produceEffect(outB, offsets(0, 5), "B"))
	})
	if err1A != nil || err1B != nil {
		t.Fatalf("first batches: %v; %v", err1A, err1B)
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
	var errA, errB error
	together(t, s, func() {
		_, errA = s.Apply(ctx, tokA, sink.Batch{Offsets: offsets(5, 10)}, produceEffect(outA, offsets(5, 10), "stale"))
	}, func() {
		_, errB = s.Apply(ctx, tokB, sink.Batch{Offsets: offsets(5, 10)}, produceEffect(outB, offsets(5, 10), "B"))
	})
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

// TestGroupCommitDeadLetter: a DeadLetter shares a transaction with an
// Apply of another scope, on the same terms: both commit, once.
func TestGroupCommitDeadLetter(t *testing.T) {
	forBrokers(t, func(t *testing.T, b *broker) {
		ctx := t.Context()
		tp := b.sinkTopics(t)
		in := b.topic(t, "in", 2, nil)
		s := b.newSink(t, tp, func(c *kafka.Config) { c.ClientFenceOnly = true })
		tokA := epochs.Token{Group: "wr-kafkasink-groupdl-" + b.sfx, Topic: in, Partition: 0, Epoch: 1, Member: "m"}
		tokB := tokA
		tokB.Partition = 1
		for _, tok := range []epochs.Token{tokA, tokB} {
			if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
				t.Fatal(err)
			}
		}
		var errA, errB error
		var dl sink.DeadLetterResult
		together(t, s, func() {
			_, errA = s.Apply(ctx, tokA, sink.Batch{Offsets: offsets(0, 3)}, produceEffect(tp.out, offsets(0, 3), "A"))
		}, func() {
			dl, errB = s.DeadLetter(ctx, tokB, sink.DeadRecord{Offset: 0, Key: []byte("k"), Value: []byte("poison"), Reason: "handler_error", Error: "boom", Attempts: 1})
		})
		if errA != nil || errB != nil || !dl.Stored || dl.NextOffset != 1 {
			t.Fatalf("Apply: %v; DeadLetter: %+v, %v", errA, dl, errB)
		}
		if st := s.Stats(); st.Transactions != 1 || st.SharedCalls != 2 {
			t.Fatalf("the Apply and the DeadLetter took %d transactions, %d calls shared; want 1 shared by 2", st.Transactions, st.SharedCalls)
		}
		got := outputsOf(t, b, tp.out)
		for off := range int64(3) {
			if v := got[off]; len(v) != 1 || v[0] != "A" {
				t.Errorf("input %d: outputs %q, want exactly [A]", off, v)
			}
		}
		dead := b.readCommitted(t, tp.dead)
		if len(dead) != 1 || string(dead[0].Value) != "poison" || header(dead[0], kafka.HeaderOriginalPartition) != "1" || dead[0].Offset+1 != dl.ID {
			t.Fatalf("dead letters %v, want the one poison record of partition 1 at ID %d", dead, dl.ID)
		}
	})
}

// TestGroupCommitOneScopeOnce: two calls of one scope queued together
// (concurrent calls of one tenure, which a worker never makes) are not
// put in one transaction: the first commits, the second then finds the
// scope moved (sink.ErrBadBatch) and commits nothing. Put in one
// transaction, the committer would take the scope's lock twice and hang.
func TestGroupCommitOneScopeOnce(t *testing.T) {
	b := newFake(t)
	ctx := t.Context()
	tp := b.sinkTopics(t)
	in := b.topic(t, "in", 1, nil)
	s := b.newSink(t, tp, func(c *kafka.Config) { c.ClientFenceOnly = true })
	tok := epochs.Token{Group: "wr-kafkasink-onescope-" + b.sfx, Topic: in, Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	release := kafka.HoldCommits(s)
	errs := make(chan error, 2)
	for _, who := range []string{"x", "y"} {
		go func() {
			_, err := s.Apply(ctx, tok, sink.Batch{Offsets: offsets(0, 3)}, produceEffect(tp.out, offsets(0, 3), who))
			errs <- err
		}()
	}
	testwait.For(t, 30*time.Second, "the two calls to queue", func() bool { return kafka.Queued(s) == 2 })
	release()
	var ok, bad int
	for range 2 {
		select {
		case err := <-errs:
			switch {
			case err == nil:
				ok++
			case errors.Is(err, sink.ErrBadBatch):
				bad++
			default:
				t.Fatalf("Apply: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the two Applies of one scope did not return in 30s (both in one transaction?)")
		}
	}
	if ok != 1 || bad != 1 {
		t.Fatalf("%d Applies committed, %d refused; want 1 and 1", ok, bad)
	}
	if st := s.Stats(); st.Transactions != 1 {
		t.Fatalf("%d transactions, want 1", st.Transactions)
	}
	got := outputsOf(t, b, tp.out)
	for off := range int64(3) {
		if v := got[off]; len(v) != 1 {
			t.Errorf("input %d: outputs %q, want one", off, v)
		}
	}
}

// TestGroupCommitLinger: a committer waits (Config.Linger) only for the
// calls of other active scopes. A lone scope's calls never wait
// (Stats.Lingered stays 0); two scopes applying side by side share
// transactions, which without the linger they would not (two producers,
// two scopes: a producer is always free).
func TestGroupCommitLinger(t *testing.T) {
	b := newFake(t)
	ctx := t.Context()
	tp := b.sinkTopics(t)
	in := b.topic(t, "in", 2, nil)
	s := b.newSink(t, tp, func(c *kafka.Config) { c.ClientFenceOnly, c.Linger = true, time.Second })
	toks := make([]epochs.Token, 2)
	outs := make([]string, 2)
	for i := range toks {
		toks[i] = epochs.Token{Group: "wr-kafkasink-linger-" + b.sfx, Topic: in, Partition: int32(i), Epoch: 1, Member: "m"}
		outs[i] = b.topic(t, "out-"+strconv.Itoa(i), 1, nil)
		if _, err := s.Claim(ctx, toks[i], sink.Observed{}); err != nil {
			t.Fatal(err)
		}
	}
	for from := int64(0); from < 3; from++ {
		if _, err := s.Apply(ctx, toks[0], sink.Batch{Offsets: offsets(from, from+1)}, produceEffect(outs[0], offsets(from, from+1), "lone")); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Lingered != 0 || st.Transactions != 3 {
		t.Fatalf("a lone scope's 3 Applies: %d transactions, %d lingered; want 3, none lingered", st.Transactions, st.Lingered)
	}
	// Side by side, the scopes share transactions. Whether a given call
	// finds the other's queued depends on the scheduler (a scope counts
	// as active for 250 ms after its last call): up to three rounds of 20
	// Applies, each the same; without the linger no round ever shares.
	var st kafka.Stats
	rounds := int64(0)
	for rounds < 3 {
		applySideBySide(t, s, toks, []int64{3 + 10*rounds, 10 * rounds}, 10, outs)
		rounds++
		if st = s.Stats(); st.Lingered > 0 && st.SharedCalls > 0 {
			break
		}
		t.Logf("round %d of two scopes side by side shared nothing: %+v", rounds, st)
	}
	if st.Lingered == 0 || st.SharedCalls == 0 {
		t.Fatalf("two scopes side by side, %d rounds: %d transactions, %d lingered, %d calls shared; want some shared", rounds, st.Transactions, st.Lingered, st.SharedCalls)
	}
	t.Logf("two scopes side by side, %d rounds of 20 Applies: %+v", rounds, st)
	for i, n := range []int64{3 + 10*rounds, 10 * rounds} {
		got := outputsOf(t, b, outs[i])
		for off := range n {
			if v := got[off]; len(v) != 1 {
				t.Errorf("%s: input %d: outputs %q, want one", toks[i], off, v)
			}
		}
	}
}

// TestGroupCommitCancelQueued: an Apply whose ctx ends while its call is
// still queued returns the ctx's error and commits nothing; the
// committers go on (the next Apply commits).
func TestGroupCommitCancelQueued(t *testing.T) {
	b := newFake(t)
	tp := b.sinkTopics(t)
	in := b.topic(t, "in", 1, nil)
	s := b.newSink(t, tp, func(c *kafka.Config) { c.ClientFenceOnly = true })
	tok := epochs.Token{Group: "wr-kafkasink-cancel-" + b.sfx, Topic: in, Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(t.Context(), tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	release := kafka.HoldCommits(s)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Apply(ctx, tok, sink.Batch{Offsets: offsets(0, 2)}, produceEffect(tp.out, offsets(0, 2), "cancelled"))
		errc <- err
	}()
	testwait.For(t, 30*time.Second, "the call to queue", func() bool { return kafka.Queued(s) == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the Apply cancelled while queued: %v, want context.Canceled", err)
	}
	if n := kafka.Queued(s); n != 0 {
		t.Fatalf("%d calls still queued after the cancel", n)
	}
	release()
	if res, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offsets(0, 2)}, produceEffect(tp.out, offsets(0, 2), "applied")); err != nil || res.Applied != 2 {
		t.Fatalf("the next Apply: %+v, %v", res, err)
	}
	got := outputsOf(t, b, tp.out)
	for off := range int64(2) {
		if v := got[off]; len(v) != 1 || v[0] != "applied" {
			t.Errorf("input %d: outputs %q, want exactly [applied]", off, v)
		}
	}
	if st := s.Stats(); st.Transactions != 1 {
		t.Fatalf("%d transactions, want 1", st.Transactions)
	}
}

// applySideBySide runs, for each of toks at once, n Applies of one record
// each from offset from[i] on, each producing its output to outs[i], and
// fails t if any fails.
func applySideBySide(t *testing.T, s *kafka.Sink, toks []epochs.Token, from []int64, n int64, outs []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(toks))
	for i, tok := range toks {
		wg.Go(func() {
			for o := from[i]; o < from[i]+n && errs[i] == nil; o++ {
				// A failure that is not a fence is retried, as the
				// worker retries it (a transaction the broker refused
				// for its own reasons: an out-of-order sequence on a
				// partition never written before, KAFKA-15591); the
				// callers check each input's outputs exactly once.
				for attempt := 1; ; attempt++ {
					_, errs[i] = s.Apply(t.Context(), tok, sink.Batch{Offsets: offsets(o, o+1)}, produceEffect(outs[i], offsets(o, o+1), "side-by-side"))
					if errs[i] == nil || errors.Is(errs[i], sink.ErrFenced) || attempt == 5 {
						break
					}
					t.Logf("%s: Apply of %d failed (attempt %d), retried: %v", tok, o, attempt, errs[i])
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("side by side: %v", err)
	}
}
