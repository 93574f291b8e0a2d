package admin_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/observe"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// lostRecords sets up the examples' scope: 20 records on orders, of
// which a worker (epoch 7, member m-7) applied the first 10 before the
// records below offset 15 were deleted: 5 were never applied.
func lostRecords() (ctx context.Context, cl *kgo.Client, s *memory.Sink, done func()) {
	ctx = context.Background()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		panic(err)
	}
	cl, err = kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		panic(err)
	}
	for range 20 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			panic(err)
		}
	}
	s = memory.New()
	tok := epochs.Token{Group: "workers", Topic: "orders", Partition: 0, Epoch: 7, Member: "m-7"}
	look, err := observe.ReadLog(ctx, cl, "orders") // what the worker's claim observed
	if err != nil {
		panic(err)
	}
	obs, _ := look.Observed("orders", 0)
	if _, err := s.Claim(ctx, tok, obs); err != nil {
		panic(err)
	}
	if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}, func(context.Context, *memory.Tx, int) error { return nil }); err != nil {
		panic(err)
	}
	adm := kadm.NewClient(cl)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 15})
	if _, err := adm.DeleteRecords(ctx, del); err != nil {
		panic(err)
	}
	return ctx, cl, s, func() { cl.Close(); kf.Close() }
}

// Diagnose names what is wrong with each scope: here, records deleted
// before they were applied.
func ExampleDiagnose() {
	ctx, cl, s, done := lostRecords()
	defer done()

	reports, err := admin.Diagnose(ctx, cl, s, "workers", "orders")
	if err != nil {
		panic(err)
	}
	for _, r := range reports {
		fmt.Printf("%s: checkpoint %d, log %d to %d\n", r.Fence.Scope, r.Fence.NextOffset, r.Log.LogStart, r.Log.LogEnd)
		for _, p := range r.Problems {
			fmt.Printf("  %s: %d records lost\n", p.Kind, r.Lost())
		}
	}
	// Output:
	// workers/orders/0: checkpoint 10, log 15 to 20
	//   retention_loss: 5 records lost
}

// Plan is the dry run: what a reset would change, its expect token, and
// whether it would be refused and why. Keeping the checkpoint is refused
// on a log that lost records under it; restarting at the log's start is
// not.
func ExamplePlan() {
	ctx, cl, s, done := lostRecords()
	defer done()

	for _, cp := range []admin.Checkpoint{{Keep: true}, {RestartAt: "earliest"}} {
		plans, err := admin.Plan(ctx, cl, s, admin.PlanRequest{Group: "workers", Topic: "orders", Checkpoint: cp})
		if err != nil {
			panic(err)
		}
		for _, p := range plans {
			if p.Refused != "" {
				fmt.Printf("%+v: refused (%s)\n", cp, p.Refused)
				continue
			}
			fmt.Printf("%+v: checkpoint %d -> %d, expect token of %d characters\n", cp, p.Report.Fence.NextOffset, p.Checkpoint, len(p.Expect))
		}
	}
	// Output:
	// {Keep:true RestartAt:}: refused (keep_on_changed_log)
	// {Keep:false RestartAt:earliest}: checkpoint 10 -> 15, expect token of 8 characters
}

// Reset performs a planned reset, guarded by the plan's expect token: it
// clears the holder, moves the checkpoint, requires the next claim to
// prove its membership, and records the reason in the sink's history.
func ExampleReset() {
	ctx, cl, s, done := lostRecords()
	defer done()

	cp := admin.Checkpoint{RestartAt: "earliest"}
	plans, err := admin.Plan(ctx, cl, s, admin.PlanRequest{Group: "workers", Topic: "orders", Checkpoint: cp})
	if err != nil {
		panic(err)
	}
	res, err := admin.Reset(ctx, cl, s, admin.Request{Scope: plans[0].Report.Fence.Scope, Expect: plans[0].Expect,
		Checkpoint: cp, Reason: "accepted the loss of offsets 10-14 (INC-1)"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("before: holder %s, checkpoint %d\n", res.Before.Holder.Member, res.Before.NextOffset)
	fmt.Printf("after: holder zero %v, checkpoint %d, proof required %v\n", res.After.Holder.IsZero(), res.After.NextOffset, res.After.ProofRequired)

	_, err = admin.Reset(ctx, cl, s, admin.Request{Scope: plans[0].Report.Fence.Scope, Expect: plans[0].Expect,
		Checkpoint: cp, Reason: "again"})
	fmt.Println("the same token again:", err != nil)
	// Output:
	// before: holder m-7, checkpoint 10
	// after: holder zero true, checkpoint 15, proof required true
	// the same token again: true
}

// Status describes a group on a topic: offsets, lag, the state each
// worker reported, and, with a sink, its fences and their problems.
func ExampleStatus() {
	ctx, cl, s, done := lostRecords()
	defer done()
	// The group committed offset 10 to Kafka (its workers are gone).
	commit := kadm.Offsets{}
	commit.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 10, LeaderEpoch: -1})
	if _, err := kadm.NewClient(cl).CommitOffsets(ctx, "workers", commit); err != nil {
		panic(err)
	}

	rep, err := admin.Status(ctx, cl, admin.StatusRequest{Group: "workers", Topic: "orders", Sink: s})
	if err != nil {
		panic(err)
	}
	fmt.Printf("group %s (%s): %s, %d members, total lag %d\n", rep.Group, rep.Protocol, rep.State, len(rep.Members), rep.TotalLag)
	for _, p := range rep.Partitions {
		fmt.Printf("partition %d: log %d to %d, committed %d, %s; sink checkpoint %d\n",
			p.Partition, p.StartOffset, p.EndOffset, *p.Committed, p.State, p.Sink.NextOffset)
		for _, pr := range p.Problems {
			fmt.Printf("  %s\n", pr.Kind)
		}
	}
	// Output:
	// group workers (classic): Empty, 0 members, total lag 10
	// partition 0: log 15 to 20, committed 10, unowned; sink checkpoint 10
	//   retention_loss
}
