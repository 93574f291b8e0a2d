package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
)

// The deduplication tests (docs/design.md#command-ids): a command that
// enters the log twice — a Send retried after an ambiguous error, a
// producer without idempotence that writes it twice, a dead letter
// redriven to a topic other groups read — is applied once per group. Each
// runs real worker processes against the embedded broker and checks X per
// command ID with the shared checker (cluster.Store.Check).

// copiesOf returns the positions of the records of topic that repeat an
// earlier record's command ID, by command ID (cluster.LogScan.Copies).
func copiesOf(t *testing.T, addr, topic string) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	scan, err := cluster.ScanLog(ctx, []string{addr}, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, pos := range slices.Sorted(maps.Keys(scan.Copies)) {
		id := scan.Copies[pos]
		out[id] = append(out[id], pos)
	}
	return out
}

// postingsOfID counts the sink's postings of the ledger command id.
func (w *procWorld) postingsOfID(id string) int {
	w.t.Helper()
	n, err := w.b.store.Count(context.Background(), `SELECT count(*) FROM ledger_postings WHERE id = $1`, id)
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// TestDedupRetriedSendAfterAmbiguousError: the broker writes a command
// but answers its produce requests with NOT_ENOUGH_REPLICAS_AFTER_APPEND
// (a kfake fault: the error is returned and the write still happens); the
// client keeps retrying (it cannot know whether the record landed) until
// the send's context is done, and Send fails although the command landed:
// an ambiguous error. The application retries with cmd.ID = Result.ID, as
// the router's documentation says; the log then holds the command twice,
// and the worker applies it once and reports the other copy as a skipped
// duplicate.
func TestDedupRetriedSendAfterAmbiguousError(t *testing.T) {
	w := newProcWorld(t, procSQLite(t))
	a := w.start("a")
	testwait.For(t, 30*time.Second, "a to claim every partition", func() bool { return len(a.Owned()) == procPartitions })
	w.produce(100)

	// The application's router may give up a send whose outcome is
	// unknown when its context is done (by default the idempotent client
	// retries it for good).
	rt, err := router.New(t.Context(), router.Config{Brokers: []string{w.brk.Addr()}, Topic: w.topic,
		ClientOpts: []kgo.Opt{kgo.AllowIdempotentProduceCancellation()}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	cmd := ledger.Deposit("retry-acct", "retry-cmd", 0, 700) // no command ID: the router generates one
	fault := w.brk.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: w.topic,
		Err: kerr.NotEnoughReplicasAfterAppend, Count: -1})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	res, err := rt.Send(ctx, cmd)
	cancel()
	fault.Remove()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || res.ID == "" || fault.Hits() == 0 {
		t.Fatalf("the faulted send: %+v, %v (fault answered %d requests); want the context's deadline with the command's ID",
			res, err, fault.Hits())
	}
	t.Logf("the send failed ambiguously: %v (command ID %s, %d produce requests faulted)", err, res.ID, fault.Hits())

	// The retry, as the router's documentation says: the same command
	// with the ID the failed send returned.
	cmd.ID = res.ID
	again, err := rt.Send(t.Context(), cmd)
	if err != nil || again.ID != res.ID {
		t.Fatalf("the retried send: %+v, %v", again, err)
	}
	w.produce(100)
	// The fault happened: the first attempt landed, so the log holds the
	// command at least twice.
	if copies := copiesOf(t, w.brk.Addr(), w.topic)[res.ID]; len(copies) == 0 || !slices.Contains(copies, cluster.PositionID(again.Partition, again.Offset)) {
		t.Fatalf("copies of %s in the log after the first: %v; want the retry at %d/%d (the failed send had landed)", res.ID, copies, again.Partition, again.Offset)
	}

	acked := w.prod.Acked()
	acked["retry-cmd"] = cluster.Acked{Account: "retry-acct", Partition: again.Partition, Offset: again.Offset}
	testwait.For(t, 60*time.Second, "every command applied", func() bool { return w.applied() >= len(acked) })
	w.checkAcked(acked) // X: retry-cmd posted once
	if n := w.postingsOfID("retry-cmd"); n != 1 {
		t.Fatalf("retry-cmd has %d postings, want 1", n)
	}
	if n := a.Count(consumer.KindDuplicate); n < 1 {
		t.Fatalf("the worker reported %d skipped duplicates, want the copy of %s", n, res.ID)
	}
}

// TestDedupNonIdempotentProducer: a foreign producer without idempotence
// (a plain kgo client, kgo.DisableIdempotentWrite) writes each of its
// envelope-encoded commands twice with the same command ID, as such a
// producer's retry across a broker failure does; between the router's
// commands, one posting per command ID, and every copy reported as a
// skipped duplicate.
func TestDedupNonIdempotentProducer(t *testing.T) {
	w := newProcWorld(t, procSQLite(t))
	a := w.start("a")
	testwait.For(t, 30*time.Second, "a to claim every partition", func() bool { return len(a.Owned()) == procPartitions })
	w.produce(100)

	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brk.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 40
	plain := map[string]cluster.Acked{}
	for i := range n {
		acct, id := fmt.Sprintf("plain-%d", i), fmt.Sprintf("plain-cmd-%d", i)
		cmd := ledger.Deposit(acct, id, 0, int64(100+i))
		cmd.ID = id
		p := envelope.Partition(cmd.Key, procPartitions)
		var first *kgo.Record
		for copy := range 2 {
			rec, err := envelope.Encode(w.topic, p, cmd)
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if copy == 0 {
				first = rec
			}
		}
		plain[id] = cluster.Acked{Account: acct, Partition: first.Partition, Offset: first.Offset}
	}
	w.produce(100)
	acked := w.prod.Acked()
	maps.Copy(acked, plain)
	if copies := copiesOf(t, w.brk.Addr(), w.topic); len(copies) != n {
		t.Fatalf("%d command IDs repeated in the log, want the producer's %d: %v", len(copies), n, copies)
	}
	testwait.For(t, 60*time.Second, "every command applied", func() bool { return w.applied() >= len(acked) })
	w.checkAcked(acked) // X: one posting per command ID
	if got := w.applied(); got != len(acked) {
		t.Fatalf("%d postings for %d commands", got, len(acked))
	}
	if got := a.Count(consumer.KindDuplicate); got != n {
		t.Fatalf("the worker reported %d skipped duplicates, want %d", got, n)
	}
}

// TestDedupRedriveThreeGroups: three consumer groups read one topic, each
// with a sink of its own. A deposit fails in group A's handler only (a
// trigger in A's database refuses its posting), so A dead-letters it while
// B and C apply it. A's defect is fixed and `dlq redrive` produces it
// again to the shared topic, with its command ID and A's group named
// (envelope.RedriveForHeader): A applies it once, B and C skip it (each
// reports one redrive skipped), and each group applies every command once
// (X per command ID, and the other invariants, in each group's sink).
func TestDedupRedriveThreeGroups(t *testing.T) {
	for _, be := range []struct {
		name string
		open func(*testing.T) *procBackend
	}{{"sqlite", procSQLite}, {"postgres", procPostgres}} {
		t.Run(be.name, func(t *testing.T) {
			wa := newProcWorld(t, be.open(t))
			wa.group = "group-a"
			wb := &procWorld{t: t, b: be.open(t), brk: wa.brk, addrs: wa.addrs, topic: wa.topic, group: "group-b", prod: wa.prod}
			wc := &procWorld{t: t, b: be.open(t), brk: wa.brk, addrs: wa.addrs, topic: wa.topic, group: "group-c", prod: wa.prod}
			fix := freeze(t, wa.b, "frozen-1")
			a := wa.start("a", "--max-attempts=2")
			b := wb.start("b")
			c := wc.start("c")
			for _, wk := range []*cluster.Worker{a, b, c} {
				testwait.For(t, 30*time.Second, wk.Name()+" to claim every partition", func() bool { return len(wk.Owned()) == procPartitions })
			}
			wa.produce(100)
			rt, err := router.New(t.Context(), router.Config{Brokers: []string{wa.brk.Addr()}, Topic: wa.topic})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			frozen := ledger.Deposit("frozen-1", "frozen-cmd", 0, 500)
			frozen.ID = "frozen-cmd"
			orig, err := rt.Send(t.Context(), frozen)
			if err != nil {
				t.Fatal(err)
			}
			wa.poison = append(wa.poison, cluster.PoisonRecord{Partition: orig.Partition, Offset: orig.Offset})
			wa.produce(100)
			testwait.For(t, 60*time.Second, "A to dead-letter the frozen deposit", func() bool { return a.Count(consumer.KindDeadLettered) >= 1 })
			for _, w := range []*procWorld{wb, wc} {
				testwait.For(t, 60*time.Second, w.group+" to apply the frozen deposit", func() bool { return w.postingsOfID("frozen-cmd") == 1 })
			}
			rows := dlqRows(t, wa.b.store.Spec())
			if len(rows) != 1 || rows[0].Group != "group-a" || rows[0].Reason != consumer.ReasonHandlerError {
				t.Fatalf("A's dead letters: %+v, want the frozen deposit's, handler_error", rows)
			}

			fix()
			out, _, err := runCLI(t, nil, "dlq", "redrive", strconv.FormatInt(rows[0].ID, 10), "--sink", wa.b.store.Spec(),
				"--brokers", wa.brk.Addr(), "--reason", "the frozen trigger was a bad migration; dropped", "--yes")
			if err != nil {
				t.Fatalf("dlq redrive: %v", err)
			}
			m := regexp.MustCompile(`produced to ledger partition (\d+) offset (\d+)`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("dlq redrive printed %q", out)
			}
			part, _ := strconv.Atoi(m[1])
			off, _ := strconv.ParseInt(m[2], 10, 64)
			redrive := cluster.PositionID(int32(part), off)
			wa.produce(50)
			// The redrive is in the log with the original's command ID.
			if copies := copiesOf(t, wa.brk.Addr(), wa.topic)["frozen-cmd"]; !slices.Equal(copies, []string{redrive}) {
				t.Fatalf("copies of frozen-cmd in the log: %v, want the redrive at %s", copies, redrive)
			}
			testwait.For(t, 60*time.Second, "A to apply the redriven deposit", func() bool { return wa.postingsOfID("frozen-cmd") == 1 })

			acked := wa.prod.Acked()
			acked["frozen-cmd"] = cluster.Acked{Account: "frozen-1", Partition: orig.Partition, Offset: orig.Offset}
			for _, w := range []*procWorld{wa, wb, wc} {
				testwait.For(t, 60*time.Second, w.group+": every command applied", func() bool { return w.applied() >= len(acked) })
				w.checkAcked(acked) // every command once in each group: X per command ID, L, O, V, D
				if n := w.postingsOfID("frozen-cmd"); n != 1 {
					t.Fatalf("%s: frozen-cmd has %d postings, want 1", w.group, n)
				}
			}
			// B and C skipped the redrive as another group's (not as a
			// duplicate: that holds past the dedupe horizon too), and said
			// so. The events trail the commits a little.
			for _, wk := range []*cluster.Worker{b, c} {
				if err := cluster.WaitUntil(t.Context(), 10*time.Second, wk.Name()+" to report A's redrive skipped", func() bool {
					return wk.Count(consumer.KindRedriveSkipped) >= 1
				}); err != nil || wk.Count(consumer.KindRedriveSkipped) != 1 || wk.Count(consumer.KindDuplicate) != 0 {
					t.Errorf("worker %s reported %d redrives skipped and %d duplicates, want A's redrive skipped once and no duplicate",
						wk.Name(), wk.Count(consumer.KindRedriveSkipped), wk.Count(consumer.KindDuplicate))
				}
			}
			if n := a.Count(consumer.KindRedriveSkipped) + a.Count(consumer.KindDuplicate); n != 0 {
				t.Errorf("A skipped %d records, want none: its own redrive is applied", n)
			}
		})
	}
}
