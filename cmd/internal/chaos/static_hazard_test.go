package chaos

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// generationFence is the fence this test shows to be insufficient: it
// compares only the generation, as a sink keyed on the group generation
// alone would.
type generationFence struct {
	mu     sync.Mutex
	stored int32
	landed []string // writers whose write was accepted, in order
}

func (f *generationFence) claim(gen int32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen < f.stored {
		return false
	}
	f.stored = gen
	return true
}

func (f *generationFence) write(gen int32, who string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen < f.stored {
		return false
	}
	f.landed = append(f.landed, who)
	return true
}

// staticMember is a raw franz-go group member with a group.instance.id
// (the Worker refuses static membership: consumer.ErrStaticMembership).
type staticMember struct {
	cl       *kgo.Client
	assigned chan epochs.Token
}

func startStatic(t *testing.T, addrs []string, name string) *staticMember {
	t.Helper()
	m := &staticMember{assigned: make(chan epochs.Token, 4)}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addrs...),
		kgo.ClientID(name),
		kgo.ConsumerGroup("static"),
		kgo.ConsumeTopics("t"),
		kgo.InstanceID("instance-1"),
		kgo.SessionTimeout(30*time.Second), // the paused member is still a member when its replacement joins
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
			member, gen := cl.GroupMetadata()
			for _, p := range assigned["t"] {
				m.assigned <- epochs.Token{Group: "static", Topic: "t", Partition: p, Epoch: gen, Member: member}
			}
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	m.cl = cl
	// Poll in the background so that the client joins the group.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		cl.Close()
	})
	return m
}

func (m *staticMember) waitAssigned(t *testing.T) epochs.Token {
	t.Helper()
	select {
	case tok := <-m.assigned:
		return tok
	case <-time.After(30 * time.Second):
		t.Fatal("never assigned the partition")
		return epochs.Token{}
	}
}

// TestStaticMembershipHazard documents hazard 1 (docs/design.md#hazard-1), the reason the
// Worker refuses static membership: member A (instance-1) owns the
// partition and pauses; a replacement B with the same group.instance.id
// joins and takes A's assignment without a rebalance, so A and B hold the
// partition in the same generation. A fence on the generation alone
// accepts B's claim and then A's late write: the stale write LANDS. The
// full workrouter token (epoch and member) does not let both hold the
// partition, but then the replacement is locked out while the zombie keeps
// the fence: neither outcome is safe and live, hence the refusal.
func TestStaticMembershipHazard(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	fence := &generationFence{}
	a := startStatic(t, c.ListenAddrs(), "a")
	aTok := a.waitAssigned(t)
	if !fence.claim(aTok.Epoch) || !fence.write(aTok.Epoch, "a") {
		t.Fatal("a's claim or first write refused")
	}
	// A pauses here (a frozen process): its next write is held. B, the
	// replacement with the same instance ID, joins.
	b := startStatic(t, c.ListenAddrs(), "b")
	bTok := b.waitAssigned(t)
	if bTok.Epoch != aTok.Epoch {
		t.Fatalf("replacement at generation %d, zombie at %d: a rebalance happened, the hazard did not", bTok.Epoch, aTok.Epoch)
	}
	if bTok.Member == aTok.Member {
		t.Fatalf("replacement has the zombie's member ID %q", bTok.Member)
	}
	if !fence.claim(bTok.Epoch) || !fence.write(bTok.Epoch, "b") {
		t.Fatal("the replacement's claim or write was refused by the generation fence")
	}

	// A wakes and lands its late write: the generation fence cannot tell
	// it from B's.
	if !fence.write(aTok.Epoch, "a-late") {
		t.Fatal("the zombie's late write was rejected: the hazard did not show")
	}
	if got := fence.landed; len(got) != 3 || got[1] != "b" || got[2] != "a-late" {
		t.Fatalf("writes landed %v, want a, b, a-late", got)
	}

	// The full token: B cannot claim at A's epoch with another member, so
	// B is locked out while A keeps the fence and writes on.
	s := memory.New()
	ctx := context.Background()
	if _, err := s.Claim(ctx, aTok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, bTok, sink.Observed{}); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("replacement's claim at the zombie's epoch: %v, want fenced", err)
	}

	// Which is why the Worker refuses static membership by default.
	_, err = consumer.New(ctx, consumer.Config[*memory.Tx]{Brokers: c.ListenAddrs(), Group: "static", Topic: "t", Sink: s,
		Handlers:   map[string]consumer.Handler[*memory.Tx]{"x": func(context.Context, *memory.Tx, consumer.Command) error { return nil }},
		InstanceID: "instance-1"})
	if !errors.Is(err, consumer.ErrStaticMembership) {
		t.Fatalf("consumer.New with an instance ID: %v, want ErrStaticMembership", err)
	}
}
