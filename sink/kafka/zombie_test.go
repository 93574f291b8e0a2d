package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
)

// member joins group as a consumer of topic (one partition) with the
// given protocol and returns its client once partition 0 is assigned to
// it. It consumes nothing and commits nothing: it is the group
// membership the sink's commits are checked against.
func member(t *testing.T, b *broker, group, topic string, kip848 bool) *kgo.Client {
	t.Helper()
	assigned := make(chan struct{}, 1)
	opts := []kgo.Opt{kgo.SeedBrokers(b.addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if len(m[topic]) > 0 {
				select {
				case assigned <- struct{}{}:
				default:
				}
			}
		})}
	if kip848 {
		opts = append(opts, kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer())
	} else {
		opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	// The group management runs in the background; polling lets it
	// deliver the assignment on every protocol.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			cl.PollRecords(ctx, 1)
		}
	}()
	select {
	case <-assigned:
	case <-ctx.Done():
		t.Fatalf("member of %s was not assigned partition 0 of %s", group, topic)
	}
	return cl
}

// outputsOf returns, per input offset, the values of the records of out
// that a read_committed consumer sees for it (their key is the input
// offset).
func outputsOf(t *testing.T, b *broker, out string) map[int64][]string {
	t.Helper()
	got := map[int64][]string{}
	for _, r := range b.readCommitted(t, out) {
		off, err := strconv.ParseInt(string(r.Key), 10, 64)
		if err != nil {
			t.Fatalf("output record with key %q", r.Key)
		}
		got[off] = append(got[off], string(r.Value))
	}
	return got
}

// produceEffect returns an effect producing, for record i, one record to
// out keyed by offsets[i] with value who.
func produceEffect(out string, offsets []int64, who string) sink.Effect[*kafka.Tx] {
	return func(ctx context.Context, tx *kafka.Tx, i int) error {
		return tx.Produce(ctx, kafka.Record{Topic: out, Key: []byte(strconv.FormatInt(offsets[i], 10)), Value: []byte(who),
			Headers: []kafka.Header{{Key: "input-offset", Value: []byte(strconv.FormatInt(offsets[i], 10))}}})
	}
}

func offsets(from, to int64) []int64 {
	var o []int64
	for i := from; i < to; i++ {
		o = append(o, i)
	}
	return o
}

