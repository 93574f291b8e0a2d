package main

import (
	"bytes"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/workrouter/workrouter/examples/internal/testenv"
	"github.com/workrouter/workrouter/router"
)

// envMain, set to 1, makes the test binary run main(): the tests run the
// program itself, as a process, flags, logs and signals included.
const envMain = "BILLING_WORKER_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// lockedBuffer collects a process's output for the test to read.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is the program running as a process.
type proc struct {
	cmd  *exec.Cmd
	logs *lockedBuffer // its stdout and stderr
	done chan struct{} // closed when it exited; then err is its Wait error
	err  error
}

// start runs the program with args; it is killed when the test ends if it
// still runs.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], args...), logs: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), envMain+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// periods reads the billing periods stored for tenant.
func periods(db *sql.DB, tenant string) ([]string, error) {
	rows, err := db.Query(`SELECT period FROM runs WHERE tenant = ? ORDER BY period`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// TestBillingWorker runs the README's worker program end to end: commands
// are produced to topic "billing", the program creates its table, applies
// them (a repeated request is a no-op, not a stall), stores the tenant as
// text so that WHERE tenant='tenant-42' finds its rows, logs its claims on
// stderr, and leaves cleanly on SIGTERM.
func TestBillingWorker(t *testing.T) {
	brokers := testenv.Cluster(t, "billing", 3)
	run := func(tenant, period string) router.Command {
		return router.Command{Key: []byte(tenant), Type: "run-billing", Payload: []byte(period)}
	}
	testenv.Produce(t, brokers, "billing", []router.Command{
		run("tenant-42", "2026-11"), run("tenant-7", "2026-11"), run("tenant-42", "2026-12"), run("tenant-42", "2026-11"),
	})
	path := filepath.Join(t.TempDir(), "billing.db")
	p := start(t, "-brokers", strings.Join(brokers, ","), "-db", path)

	testenv.WaitFor(t, time.Minute, "the worker to create its database", func() (bool, error) {
		_, err := os.Stat(path)
		return err == nil, nil
	})
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The tenants' keys may hash to different partitions, applied in any
	// order: wait for each tenant's runs, not for one and then read the other.
	for tenant, want := range map[string][]string{"tenant-42": {"2026-11", "2026-12"}, "tenant-7": {"2026-11"}} {
		testenv.WaitFor(t, time.Minute, tenant+"'s runs", func() (bool, error) {
			got, err := periods(db, tenant)
			// Not created yet, or still busy with the worker's writes
			// after the busy timeout: look again.
			if err != nil && (strings.Contains(err.Error(), "no such table") || strings.Contains(err.Error(), "SQLITE_BUSY")) {
				return false, nil
			}
			return slices.Equal(got, want), err
		})
	}
	var kind string
	if err := db.QueryRow(`SELECT DISTINCT typeof(tenant) FROM runs`).Scan(&kind); err != nil || kind != "text" {
		t.Fatalf("the tenant column holds %q (%v), want text", kind, err)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("the worker exited with %v after SIGTERM; its log:\n%s", p.err, p.logs)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the worker did not exit after SIGTERM; its log:\n%s", p.logs)
	}
	out := p.logs.String()
	for _, want := range []string{`level=INFO msg="partition claimed"`, "topic=billing", `msg="partition revoked"`, `msg="worker stopped"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the worker's log lacks %s:\n%s", want, out)
		}
	}
}

// TestBillingWorkerSaysTheTopicIsMissing: started before its topic exists,
// the program says so on stderr, naming the brokers it asked.
func TestBillingWorkerSaysTheTopicIsMissing(t *testing.T) {
	brokers := testenv.Cluster(t, "another-topic", 1)
	p := start(t, "-brokers", strings.Join(brokers, ","), "-db", filepath.Join(t.TempDir(), "billing.db"))
	testenv.WaitFor(t, time.Minute, "a warning about the missing topic", func() (bool, error) {
		return strings.Contains(p.logs.String(), "topic does not exist"), nil
	})
	out := p.logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "topic=billing") || !strings.Contains(out, "brokers="+brokers[0]) {
		t.Fatalf("the warning does not name the level, topic and brokers:\n%s", out)
	}
}
