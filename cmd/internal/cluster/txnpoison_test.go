package cluster

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
)

// TestTransactions: the poison producer's transactions land as documented
// on a partition no one else writes to — a poison record right after a
// commit marker and one right after an aborted transaction, the aborted
// records invisible to a read_committed reader, and a good command last so
// that the log does not end with a marker — and ScanLog finds exactly the
// records after a gap. A partition whose log ends with a commit marker is
// read to its end.
func TestTransactions(t *testing.T) {
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := NewPoisonProducer(kf.ListenAddrs(), "ledger", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	what, err := p.Transactions(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(what)
	// cmd@0 marker@1 poison@2 cmd@3 marker@4 (cmd@5 poison@6 aborted)
	// marker@7 poison@8 marker@9 cmd@10.
	offsets := func(rs []PoisonRecord) []int64 {
		var out []int64
		for _, r := range rs {
			if r.Partition != 1 || !r.Transactional {
				t.Errorf("record %+v: want partition 1, transactional", r)
			}
			out = append(out, r.Offset)
		}
		return out
	}
	if got := offsets(p.Acked()); !slices.Equal(got, []int64{2, 8}) {
		t.Errorf("committed poison records at %v, want [2 8]", got)
	}
	if got := offsets(p.Aborted()); !slices.Equal(got, []int64{5, 6}) {
		t.Errorf("aborted records at %v, want [5 6]", got)
	}
	if len(p.Unconfirmed()) != 0 {
		t.Errorf("unconfirmed %+v", p.Unconfirmed())
	}
	var cmdOffsets []int64
	for _, a := range p.Commands() {
		if a.Partition != 1 || envelope.Partition([]byte(a.Account), 2) != 1 {
			t.Errorf("command %+v: not on partition 1, or its key is not", a)
		}
		cmdOffsets = append(cmdOffsets, a.Offset)
	}
	if slices.Sort(cmdOffsets); !slices.Equal(cmdOffsets, []int64{0, 3, 10}) {
		t.Errorf("good commands at %v, want [0 3 10]", cmdOffsets)
	}

	// Partition 0 ends with a commit marker: a transaction of one poison
	// record.
	if note, err := p.txn(ctx, []txnRecord{p.poisonRecord(0)}, true); err != nil {
		t.Fatalf("%s: %v", note, err)
	}
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	scan, err := ScanLog(sctx, kf.ListenAddrs(), "ledger")
	if err != nil {
		t.Fatalf("ScanLog (the log of partition 0 ends with a marker): %v", err)
	}
	if got := slices.Sorted(maps.Keys(scan.AfterGap)); !slices.Equal(got, []string{"1/10", "1/2", "1/8"}) || len(scan.Copies) != 0 {
		t.Errorf("after a gap %v, copies %v; want 1/2, 1/8, 1/10 and none", got, scan.Copies)
	}

	// A read_committed reader sees the records of committed transactions
	// only.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"ledger": {1: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var seen []int64
	for !slices.Contains(seen, 10) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen = append(seen, r.Offset) })
	}
	if !slices.Equal(seen, []int64{0, 2, 3, 8, 10}) {
		t.Errorf("read_committed sees %v, want [0 2 3 8 10]", seen)
	}
}
