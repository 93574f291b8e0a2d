package processtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// claimsOf returns partition -> the latest CLAIM line of p.
func claimsOf(p *proc) map[int32]string {
	out := map[int32]string{}
	for _, l := range p.snapshot() {
		if strings.HasPrefix(l, "CLAIM ") {
			var part int32
			for _, f := range strings.Fields(l) {
				if v, ok := strings.CutPrefix(f, "part="); ok {
					n := 0
					for _, c := range v {
						n = n*10 + int(c-'0')
					}
					part = int32(n)
				}
			}
			out[part] = l
		}
	}
	return out
}

// TestPausedWorkerRejected: a worker is frozen with SIGSTOP past its session
// timeout; the other worker claims its partitions and applies; after
// SIGCONT the frozen worker's write is rejected, and F, L, O, X, V hold.
func TestPausedWorkerRejected(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		w := newWorld(t, b)
		a := w.start("a", envHook+"="+hookStopBeforeApply+":3")
		waitFor(t, 30*time.Second, "a to claim every partition", func() bool { return len(claimsOf(a)) == partitions })
		bw := w.start("b")
		waitFor(t, 30*time.Second, "b to claim partitions", func() bool { return len(claimsOf(bw)) > 0 })
		w.produce(2000)

		hook := a.waitLine(t, "HOOK "+hookStopBeforeApply, 60*time.Second)
		waitFor(t, 10*time.Second, "a to be stopped", a.stopped)
		part := int32(fieldInt(t, hook, "part"))
		aEpoch := int32(fieldInt(t, hook, "epoch"))
		aMember := field(claimsOf(a)[part], "member")

		// The new owner claims a's partition at a higher epoch and applies
		// at least one batch there, while a is still frozen.
		waitFor(t, 60*time.Second, "b to take over partition and apply", func() bool {
			l, ok := claimsOf(bw)[part]
			if !ok || int32(fieldInt(t, l, "epoch")) <= aEpoch {
				return false
			}
			rows, _ := b.st.rows(context.Background())
			for _, r := range rows {
				if r.part == part && r.member != aMember && r.epoch > aEpoch {
					return true
				}
			}
			return false
		})
		if !a.stopped() {
			t.Fatal("a resumed before the takeover: the pause did not outlast the session")
		}
		a.cmd.Process.Signal(syscall.SIGCONT)
		// The resumed worker's batch is either rejected or (with a broken
		// fence) lands; the checker below tells which.
		waitFor(t, 60*time.Second, "a's late batch to be decided", func() bool {
			return a.count("FENCED op=apply") > 0 || a.count(fmt.Sprintf("APPLIED part=%d epoch=%d first=%s", part, aEpoch, field(hook, "first"))) > 0
		})

		w.produce(500)
		w.waitAllApplied(120 * time.Second)
		w.check()
		if n := a.count("FENCED"); n < 1 {
			t.Fatalf("no stale write of the paused worker was rejected")
		}
		for _, r := range mustRows(t, b) {
			if r.member == aMember && r.epoch == aEpoch && r.part == part && r.off >= fieldInt(t, hook, "first") {
				t.Fatalf("the paused worker's batch landed: %+v", r)
			}
		}
	})
}

func mustRows(t *testing.T, b *backend) []row {
	t.Helper()
	rows, err := b.st.rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestKilledBeforeSinkCommit: SIGKILL while the batch's transaction is open;
// the restarted worker applies every command exactly once.
func TestKilledBeforeSinkCommit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		w := newWorld(t, b)
		w.produce(1000)
		a := w.start("a", envHook+"="+hookHangBeforeCommit+":3")
		hook := a.waitLine(t, "HOOK "+hookHangBeforeCommit, 60*time.Second)
		a.kill(t)
		part, first, last := int32(fieldInt(t, hook, "part")), fieldInt(t, hook, "first"), fieldInt(t, hook, "last")
		for _, r := range mustRows(t, b) {
			if r.part == part && r.off >= first && r.off <= last {
				t.Fatalf("an effect of the killed, uncommitted batch is visible: %+v", r)
			}
		}
		if n := w.applied(); n >= w.total {
			t.Fatalf("everything was applied before the kill (%d): the kill did not interrupt work", n)
		}
		w.start("a2")
		w.waitAllApplied(120 * time.Second)
		w.check()
	})
}

