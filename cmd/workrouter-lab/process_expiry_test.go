package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/kafkacluster"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// expiryRetention are the broker settings under which Apache Kafka
// deletes an empty group a minute after it expired: its committed
// offsets are older than offsets.retention.minutes (counted, for a
// classic group, from the moment it became empty; for a KIP-848 group,
// from each offset's last commit), checked every
// offsets.retention.check.interval.ms.
var expiryRetention = map[string]string{
	"offsets.retention.minutes":           "1",
	"offsets.retention.check.interval.ms": "1000",
}

// TestExpiredGroupTakenOver (docs/design.md#expired-groups): a worker
// fleet is stopped until its group expires, the last holder of every
// partition frozen with SIGSTOP in front of a batch; the fleet comes back
// in a new incarnation of the group, whose epochs are below every stored
// holder's, takes every partition over with a proof of membership and no
// operator step, and applies every new command exactly once; the frozen
// holder, resumed after all that, has its batch refused.
//
// With WORKROUTER_TEST_BROKERS set it runs on Apache Kafka: a node of its
// own (internal/kafkacluster) with offsets.retention.minutes=1, where the
// broker deletes the group on its own schedule, under
// WORKROUTER_TEST_PROTOCOL's group protocol. On the embedded broker
// (kfake), which never expires a group, the group is deleted by hand
// (DeleteGroups) once it is empty: the same state, reached another way.
func TestExpiredGroupTakenOver(t *testing.T) {
	var addrs []string
	if os.Getenv("WORKROUTER_TEST_BROKERS") != "" {
		c := kafkacluster.Testing(t, kafkacluster.Config{Overrides: expiryRetention})
		addrs = c.Brokers()
	}
	protocol := testProtocol(t)
	for _, be := range []struct {
		name string
		open func(*testing.T) *procBackend
	}{{"sqlite", procSQLite}, {"postgres", procPostgres}} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b := be.open(t)
			var w *procWorld
			if addrs != nil {
				w = newProcWorldOn(t, b, addrs, protocol)
			} else {
				w = newProcWorld(t, b)
				w.protocol = protocol
			}
			expiredGroupTakenOver(t, w, addrs != nil)
		})
	}
}

