package broker

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKfakeExpiresMembersWaitingInJoin pins down a difference between the
// embedded broker (kfake) and Kafka that the chaos harness ran into. Kafka
// keeps a member that is waiting in JoinGroup alive until the rebalance
// completes; kfake lets the member's session timer run on and removes it
// after one session timeout, without answering its JoinGroup, so the
// member stays out until its join request times out (rebalance timeout +
// 10s in kgo). Under steady churn with a long rebalance timeout this kept
// a group in PreparingRebalance for minutes; the chaos harness therefore
// gives its workers a rebalance timeout of 2.5× the session timeout.
//
// Here: members a and b (eager protocol) are stable; c joins; b's revoke
// callback takes 2.5× the session timeout, a rejoins at once and waits. The
// group completes its rebalance without a. If this test fails, kfake now
// keeps joining members alive like Kafka, and the harness's short
// rebalance timeout (internal/chaos) can be reconsidered.
func TestKfakeExpiresMembersWaitingInJoin(t *testing.T) {
	const session = time.Second
	b, err := Start(Config{Listen: "127.0.0.1:0", MinSessionTimeout: 100 * time.Millisecond, Topics: map[string]int32{"t": 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var slow atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	member := func(name string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
			kgo.ClientID(name), kgo.SessionTimeout(session), kgo.HeartbeatInterval(100*time.Millisecond),
			kgo.RebalanceTimeout(4*session), kgo.Balancers(kgo.RoundRobinBalancer()),
			kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) {
				if name == "b" && slow.Load() {
					time.Sleep(5 * session / 2)
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !cl.PollFetches(context.Background()).IsClientClosed() {
			}
		}()
		return cl
	}
	describe := func(adm *kadm.Client) (string, []string) {
		gs, err := adm.DescribeGroups(context.Background(), "g")
		if err != nil {
			return "", nil
		}
		var ids []string
		for _, m := range gs["g"].Members {
			ids = append(ids, m.ClientID)
		}
		slices.Sort(ids)
		return gs["g"].State, ids
	}
	a := member("a")
	defer a.Close()
	bm := member("b")
	defer bm.Close()
	adm := kadm.NewClient(bm)
	waitState := func(what string, ok func(state string, members []string) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			state, ms := describe(adm)
			if ok(state, ms) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: state %s, members %v", what, state, ms)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitState("a and b stable", func(s string, ms []string) bool { return s == "Stable" && slices.Equal(ms, []string{"a", "b"}) })
	slow.Store(true)
	c := member("c")
	defer c.Close()
	waitState("a removed while waiting in join", func(s string, ms []string) bool {
		return s == "PreparingRebalance" && !slices.Contains(ms, "a")
	})
	waitState("the rebalance to complete without a", func(s string, ms []string) bool {
		return s == "Stable" && slices.Equal(ms, []string{"b", "c"})
	})
}
