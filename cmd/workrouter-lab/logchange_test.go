package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/cli"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
)

// The log changed under the sink (docs/design.md#log-identity), at process
// level on SQLite and PostgreSQL, with the operator's CLI: each case ends
// with every acknowledged command applied exactly once, or with a loud
// refusal the operator resolves — never a silent skip.

// newRouter points w's producer at the topic as it is now (a router keeps
// refusing a topic whose ID changed).
func (w *procWorld) newRouter() {
	w.t.Helper()
	rt, err := router.New(w.t.Context(), router.Config{Brokers: []string{w.brk.Addr()}, Topic: w.topic})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { rt.Close() })
	w.prod.Use(rt)
}

// admin returns a fresh admin client (no cached metadata).
func (w *procWorld) admin() *kadm.Client {
	w.t.Helper()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(w.brk.Addr()))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(adm.Close)
	return adm
}

// postings counts the sink's postings, of every log.
func (w *procWorld) postings() int { return w.applied() }

var expectRE = regexp.MustCompile(`--yes --expect (\S+)`)

// operatorReset runs `fences reset` as an operator would: the dry run,
// whose output must contain every want, then the same command with --yes
// and the dry run's expect tokens. It returns both outputs.
func (w *procWorld) operatorReset(checkpoint []string, want ...string) (dry, done string) {
	t := w.t
	t.Helper()
	args := append([]string{"fences", "reset", "--sink", w.b.store.Spec(), "--brokers", w.brk.Addr(),
		"--group", w.group, "--topic", w.topic, "--all", "--reason", "the log changed (test)"}, checkpoint...)
	dry, _, err := runCLI(t, nil, args...)
	if err == nil || !strings.Contains(err.Error(), "without --yes (nothing changed)") {
		t.Fatalf("dry run: %v\n%s", err, dry)
	}
	for _, s := range want {
		if !strings.Contains(dry, s) {
			t.Fatalf("the dry run does not say %q:\n%s", s, dry)
		}
	}
	m := expectRE.FindStringSubmatch(dry)
	if m == nil {
		t.Fatalf("the dry run prints no expect tokens:\n%s", dry)
	}
	done, _, err = runCLI(t, nil, append(args, "--yes", "--expect", m[1])...)
	if err != nil {
		t.Fatalf("reset: %v\n%s", err, done)
	}
	return dry, done
}

// statusText runs `status --sink` and returns its output; it fails the
// test unless status exits 2 (a partition needs attention: the tests call
// it while the log changed under the workers).
func (w *procWorld) statusText() string {
	w.t.Helper()
	out, _, err := runCLI(w.t, nil, "status", "--brokers", w.brk.Addr(), "--group", w.group, "--topic", w.topic, "--sink", w.b.store.Spec())
	if err == nil || cli.ExitCode(err) != cli.ExitNeedsAttention {
		w.t.Fatalf("status: %v (want exit status %d: partitions need attention)\n%s", err, cli.ExitNeedsAttention, out)
	}
	return out
}

