package chaos

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// Restart is the outcome of one broker-restart fault.
type Restart struct {
	// Down is the time from the SIGKILL until the new broker process was
	// ready on the same address.
	Down time.Duration `json:"down_ns"`
	// Recovery is the time from the new process being ready until every
	// partition was claimed again at a newer epoch and every worker that
	// was running at the kill had claimed again (zero if that never
	// happened within the wait: Back < Workers).
	Recovery time.Duration `json:"recovery_ns"`
	// Workers is how many workers had to come back (those running at the
	// kill and still running at the end of the wait, at most one per
	// partition); Back how many did.
	Workers int `json:"workers"`
	Back    int `json:"back"`
	// Lost counts records the broker acknowledged before the kill that
	// the restarted broker did not have (its log ended before them).
	Lost int64 `json:"lost"`
}

// restartWait bounds the wait for the workers to come back after a broker
// restart.
const restartWait = 60 * time.Second

// brokerRestart kills the broker process with SIGKILL, starts it again on
// the same address and data dir, checks that every record acknowledged
// before the kill is still in its log, and waits until every partition is
// claimed again at a newer epoch, or is still held by the member that held
// it before the kill (its session outlived the restart), and every worker
// is back in the same sense. It
// happened when the process died of the SIGKILL and came back.
func (r *run) brokerRestart() (bool, error) {
	members := slices.DeleteFunc(r.members(), func(w *cluster.Worker) bool { return w.Exited() })
	pid := r.bp.Pid()
	start := time.Now()
	killed := r.bp.Kill()
	// No acknowledgement can arrive now: these are all of them.
	maxAcked := map[int32]int64{}
	for _, a := range r.prod.Acked() {
		maxAcked[a.Partition] = max(maxAcked[a.Partition], a.Offset+1)
	}
	if r.poisonProd != nil {
		// Records of aborted transactions are in the log too.
		for _, a := range slices.Concat(r.poisonProd.Acked(), r.poisonProd.Aborted()) {
			maxAcked[a.Partition] = max(maxAcked[a.Partition], a.Offset+1)
		}
		for _, a := range r.poisonProd.Commands() {
			maxAcked[a.Partition] = max(maxAcked[a.Partition], a.Offset+1)
		}
	}
	// Claims under way at the kill report within moments; after that no
	// claim can be accepted until the broker is back.
	if err := r.sleep(300 * time.Millisecond); err != nil {
		return false, err
	}
	r.mu.Lock()
	all := slices.Clone(r.all)
	r.mu.Unlock()
	var before int32
	// A member whose session outlives the restart keeps its partitions
	// with their tenures (a cooperative rebalance leaves their tokens as
	// they are): such a partition is back without a new claim.
	type holding struct {
		w *cluster.Worker
		c cluster.Claim
	}
	heldBefore := map[int32]holding{}
	for p := range r.cfg.Partitions {
		w, c := cluster.OwnerOf(all, p)
		before = max(before, c.Epoch)
		if w != nil {
			heldBefore[p] = holding{w, c}
		}
	}
	keeps := func(w *cluster.Worker, p int32, c cluster.Claim) bool {
		h, ok := heldBefore[p]
		return ok && h.w == w && h.c == c && !w.Exited()
	}
	if err := r.bp.Restart(r.ctx); err != nil {
		return false, fmt.Errorf("chaos: restarting the broker: %w", err)
	}
	ready := time.Now()
	rs := Restart{Down: ready.Sub(start)}
	r.logf("BROKER-RESTART: SIGKILL of the broker process %d (died of it: %v); process %d ready on the same address and data dir %s later",
		pid, killed, r.bp.Pid(), rs.Down.Round(time.Millisecond))

	ends, err := r.endOffsets()
	if err != nil {
		return false, err
	}
	for _, p := range slices.Sorted(maps.Keys(maxAcked)) {
		if end := ends[p]; end < maxAcked[p] {
			rs.Lost += maxAcked[p] - end
			r.logf("  LOST: partition %d ends at %d after the restart, but offset %d was acknowledged before the kill", p, end, maxAcked[p]-1)
		}
	}
	if rs.Lost == 0 {
		r.logf("  every record acknowledged before the kill is in the restarted broker's log (%d partitions)", len(maxAcked))
	}

	need := func() []*cluster.Worker {
		return slices.DeleteFunc(slices.Clone(members), func(w *cluster.Worker) bool { return w.Exited() })
	}
	backCount := func(ws []*cluster.Worker) int {
		n := 0
		for _, w := range ws {
			for p, c := range w.Owned() {
				if c.Epoch > before || keeps(w, p, c) {
					n++
					break
				}
			}
		}
		return n
	}
	recovered := r.waitUntil(restartWait, "every partition claimed again and every worker back after the broker restart", func() bool {
		r.mu.Lock()
		all := slices.Clone(r.all)
		r.mu.Unlock()
		for p := range r.cfg.Partitions {
			if w, c := cluster.OwnerOf(all, p); c.Epoch <= before && !keeps(w, p, c) {
				return false
			}
		}
		ws := need()
		return backCount(ws) >= min(len(ws), int(r.cfg.Partitions))
	}) == nil
	ws := need()
	rs.Workers, rs.Back = min(len(ws), int(r.cfg.Partitions)), min(backCount(ws), int(r.cfg.Partitions))
	if recovered {
		rs.Recovery = time.Since(ready)
		r.logf("  RECOVERED: every partition claimed again above epoch %d (or kept through the restart) and %d of %d workers back %s after the restart",
			before, rs.Back, rs.Workers, rs.Recovery.Round(time.Millisecond))
	} else {
		r.logf("  NOT RECOVERED within %s: %d of %d workers back", restartWait, rs.Back, rs.Workers)
		for _, w := range ws {
			r.logf("    %s holds %s", w.Name(), cluster.Describe(w.Owned()))
		}
	}
	r.mu.Lock()
	r.res.Restarts = append(r.res.Restarts, rs)
	r.mu.Unlock()
	return killed, r.ctx.Err()
}

// endOffsets lists the topic's end offsets, waiting for the broker to
// answer.
func (r *run) endOffsets() (map[int32]int64, error) {
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(r.brokers...))
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	out := map[int32]int64{}
	var lastErr error
	err = r.waitUntil(30*time.Second, "the restarted broker's end offsets", func() bool {
		ends, err := adm.ListEndOffsets(r.ctx, r.topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			lastErr = err
			return false
		}
		ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		return len(out) == int(r.cfg.Partitions)
	})
	if err != nil {
		return nil, fmt.Errorf("%w (last error: %v)", err, lastErr)
	}
	return out, nil
}