// expiredGroupTakenOver is TestExpiredGroupTakenOver in w; onKafka says
// whether the broker expires the group by itself.
func expiredGroupTakenOver(t *testing.T, w *procWorld, onKafka bool) {
	// The old fleet: a applies a first lot, b joins, a is scaled away,
	// and b, the last of the fleet, holds every partition, each claimed
	// in a rebalance after the group's first: at an epoch above the
	// first ones a new incarnation hands out.
	a := w.start("a")
	testwait.For(t, 60*time.Second, "a to claim every partition", func() bool { return len(a.Owned()) == procPartitions })
	w.produce(200)
	w.waitAllApplied(60 * time.Second)
	bw := w.start("b", "--freeze-before-batch=3")
	testwait.For(t, 60*time.Second, "b to claim partitions", func() bool { return len(bw.Owned()) > 0 })
	if !a.Stop(15 * time.Second) {
		t.Fatal("a did not stop when asked")
	}
	testwait.For(t, 60*time.Second, "b to claim every partition", func() bool { return len(bw.Owned()) == procPartitions })
	w.produce(600)
	testwait.For(t, 60*time.Second, "b to freeze before its third batch", func() bool { return len(bw.Freezes()) > 0 && bw.Stopped() })
	fz := bw.Freezes()[0]
	holders := w.holders()
	for p := range int32(procPartitions) {
		if h := holders[p]; h.Member != bw.Member() {
			t.Fatalf("partition %d is held by %v, want b (%s): the fleet did not stop with b holding every partition", p, h, bw.Member())
		}
	}
	t.Logf("the fleet stopped: b frozen before its batch of partition %d at epoch %d (offsets %d-%d); stored holders %v",
		fz.Partition, fz.Epoch, fz.First, fz.Last, holders)

	// The frozen holder does not keep the group alive: its session ends
	// and the group is empty, with committed offsets.
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(w.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	testwait.For(t, 60*time.Second, "the group to be empty (b's session over)", func() bool {
		st, ok := w.groupState(adm)
		return ok && strings.EqualFold(st, "Empty")
	})
	if !bw.Stopped() {
		t.Fatal("b resumed before the group was empty: the freeze did not outlast its session")
	}
	if n := w.committedOffsets(adm); n == 0 {
		t.Fatal("the empty group has no committed offset: nothing for the broker to expire")
	}
	emptyAt := time.Now()
	if onKafka {
		// The broker deletes the group once its offsets are past
		// retention: about a minute from now.
		testwait.For(t, 4*time.Minute, "Apache Kafka to expire the group (offsets.retention.minutes=1)", func() bool {
			_, ok := w.groupState(adm)
			return !ok
		})
	} else {
		if _, err := adm.DeleteGroup(t.Context(), w.group); err != nil {
			t.Fatalf("deleting the empty group on the embedded broker: %v", err)
		}
	}
	if n := w.committedOffsets(adm); n != 0 {
		t.Fatalf("the group is gone but %d committed offsets of it remain", n)
	}
	t.Logf("the group is gone %s after it was empty (expired by the broker: %v)", time.Since(emptyAt).Round(time.Second), onKafka)
	if !bw.Stopped() {
		t.Fatal("b resumed before the group expired")
	}

	// The fleet comes back: a worker of the new incarnation, whose
	// epochs start again below every stored holder's, takes each
	// partition over with its proof, audited in the fence history.
	c := w.start("c")
	testwait.For(t, 90*time.Second, "c to claim every partition", func() bool { return len(c.Owned()) == procPartitions })
	for p, h := range holders {
		hs, err := w.b.store.History(t.Context(), cluster.Scope(w.group, w.topic, p))
		if err != nil {
			t.Fatal(err)
		}
		if !tookOver(hs, h, c.Member()) {
			t.Fatalf("partition %d: no proven takeover by c below the stored holder %v in the fence history:\n%v", p, h, hs)
		}
	}
	t.Logf("c took every partition over with a proof: it holds %s", cluster.Describe(c.Owned()))
	w.produce(400)
	testwait.For(t, 60*time.Second, "c to apply new commands", func() bool {
		for p, cl := range c.Owned() {
			if w.postingsOf(p, cl.Epoch, cl.Member, 0) > 0 {
				return true
			}
		}
		return false
	})

	// The old holder resumes, after the expiry and the takeover: its
	// batch of the earlier incarnation is refused.
	if !bw.Stopped() {
		t.Fatal("b resumed before the takeover")
	}
	bw.Signal(syscall.SIGCONT)
	testwait.For(t, 60*time.Second, "b's late batch to be decided", func() bool {
		if bw.FencedCount() > 0 {
			return true
		}
		for _, r := range bw.Applied() {
			if r.Partition == fz.Partition && r.Epoch == fz.Epoch && r.FirstOffset == fz.First {
				return true
			}
		}
		return false
	})
	w.produce(200)
	w.waitAllApplied(120 * time.Second)
	w.check()
	if bw.FencedCount() < 1 {
		t.Fatal("no stale write of the resumed holder was refused")
	}
	if n := w.postingsOf(fz.Partition, fz.Epoch, fz.Member, fz.First); n > 0 {
		t.Fatalf("the resumed holder's batch landed: %d postings at epoch %d from offset %d", n, fz.Epoch, fz.First)
	}
	t.Logf("after SIGCONT %d of b's writes were refused; every command applied once by the new incarnation", bw.FencedCount())
}

// holders returns the sink's stored holder of each of w's partitions.
func (w *procWorld) holders() map[int32]epochs.Token {
	w.t.Helper()
	fs, err := w.b.store.Fences(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[int32]epochs.Token{}
	for _, f := range fs {
		if f.Scope.Group == w.group && f.Scope.Topic == w.topic {
			out[f.Scope.Partition] = f.Holder
		}
	}
	return out
}

// groupState returns the state of w's group as the broker lists it, and
// false if the broker lists no such group.
func (w *procWorld) groupState(adm *kadm.Client) (string, bool) {
	w.t.Helper()
	ls, err := adm.ListGroups(w.t.Context())
	if err != nil {
		w.t.Fatalf("listing the groups: %v", err)
	}
	g, ok := ls[w.group]
	return g.State, ok
}

// committedOffsets returns how many partitions of w's topic have an
// offset committed by w's group (0 for a group the broker does not
// know).
func (w *procWorld) committedOffsets(adm *kadm.Client) int {
	w.t.Helper()
	offs, err := adm.FetchOffsets(w.t.Context(), w.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return 0
	}
	if err != nil {
		w.t.Fatalf("fetching the group's offsets: %v", err)
	}
	n := 0
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == w.topic && o.Err == nil && o.At >= 0 {
			n++
		}
	})
	return n
}

// tookOver reports whether hs, a partition's fence history, has a proven
// takeover of holder by member: a reset of the audited takeover reason
// that cleared holder, followed by member's proven claim at an epoch
// below holder's.
func tookOver(hs []fenceadmin.Entry, holder epochs.Token, member string) bool {
	for i, e := range hs {
		if e.Kind != fenceadmin.KindReset || e.Reason != fenceadmin.TakeoverReason || e.Token != holder || i+1 == len(hs) {
			continue
		}
		next := hs[i+1]
		if next.Kind == fenceadmin.KindClaim && next.Proven && next.Token.Member == member && next.Token.Epoch < holder.Epoch {
			return true
		}
	}
	return false
}