// TestZombieRefusedByBroker: a tenure paused in the middle of a batch
// while its member leaves the group and another member takes the
// partition over resumes and commits: the group coordinator refuses its
// offset commit (the member is unknown), the transaction aborts, and a
// read_committed consumer of the output sees each input's output once,
// none of the zombie's. The two tenures are two Sinks (two processes):
// the client-side fence of one cannot see the other's claim, so the
// refusal is the broker's. The zombie's dead letter is refused alike.
func TestZombieRefusedByBroker(t *testing.T) {
	forBrokers(t, func(t *testing.T, b *broker) {
		for _, proto := range []string{"classic", "kip848"} {
			t.Run(proto, func(t *testing.T) {
				zombieRefused(t, b, proto == "kip848")
			})
		}
	})
	// Before transaction version 2 (KIP-890 part 2) the sink adds the
	// group's offsets to the transaction with AddOffsetsToTxn.
	t.Run("kfake-transaction-version-1", func(t *testing.T) {
		b := newFake(t)
		adm := b.admin(t)
		if _, err := adm.UpdateFeatures(t.Context(), false, kadm.FeatureUpdate{Feature: "transaction.version", MaxVersionLevel: 1, UpgradeType: 2}); err != nil {
			t.Fatal(err)
		}
		resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(t.Context(), b.client(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range resp.FinalizedFeatures {
			if f.Name == "transaction.version" && f.MaxVersionLevel >= 2 {
				t.Fatalf("transaction.version is still %d after the downgrade", f.MaxVersionLevel)
			}
		}
		zombieRefused(t, b, false)
	})
}

func zombieRefused(t *testing.T, b *broker, kip848 bool) {
	ctx := t.Context()
	b = &broker{name: b.name, addrs: b.addrs, kf: b.kf, sfx: suffix()}
	in := b.topic(t, "in", 1, nil)
	tp := b.sinkTopics(t)
	group := "wr-kafkasink-zombie-" + b.sfx

	m1 := member(t, b, group, in, kip848)
	id1, gen1 := m1.GroupMetadata()
	tokA := epochs.Token{Group: group, Topic: in, Partition: 0, Epoch: gen1, Member: id1}
	sA := b.newSink(t, tp, nil)
	sA.BindMember(m1.GroupMetadata)
	if cp, err := sA.Claim(ctx, tokA, sink.Observed{}); err != nil || cp.NextOffset != 0 {
		t.Fatalf("Claim(%s) = %+v, %v; want 0", tokA, cp, err)
	}
	if _, err := sA.Apply(ctx, tokA, sink.Batch{Offsets: offsets(0, 5)}, produceEffect(tp.out, offsets(0, 5), "A")); err != nil {
		t.Fatalf("Apply by %s: %v", tokA, err)
	}

	// The zombie's batch: its effects run, then it pauses (a frozen
	// process) before the commit.
	paused, release := make(chan struct{}), make(chan struct{})
	zombieErr := make(chan error, 1)
	go func() {
		eff := produceEffect(tp.out, offsets(5, 10), "zombie")
		_, err := sA.Apply(ctx, tokA, sink.Batch{Offsets: offsets(5, 10)}, func(ctx context.Context, tx *kafka.Tx, i int) error {
			if err := eff(ctx, tx, i); err != nil {
				return err
			}
			if i == 4 {
				close(paused)
				<-release
			}
			return nil
		})
		zombieErr <- err
	}()
	<-paused
	// The frozen process's client still believes it is the member at
	// its generation: its group metadata does not change while it
	// sleeps. The coordinator no longer has the member.
	sA.BindMember(func() (string, int32) { return id1, gen1 })
	m1.Close()

	m2 := member(t, b, group, in, kip848)
	id2, gen2 := m2.GroupMetadata()
	tokB := epochs.Token{Group: group, Topic: in, Partition: 0, Epoch: gen2, Member: id2}
	sB := b.newSink(t, tp, nil)
	sB.BindMember(m2.GroupMetadata)
	if cp, err := sB.Claim(ctx, tokB, sink.Observed{}); err != nil || cp.NextOffset != 5 {
		t.Fatalf("takeover Claim(%s) = %+v, %v; want 5", tokB, cp, err)
	}
	if _, err := sB.Apply(ctx, tokB, sink.Batch{Offsets: offsets(5, 10)}, produceEffect(tp.out, offsets(5, 10), "B")); err != nil {
		t.Fatalf("Apply by %s: %v", tokB, err)
	}

	close(release)
	err := <-zombieErr
	var gf *kafka.GroupFencedError
	if !errors.Is(err, sink.ErrFenced) || !errors.As(err, &gf) || errors.Is(err, kafka.ErrMemberChanged) {
		t.Errorf("the zombie's Apply after the takeover: %v; want a *kafka.GroupFencedError from the coordinator", err)
	} else if !errors.Is(err, kerr.UnknownMemberID) {
		t.Errorf("the zombie's refusal %v is not the coordinator's UNKNOWN_MEMBER_ID", err)
	} else {
		t.Logf("the coordinator refused the zombie's commit: %v", err)
	}
	// Its dead letter is refused too.
	_, err = sA.DeadLetter(ctx, tokA, sink.DeadRecord{Offset: 10, Key: []byte("k"), Value: []byte("poison"), Reason: "handler_error", Error: "boom"})
	if !errors.As(err, &gf) {
		t.Errorf("the zombie's DeadLetter: %v; want a *kafka.GroupFencedError", err)
	}

	got := outputsOf(t, b, tp.out)
	for off := range int64(10) {
		want := "A"
		if off >= 5 {
			want = "B"
		}
		if v := got[off]; len(v) != 1 || v[0] != want {
			t.Errorf("input %d: a read_committed consumer sees outputs %q, want exactly [%s]", off, v, want)
		}
	}
	if len(got) != 10 {
		t.Errorf("outputs for %d inputs, want 10: %v", len(got), got)
	}
	if dl := b.readCommitted(t, tp.dead); len(dl) != 0 {
		t.Errorf("the zombie's refused dead letter is visible: %d records", len(dl))
	}
	offs, err := kadm.NewClient(m2).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(in, 0); !ok || o.At != 10 {
		t.Fatalf("committed offset of %s/0 = %+v, want 10", in, o)
	}
}

// tracked is a group member and the partitions it holds.
type tracked struct {
	cl *kgo.Client
	mu sync.Mutex
	ps map[int32]bool
}

func (m *tracked) holds() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int32
	for p := range m.ps {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// join starts a member of group consuming topic and returns it once it
// holds a partition.
func join(t *testing.T, b *broker, group, topic string, kip848 bool) *tracked {
	t.Helper()
	m := &tracked{ps: map[int32]bool{}}
	opts := []kgo.Opt{kgo.SeedBrokers(b.addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range a[topic] {
				m.ps[p] = true
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range r[topic] {
				delete(m.ps, p)
			}
		})}
	if kip848 {
		opts = append(opts, kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer())
	} else {
		opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	m.cl = cl
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollRecords(ctx, 1)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	testwait.For(t, 60*time.Second, "a member of "+group+" to hold a partition", func() bool { return len(m.holds()) > 0 })
	return m
}

// TestKeptPartitionNewGeneration: a member keeps a partition through a
// rebalance that moves the group's generation (classic) or its member
// epoch (KIP-848): its tenure's token keeps the epoch of the assignment,
// and its next batch commits at the member's current generation, which
// the coordinator accepts. A first attempt made with the generation its
// client had before the rebalance (the client not caught up yet) is
// refused by the coordinator, and the sink tries again at the one the
// client has then, with the same records: one output per input. (Apache
// Kafka 4.3 and later accept a KIP-848 member's commit at the older epoch
// for a partition it kept: KIP-1251.)
func TestKeptPartitionNewGeneration(t *testing.T) {
	forBrokers(t, func(t *testing.T, b *broker) {
		for _, proto := range []string{"classic", "kip848"} {
			t.Run(proto, func(t *testing.T) {
				keptPartition(t, b, proto == "kip848")
			})
		}
	})
}

func keptPartition(t *testing.T, b *broker, kip848 bool) {
	ctx := t.Context()
	b = &broker{name: b.name, addrs: b.addrs, kf: b.kf, sfx: suffix()}
	in := b.topic(t, "in", 2, nil)
	tp := b.sinkTopics(t)
	group := "wr-kafkasink-kept-" + b.sfx
	m1 := join(t, b, group, in, kip848)
	testwait.For(t, 60*time.Second, "the first member to hold both partitions", func() bool { return len(m1.holds()) == 2 })
	id1, gen1 := m1.cl.GroupMetadata()
	m2 := join(t, b, group, in, kip848)
	var kept int32 = -1
	testwait.For(t, 60*time.Second, "the rebalance to give the second member a partition and the first a new generation", func() bool {
		_, gen := m1.cl.GroupMetadata()
		h := m1.holds()
		if len(h) == 1 && len(m2.holds()) == 1 && gen > gen1 {
			kept = h[0]
			return true
		}
		return false
	})
	_, gen2 := m1.cl.GroupMetadata()
	tok := epochs.Token{Group: group, Topic: in, Partition: kept, Epoch: gen1, Member: id1}
	var logs syncBuffer
	s := b.newSink(t, tp, func(c *kafka.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	var calls atomic.Int32
	// The first look at the member's metadata is the one its client had
	// before the rebalance.
	s.BindMember(func() (string, int32) {
		if calls.Add(1) == 1 {
			return id1, gen1
		}
		return m1.cl.GroupMetadata()
	})
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: offsets(0, 3)}, produceEffect(tp.out, offsets(0, 3), "m1")); err != nil {
		t.Fatalf("Apply by %s (token epoch %d, current generation %d): %v", tok, gen1, gen2, err)
	}
	switch n := calls.Load(); {
	case kip848 && b.kf == nil:
		// Apache Kafka 4.3 and later (KIP-1251) accept a KIP-848
		// member's commit at an older member epoch for a partition it
		// has held since that epoch: the first attempt commits.
		if n != 1 {
			t.Fatalf("the sink looked at the member's metadata %d times: the coordinator refused the older member epoch (Kafka before 4.3, without KIP-1251?)", n)
		}
	case n < 2:
		t.Fatalf("the sink looked at the member's metadata %d times: the stale first attempt was not refused and retried", n)
	case !strings.Contains(logs.String(), "offset commit refused for the member's generation; trying again"):
		t.Fatalf("the retry was not logged: %q", logs.String())
	}
	got := outputsOf(t, b, tp.out)
	for off := range int64(3) {
		if v := got[off]; len(v) != 1 || v[0] != "m1" {
			t.Errorf("input %d: outputs %q, want exactly [m1]", off, v)
		}
	}
	t.Logf("token epoch %d, committed at generation %d after %d looks at the metadata", gen1, gen2, calls.Load())
}

// syncBuffer is a bytes.Buffer safe for concurrent use: a Logger's
// destination.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
