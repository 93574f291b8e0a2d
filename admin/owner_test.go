package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/observe"
	"github.com/workrouter/workrouter/sink/memory"
)

// joinKIP848 joins group on topic with the KIP-848 protocol through a
// client of its own and returns once it is assigned partition 0, with
// its member ID and epoch.
func joinKIP848(t *testing.T, ctx context.Context, addrs []string) (string, int32) {
	t.Helper()
	assigned := make(chan struct{}, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ServerSideBalancer(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if len(m[topic]) > 0 {
				select {
				case assigned <- struct{}{}:
				default:
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for pctx.Err() == nil {
			cl.PollFetches(pctx)
		}
	}()
	t.Cleanup(func() { stop(); <-polled; cl.Close() })
	select {
	case <-assigned:
	case <-ctx.Done():
		t.Fatal("the KIP-848 member was never assigned the partition")
	}
	member, epoch := cl.GroupMetadata()
	return member, epoch
}

// TestDiagnoseSeesOwnerByTopicID: on a broker whose KIP-848
// ConsumerGroupDescribe names assigned topics only by their ID (kfake
// does; so may Kafka), Diagnose still reports who is assigned the
// partition. Before the group description was one (observe.DescribeGroup,
// matching by ID or name), Diagnose described the group with kadm, which
// matches by name only, and reported no owner here.
func TestDiagnoseSeesOwnerByTopicID(t *testing.T) {
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	member, epoch := joinKIP848(t, ctx, kf.ListenAddrs())

	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// The premise: the broker's description of the group assigns the
	// partition by topic ID, with no topic name.
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	var byID int
	for _, g := range resp.Groups {
		for _, m := range g.Members {
			for _, tp := range m.Assignment.TopicPartitions {
				if tp.Topic != "" {
					t.Fatalf("the broker names the assigned topic (%q): this test needs a broker that sends only IDs", tp.Topic)
				}
				byID++
			}
		}
	}
	if byID == 0 {
		t.Fatalf("the broker's ConsumerGroupDescribe assigns nothing: %+v", resp.Groups)
	}

	s := memory.New()
	tok := epochs.Token{Group: group, Topic: topic, Partition: 0, Epoch: epoch, Member: member}
	look, err := observe.ReadLog(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := look.Observed(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, tok, obs); err != nil {
		t.Fatal(err)
	}
	rs, err := admin.Diagnose(ctx, cl, s, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("Diagnose returned %d reports, want 1", len(rs))
	}
	r := rs[0]
	if r.Owner != member || !r.HolderIsMember || r.Members != 1 || r.GroupEpoch < epoch || len(r.Problems) != 0 {
		t.Fatalf("Diagnose on a KIP-848 group described by topic ID: owner %q, holder is member %v, %d members, group epoch %d, problems %v; want owner %s, a member, 1 member, epoch >= %d, no problems",
			r.Owner, r.HolderIsMember, r.Members, r.GroupEpoch, r.Problems, member, epoch)
	}
}