// TestTopicRecreatedUnderWorkers: the topic is deleted and created again
// while workers run. They stop its partitions and refuse the new log
// (log_changed) — nothing of it is applied, nothing is skipped — and status
// says why; the operator's `fences reset --restart-at earliest` (its dry
// run refuses --keep-checkpoint's premise by naming the recreation) lets the
// same workers resume by themselves, and every acknowledged command, on
// both logs, is applied exactly once.
func TestTopicRecreatedUnderWorkers(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorld(t, b)
		w1, w2 := w.start("w1"), w.start("w2")
		w.produce(200)
		w.waitAllApplied(60 * time.Second)
		// Each worker must hold partitions of the old log before it goes:
		// a worker that holds none when the topic is recreated has no
		// partitions of it to stop (TopicRecreated is not its event), and
		// w1 alone may apply the 200 commands before w2 has joined.
		testwait.For(t, 60*time.Second, "both workers to hold partitions of the old log", func() bool {
			return w1.Count("claimed") > 0 && w2.Count("claimed") > 0
		})
		before := w.postings()

		adm := w.admin()
		if _, err := adm.DeleteTopics(t.Context(), w.topic); err != nil {
			t.Fatal(err)
		}
		if _, err := adm.CreateTopic(t.Context(), procPartitions, 1, nil, w.topic); err != nil {
			t.Fatal(err)
		}
		w.newRouter()
		w.produce(100)
		counts := func() string {
			return fmt.Sprintf("log_changed w1=%d w2=%d, topic_recreated w1=%d w2=%d", w1.Count("log_changed"), w2.Count("log_changed"),
				w1.Count("topic_recreated"), w2.Count("topic_recreated"))
		}
		testwait.For(saying{t, counts}, 60*time.Second, "the workers to refuse the new log", func() bool {
			return w1.Count("log_changed")+w2.Count("log_changed") >= procPartitions &&
				w1.Count("topic_recreated") > 0 && w2.Count("topic_recreated") > 0 // each worker's client moved to the new topic
		})
		if n := w.postings(); n != before {
			t.Fatalf("%d postings applied from the new log before the operator decided", n-before)
		}
		if st := w.statusText(); !strings.Contains(st, "topic recreated") || !strings.Contains(st, "other: ") {
			t.Fatalf("status does not say the topic was recreated:\n%s", st)
		}

		// The workers rejoin when they see the new topic ID: wait until
		// the group has settled, so that the reset can say who resumes.
		testwait.For(t, 60*time.Second, "every partition assigned again", func() bool {
			rep, err := statusJSON(t, "--brokers", w.brk.Addr(), "--group", w.group, "--topic", w.topic, "--check-keys", "0")
			if err != nil || len(rep.Partitions) != procPartitions {
				return false
			}
			for _, p := range rep.Partitions {
				if p.Owner == "" {
					return false
				}
			}
			return true
		})
		_, done := w.operatorReset([]string{"--restart-at", "earliest"}, "problem:  topic recreated", "checkpoint")
		if strings.Count(done, "claims it again by itself") != procPartitions {
			t.Fatalf("the reset does not say the running workers resume:\n%s", done)
		}
		w.waitAllApplied(60 * time.Second)
		w.check()
	})
}

// TestRetentionLossRefused: records are deleted (DeleteRecords, as
// retention would) while no worker runs, some of them not yet applied. The
// next worker's claims are refused and say how many records were lost;
// status says so; nothing past the gap is applied until the operator
// accepts the loss with `--restart-at earliest`, and then every remaining
// acknowledged command is applied exactly once.
func TestRetentionLossRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorld(t, b)
		w1 := w.start("w1")
		w.produce(200)
		w.waitAllApplied(60 * time.Second)
		w1.Stop(15 * time.Second)
		w.produce(200)

		// Delete, on every partition, half of what no worker applied.
		adm := w.admin()
		ends, err := adm.ListEndOffsets(t.Context(), w.topic)
		if err != nil {
			t.Fatal(err)
		}
		cps := w.checkpoints()
		del := kadm.Offsets{}
		lost := map[int32][2]int64{}
		for p := int32(0); p < procPartitions; p++ {
			e, _ := ends.Lookup(w.topic, p)
			to := cps[p] + (e.Offset-cps[p])/2
			if to <= cps[p] {
				t.Fatalf("partition %d has nothing unapplied to delete (checkpoint %d, end %d)", p, cps[p], e.Offset)
			}
			del.Add(kadm.Offset{Topic: w.topic, Partition: p, At: to})
			lost[p] = [2]int64{cps[p], to}
		}
		if res, err := adm.DeleteRecords(t.Context(), del); err != nil || res.Error() != nil {
			t.Fatalf("delete records: %v %v", err, res.Error())
		}
		before := w.postings()

		w2 := w.start("w2")
		testwait.For(t, 60*time.Second, "the claims to be refused for the retention loss", func() bool {
			return w2.Count("log_changed") >= procPartitions
		})
		if n := w.postings(); n != before {
			t.Fatalf("%d postings applied past the gap before the operator decided", n-before)
		}
		st := w.statusText()
		for p, r := range lost {
			want := fmt.Sprintf("partition %d: retention loss: %d records were deleted before they were applied", p, r[1]-r[0])
			if !strings.Contains(st, want) {
				t.Fatalf("status does not say %q:\n%s", want, st)
			}
		}

		w.operatorReset([]string{"--restart-at", "earliest"}, "problem:  retention loss")
		// The deleted commands are the accepted loss; every other
		// acknowledged command must be applied exactly once.
		acked := w.prod.Acked()
		for id, a := range acked {
			if r := lost[a.Partition]; a.Offset >= r[0] && a.Offset < r[1] {
				delete(acked, id)
			}
		}
		testwait.For(t, 60*time.Second, "every command that was not deleted applied", func() bool { return w.applied() >= len(acked) })
		w.checkAcked(acked)
	})
}