// TestKilledAfterSinkCommit: SIGKILL after the sink committed a batch but
// before Kafka's offset commit; the restarted worker resumes from the sink's
// checkpoint, so nothing is applied twice.
func TestKilledAfterSinkCommit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		w := newWorld(t, b)
		w.produce(1000)
		a := w.start("a", envHook+"="+hookHangAfterCommit+":3")
		hook := a.waitLine(t, "HOOK "+hookHangAfterCommit, 60*time.Second)
		part, last := int32(fieldInt(t, hook, "part")), fieldInt(t, hook, "last")
		// The window is real: the sink has the batch, Kafka does not.
		if next := w.nextOffsets()[part]; next != last+1 {
			t.Fatalf("sink checkpoint of partition %d is %d, want %d", part, next, last+1)
		}
		if c := w.committed()[part]; c > last {
			t.Fatalf("Kafka already has offset %d committed for partition %d: no window", c, part)
		}
		a.kill(t)
		w.start("a2")
		w.waitAllApplied(120 * time.Second)
		w.check()
	})
}

// TestConnectionTerminatedMidTransaction: the worker's PostgreSQL session is
// terminated inside a batch; the worker retries and the effect lands
// exactly once.
func TestConnectionTerminatedMidTransaction(t *testing.T) {
	b := newPostgres(t)
	w := newWorld(t, b)
	w.produce(600)
	gate := filepath.Join(t.TempDir(), "gate")
	a := w.start("a", envHook+"="+hookGate+":3", envGate+"="+gate)
	hook := a.waitLine(t, "HOOK "+hookGate, 60*time.Second)
	pid := fieldInt(t, hook, "pid")
	if pid == 0 {
		t.Fatalf("no backend pid in %q", hook)
	}
	var terminated bool
	if err := b.pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, pid).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, terminated, err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a.waitLine(t, "APPLY-ERROR", 30*time.Second) // the fault happened and was seen
	w.waitAllApplied(120 * time.Second)
	w.check()
	_ = pgx.ErrNoRows
}

// TestSinkUnreachable: the sink is unreachable for a while; the worker
// backs off, skips nothing, commits no Kafka offset past unapplied records,
// and resumes when the sink returns.
func TestSinkUnreachable(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		w := newWorld(t, b)
		a := w.start("a", envBusy+"=100")
		waitFor(t, 30*time.Second, "a to claim every partition", func() bool { return len(claimsOf(a)) == partitions })
		w.produce(400)
		w.waitAllApplied(60 * time.Second)
		errsBefore := a.count("APPLY-ERROR")

		release := b.unreachable(t)
		w.produce(400)
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			committed := w.committed()
			next := w.nextOffsetsDirect(t)
			for p, c := range committed {
				if c > next[p] {
					release()
					t.Fatalf("partition %d: Kafka offset %d committed past the sink's checkpoint %d", p, c, next[p])
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if n := a.count("APPLY-ERROR"); n <= errsBefore {
			release()
			t.Fatalf("the worker never saw the sink down: the fault did not happen")
		}
		release()
		w.waitAllApplied(120 * time.Second)
		w.check()
	})
}

// nextOffsetsDirect reads the checkpoints from the test's own connection
// (for PostgreSQL, not through the proxy the workers use; for SQLite, the
// store waits for the exclusive lock to be released, so it reads from the
// committed WAL snapshot via the store's DB).
func (w *world) nextOffsetsDirect(t *testing.T) map[int32]int64 {
	return w.nextOffsets()
}
