package admin_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/observe"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestResetPartitions: a reset of three partitions, each guarded by its
// own token, changes nothing while any plan would not proceed (a stale
// token, a partition without a fence, a refusal), says which in a
// *PartitionsError, and resets them all when every plan proceeds.
func TestResetPartitions(t *testing.T) {
	const parts = 3
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := memory.New()
	look, err := observe.ReadLog(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(parts) {
		obs, err := look.Observed(topic, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, epochs.Token{Group: group, Topic: topic, Partition: p, Epoch: 7, Member: "m-7"}, obs); err != nil {
			t.Fatal(err)
		}
	}
	plans, err := admin.Plan(ctx, cl, s, admin.PlanRequest{Group: group, Topic: topic, Checkpoint: admin.Checkpoint{Keep: true}, Force: true})
	if err != nil || len(plans) != parts {
		t.Fatalf("Plan: %d plans, %v", len(plans), err)
	}
	good := map[int32]string{}
	for _, p := range plans {
		good[p.Report.Fence.Scope.Partition] = p.Expect
	}
	held := func() int {
		fs, err := s.Fences(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range fs {
			if !f.Holder.IsZero() {
				n++
			}
		}
		return n
	}
	req := func(expect map[int32]string, force bool) admin.PartitionsRequest {
		return admin.PartitionsRequest{Group: group, Topic: topic, Expect: expect, Checkpoint: admin.Checkpoint{Keep: true}, Reason: "test", Force: force}
	}
	with := func(p int32, tok string) map[int32]string {
		m := map[int32]string{}
		for k, v := range good {
			m[k] = v
		}
		m[p] = tok
		return m
	}

	for _, c := range []struct {
		name  string
		req   admin.PartitionsRequest
		want  error
		parts []int32
	}{
		{"a stale token", req(with(1, "00000000"), true), admin.ErrMoved, []int32{1}},
		{"a partition without a fence", req(with(5, "00000000"), true), sink.ErrNotFound, []int32{5}},
		{"no cause and no force", req(good, false), admin.ErrNoCause, []int32{0, 1, 2}},
	} {
		res, err := admin.ResetPartitions(ctx, cl, s, c.req)
		var pe *admin.PartitionsError
		if !errors.As(err, &pe) || !errors.Is(err, c.want) || len(res) != 0 {
			t.Fatalf("%s: %d results, err %v; want a *PartitionsError matching %v", c.name, len(res), err, c.want)
		}
		var got []int32
		for _, p := range pe.Partitions {
			got = append(got, p.Partition)
		}
		if !slices.Equal(got, c.parts) {
			t.Fatalf("%s: the error lists partitions %v, want %v: %v", c.name, got, c.parts, err)
		}
		if len(pe.Done) != 0 || !strings.Contains(err.Error(), "nothing changed") {
			t.Fatalf("%s: %v, want nothing changed", c.name, err)
		}
		if n := held(); n != parts {
			t.Fatalf("%s: %d of %d fences still held after a refused reset", c.name, n, parts)
		}
	}
	if _, err := admin.ResetPartitions(ctx, cl, s, admin.PartitionsRequest{Group: group, Topic: topic, Expect: good, Checkpoint: admin.Checkpoint{Keep: true}, Force: true}); !errors.Is(err, admin.ErrBadRequest) {
		t.Fatalf("no reason: %v, want ErrBadRequest", err)
	}

	res, err := admin.ResetPartitions(ctx, cl, s, req(good, true))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != parts {
		t.Fatalf("%d results, want %d", len(res), parts)
	}
	for i, r := range res {
		if r.Before.Scope.Partition != int32(i) || r.Before.Holder.IsZero() || !r.After.Holder.IsZero() || !r.After.ProofRequired {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if n := held(); n != 0 {
		t.Fatalf("%d fences still held after the reset", n)
	}
}