// TestBrokerLostItsData: the broker is restarted on an empty data dir while
// workers run: the topic comes back with a new ID and the group's epochs
// start over. The workers' claims are refused (the epochs went backwards,
// or started over at the stored epoch) and nothing is applied from the new
// log; the dry run names the recreated topic, --keep-checkpoint (which
// would have left 20-odd acknowledged commands unapplied for ever) is
// refused, and after `--restart-at earliest` the running workers resume by
// themselves and apply every new command exactly once.
func TestBrokerLostItsData(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorld(t, b)
		w1, w2 := w.start("w1"), w.start("w2")
		w.produce(200)
		w.waitAllApplied(60 * time.Second)
		before := w.postings()

		addr := w.brk.Addr()
		w.brk.Close()
		brk, err := broker.Start(broker.Config{Listen: addr, Topics: map[string]int32{ledger.Topic: procPartitions},
			MinSessionTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatalf("restarting the broker on %s: %v", addr, err)
		}
		t.Cleanup(func() { brk.Close() })
		w.brk = brk
		w.newRouter()
		w.produce(100)
		testwait.For(t, 90*time.Second, "the workers' claims to be refused", func() bool {
			return w1.Count("blocked")+w2.Count("blocked") >= procPartitions
		})
		if n := w.postings(); n != before {
			t.Fatalf("%d postings applied from the new log before the operator decided", n-before)
		}

		args := []string{"fences", "reset", "--sink", w.b.store.Spec(), "--brokers", w.brk.Addr(), "--group", w.group, "--topic", w.topic,
			"--all", "--reason", "r", "--keep-checkpoint"}
		// The dry run refuses it, and does not say to run it again with
		// --yes (which would fail the same way).
		dry, _, err := runCLI(t, nil, args...)
		if !strings.Contains(dry, "keeping it would never resume") || expectRE.MatchString(dry) ||
			err == nil || !strings.Contains(err.Error(), "would be refused, so --yes would fail too") {
			t.Fatalf("the --keep-checkpoint dry run does not refuse it, or says to run it with --yes (%v):\n%s", err, dry)
		}

		w.operatorReset([]string{"--restart-at", "earliest"}, "problem:  topic recreated")
		w.waitAllApplied(90 * time.Second)
		w.check()
	})
}

// checkAcked waits for lag zero and verifies every invariant from the
// sink's own records with the shared checker, acked being the commands the
// broker acknowledged that must be applied.
func (w *procWorld) checkAcked(acked map[string]cluster.Acked) {
	t := w.t
	t.Helper()
	converged := cluster.WaitUntil(t.Context(), 60*time.Second, "Kafka lag to reach zero", func() bool {
		return cluster.LagZero(t.Context(), w.addrs, w.topic, w.group)
	})
	rep, err := w.b.store.Check(t.Context(), cluster.CheckConfig{Brokers: w.addrs, Group: w.group, Topic: w.topic,
		Partitions: procPartitions, Acked: acked, Poison: w.poison, NotConverged: converged != nil})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total() != 0 {
		t.Fatalf("invariants violated: %+v\n%s", rep.Violations, strings.Join(rep.Notes(20), "\n"))
	}
}

// saying is a testing.T whose Fatalf adds what state says (the counts a
// wait was waiting on), so that a wait that gives up says how far it got.
type saying struct {
	*testing.T
	state func() string
}

func (s saying) Fatalf(format string, args ...any) {
	s.T.Helper()
	s.T.Fatalf(format+" (%s)", append(args, s.state())...)
}
