package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/internal/testwait"
)

// rolloutWorkers is how many worker processes a rolling restart replaces,
// one by one, on procPartitions partitions.
const rolloutWorkers = 3

// rolloutStep is what one step of a rolling restart measured, from the
// workers' event streams.
type rolloutStep struct {
	// held are the partitions the leaving worker held, with its claims.
	held map[int32]cluster.Claim
	// pause is from the SIGTERM until every held partition was claimed
	// again (by any worker).
	pause time.Duration
	// longest is the longest time any partition went unowned during the
	// step: from one worker letting it go until the next claimed it.
	longest time.Duration
	// epochs are the epochs the held partitions were first claimed at
	// after the SIGTERM.
	epochs map[int32]int32
}

// TestRollingRestart (deploying consumer groups): every worker of a group
// is replaced, one at a time, as a Deployment's rolling update does —
// SIGTERM, start the replacement, wait until every partition is owned
// again and the replacement owns its share, then the next — while
// commands stream in. The leaving worker revokes its partitions and
// leaves the group (nothing is lost: no partition is "lost", none is
// fenced), its partitions are all claimed again in the first rebalance
// after it left (one epoch, not one per partition), and the shared
// checker finds nothing lost or applied twice and every other invariant
// intact. Each step's pause is logged ("rollout step");
// docs/operating.md#deploying shows them.
func TestRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("rolling restarts of worker processes: skipped with -short")
	}
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorld(t, b)
		workers := make([]*cluster.Worker, rolloutWorkers)
		for i := range workers {
			workers[i] = w.start(fmt.Sprintf("w%d", i))
		}
		waitBalanced(t, workers)

		// Commands stream in all along: 10 every 50 ms.
		ctx, stopStream := context.WithCancel(context.Background())
		streamed := make(chan error, 1)
		go func() {
			var err error
			for ctx.Err() == nil && err == nil {
				if err = w.prod.Send(context.Background(), 10); err == nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
			streamed <- err
		}()
		defer stopStream()
		testwait.For(t, clitest.Deadline, "the first 100 commands applied", func() bool { return w.applied() >= 100 })

		var steps []rolloutStep
		for i := range workers {
			old := workers[i]
			held := old.Owned()
			if len(held) == 0 {
				t.Fatalf("step %d: %s owns no partition before it is replaced; the step would show nothing", i, old.Name())
			}
			from := time.Now()
			if err := old.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			workers[i] = w.start(fmt.Sprintf("w%d-next", i))
			select {
			case <-old.Done():
			case <-time.After(clitest.Deadline):
				t.Fatalf("step %d: %s did not exit after SIGTERM", i, old.Name())
			}
			if code := old.ExitCode(); code != 0 {
				t.Fatalf("step %d: %s exited %d after SIGTERM, want 0 (a clean leave)", i, old.Name(), code)
			}
			if n := old.Count(consumer.KindLost); n != 0 || len(old.Owned()) != 0 {
				t.Fatalf("step %d: %s lost %d partitions and still held %v: not a clean revoke", i, old.Name(), n, old.Owned())
			}
			waitBalanced(t, workers)
			all := append(slices.Clone(workers), old)
			st := measureStep(t, all, held, from)
			steps = append(steps, st)
			t.Logf("rollout step %d (%s, %s): SIGTERM -> its %d partitions claimed again in %v (epochs %s); longest any partition went unowned: %v",
				i, b.name, old.Name(), len(held), st.pause.Round(time.Millisecond), describeEpochs(held, st.epochs), st.longest.Round(time.Millisecond))

			// Usually one rebalance: every partition the leaving worker
			// held first claimed again at one epoch. When the replacement's
			// join lands after the leave's rebalance has completed (a loaded
			// machine, -race), there are two, which is a correct rollout
			// too: what must hold is above (a clean revoke, every
			// partition owned again) and below (no fenced write, every
			// command applied once, in order); the count is only logged.
			first := slices.Sorted(maps.Values(st.epochs))
			if first[0] != first[len(first)-1] {
				t.Logf("step %d: %s's partitions were claimed again at epochs %s: more than one rebalance (the replacement joined after the leave's rebalance)", i, old.Name(), describeEpochs(held, st.epochs))
			}
		}
		stopStream()
		if err := <-streamed; err != nil {
			t.Fatalf("producing during the rollout: %v", err)
		}
		for _, wk := range workers {
			if n := wk.FencedCount(); n != 0 {
				t.Errorf("%s reported %d fenced writes in a clean rollout: %v", wk.Name(), n, wk.FencedLines())
			}
		}
		w.waitAllApplied(90 * time.Second)
		w.check()
		t.Logf("rollout (%s): %d steps, %d commands produced and applied", b.name, len(steps), w.prod.AckedCount())
	})
}

// waitBalanced waits until every partition is owned by one of workers and
// every worker owns at least one (there are more partitions than
// workers): the group is ready, the newest worker included.
func waitBalanced(t *testing.T, workers []*cluster.Worker) {
	t.Helper()
	testwait.For(t, clitest.Deadline, "every partition owned and every worker owning its share", func() bool {
		for p := int32(0); p < procPartitions; p++ {
			if wk, _ := cluster.OwnerOf(workers, p); wk == nil {
				return false
			}
		}
		for _, wk := range workers {
			if len(wk.Owned()) == 0 {
				return false
			}
		}
		return true
	})
}

// measureStep reads, from the event streams of workers (the leaving one
// included), when each partition the leaving worker held was claimed again
// after from, at which epoch, and the longest time any partition went
// unowned from from on.
func measureStep(t *testing.T, workers []*cluster.Worker, held map[int32]cluster.Claim, from time.Time) rolloutStep {
	t.Helper()
	var all []cluster.Transition
	for _, wk := range workers {
		all = append(all, wk.Transitions()...)
	}
	slices.SortStableFunc(all, func(a, b cluster.Transition) int { return a.At.Compare(b.At) })
	st := rolloutStep{held: held, epochs: map[int32]int32{}}
	released := map[int32]time.Time{}
	for _, tr := range all {
		if tr.At.Before(from) {
			continue
		}
		if tr.Kind != consumer.KindClaimed {
			released[tr.Partition] = tr.At
			continue
		}
		if r, ok := released[tr.Partition]; ok {
			st.longest = max(st.longest, tr.At.Sub(r))
			delete(released, tr.Partition)
		}
		if c, ok := held[tr.Partition]; ok && tr.Epoch > c.Epoch {
			if _, seen := st.epochs[tr.Partition]; !seen {
				st.epochs[tr.Partition] = tr.Epoch
				st.pause = max(st.pause, tr.At.Sub(from))
			}
		}
	}
	if len(st.epochs) != len(held) {
		t.Fatalf("of the partitions %s held by the leaving worker, only %v were claimed again", cluster.Describe(held), st.epochs)
	}
	if len(released) > 0 {
		t.Fatalf("partitions let go and never claimed again: %v", released)
	}
	return st
}

// describeEpochs formats "p0 3->5, p2 3->5".
func describeEpochs(held map[int32]cluster.Claim, epochs map[int32]int32) string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(held)) {
		parts = append(parts, fmt.Sprintf("p%d %d->%d", p, held[p].Epoch, epochs[p]))
	}
	return strings.Join(parts, ", ")
}
