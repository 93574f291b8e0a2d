package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// TestDemoCommand runs `workrouter-lab demo` as a new user would: worker
// processes, a SIGSTOPped worker, and the final line with every invariant
// holding and at least one stale write rejected.
func TestDemoCommand(t *testing.T) {
	p := clitest.Start(t, []string{"demo", "--commands", "1200", "--accounts", "100"})
	if code := p.Wait(t); code != 0 {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", code, p.Stdout, p.Stderr)
	}
	out := p.Stdout.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if !regexp.MustCompile(`^demo: produced=1200 applied=1200 duplicates=0 lost=0 order_violations=0 stale_rejected=[1-9][0-9]*$`).MatchString(last) {
		t.Fatalf("final line %q\n%s", last, out)
	}
	for _, want := range []string{"PAUSE w1: SIGSTOP", "taken over by", "RESUME w1 with SIGCONT", "REJECTED late write by w1", "lag is zero"} {
		if !strings.Contains(out, want) {
			t.Errorf("timeline lacks %q:\n%s", want, out)
		}
	}
}

// TestDemoSetupErrorPrintsNoSummary: a demo that fails while setting up
// (a sink it cannot open) ends with its error, without a summary line of
// zeros that would read as a run that applied nothing.
func TestDemoSetupErrorPrintsNoSummary(t *testing.T) {
	p := clitest.Start(t, []string{"demo", "--sink", "sqlite:" + filepath.Join(t.TempDir(), "no-such-dir", "x.db")})
	if code := p.Wait(t); code == 0 {
		t.Fatalf("demo on a sink it cannot open exited 0:\n%s", p.Stdout)
	}
	if out := p.Stdout.String(); strings.Contains(out, "demo: produced=") {
		t.Fatalf("demo printed a summary before its setup error:\n%s", out)
	}
	if errLine := p.Stderr.String(); !strings.HasPrefix(errLine, "workrouter-lab: ") || !strings.Contains(errLine, "no-such-dir") {
		t.Fatalf("stderr %q, want the setup error", errLine)
	}
}

func TestDemoCommandRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--workers", "1"},
		{"demo", "--sink", "bogus:x"},
		{"demo", "--commands", "5"},
		{"demo", "--key-concurrency", "-1"},
		{"demo", "--protocol", "eager"},
		{"demo", "--fault", "freeze"},
	} {
		p := clitest.Start(t, args)
		if code := p.Wait(t); code == 0 {
			t.Errorf("%v exited 0", args)
		}
		errLine := strings.TrimSpace(p.Stderr.String())
		if !strings.HasPrefix(errLine, "workrouter-lab: ") || strings.Count(errLine, "\n") != 0 {
			t.Errorf("%v: want one 'workrouter-lab: …' line on stderr, got %q", args, errLine)
		}
		if args[1] == "--fault" && !strings.Contains(errLine, "--fault") {
			t.Errorf("%v: %q does not name the flag", args, errLine)
		}
	}
}

// TestWorkerCommand runs the ledger example worker against the embedded
// broker and an SQLite sink, produces commands, checks they are applied
// exactly once, and stops it with SIGINT.
func TestWorkerCommand(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{ledger.Topic: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	path := filepath.Join(t.TempDir(), "ledger.db")
	w := clitest.Start(t, []string{"worker", "--example", "ledger", "--brokers", b.Addr(), "--sink", "sqlite:" + path, "--client-id", "w1", "--metrics-addr", "127.0.0.1:0", "--dedupe-window", "5000"})
	select {
	case line := <-w.Stdout.FirstLine():
		if !strings.Contains(line, "workrouter worker w1: example ledger, group ledger-workers, topic ledger") || !strings.Contains(line, ", key concurrency 1 ") {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(clitest.Deadline):
		t.Fatalf("worker did not start; stderr:\n%s", w.Stderr)
	}
	ctx := context.Background()
	rt, err := router.New(ctx, router.Config{Brokers: []string{b.Addr()}, Topic: ledger.Topic})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for i := 0; i < 60; i++ {
		acct := []string{"a", "b", "c", "d"}[i%4]
		if _, err := rt.Send(ctx, ledger.Deposit(acct, fmt.Sprintf("id-%d", i), i/4, 100)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var rep ledger.Report
	testwait.For(t, clitest.Deadline, "60 postings", func() bool {
		rep, err = ledger.VerifySQLite(ctx, s.DB())
		return err == nil && rep.Postings == 60
	})
	if rep.Duplicates != 0 || rep.OrderViolations != 0 || len(rep.Mismatches) != 0 {
		t.Fatalf("ledger report %+v", rep)
	}

	// The ops endpoints show live values.
	addr := opsAddr(t, w.Stderr)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testwait.For(t, clitest.Deadline, "the worker to report ready", func() bool { code, _ := get("/readyz"); return code == 200 })
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	_, metrics := get("/metrics")
	applied := regexp.MustCompile(`workrouter_consumer_records_applied_total\{[^}]*\} (\d+)`).FindAllStringSubmatch(metrics, -1)
	total := 0
	for _, a := range applied {
		n, _ := strconv.Atoi(a[1])
		total += n
	}
	if total != 60 {
		t.Fatalf("records_applied_total sums to %d, want 60:\n%s", total, metrics)
	}
	for _, want := range []string{"workrouter_consumer_tenure_epoch{", "workrouter_consumer_owned_partitions{", "go_goroutines",
		`workrouter_sink_operations_total{backend="sqlite",op="claim",outcome="ok"} 3`, `workrouter_sink_records_total{backend="sqlite",outcome="applied"} 60`,
		`workrouter_consumer_dedupe_window_offsets{group="ledger-workers",topic="ledger"} 5000`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	w.Cmd.Process.Signal(syscall.SIGINT)
	if code := w.Wait(t); code != 0 {
		t.Fatalf("worker exited %d after SIGINT; stderr:\n%s", code, w.Stderr)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM workrouter_fences").Scan(&n); err != nil && err != sql.ErrNoRows {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("%d fence rows, want one per partition (3)", n)
	}
}

func TestWorkerCommandRejectsBadInput(t *testing.T) {
	for args, want := range map[string]string{
		"worker --example nope":                                       "unknown example",
		"worker --example ledger --sink bogus:x":                      "sink",
		"worker --example ledger --protocol eager":                    "protocol",
		"worker --example ledger --dedupe-window -1":                  "--dedupe-window must not be negative",
		"worker --example ledger --key-concurrency 0":                 "--key-concurrency must be at least 1",
		"worker --example ledger --sink sqlite:/nonexistent-dir/x.db": "",
	} {
		p := clitest.Start(t, strings.Fields(args))
		if code := p.Wait(t); code == 0 {
			t.Errorf("%s exited 0", args)
		}
		errLine := strings.TrimSpace(p.Stderr.String())
		if !strings.HasPrefix(errLine, "workrouter-lab: ") || !strings.Contains(errLine, want) {
			t.Errorf("%s: stderr %q, want a 'workrouter-lab: …%s…' line", args, errLine, want)
		}
	}
}

// TestDemoCommandPostgres runs the same demo on PostgreSQL (skipped when no
// server is reachable, except under CI=true).
func TestDemoCommandPostgres(t *testing.T) {
	dsn := testpg.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	runDemoJSON(t, "--sink", dsn)
	var left int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'workrouter_demo_%'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("demo schemas left behind: %d (%v)", left, err)
	}
}

// demoSummary is the part of the demo's --json output the tests check.
type demoSummary struct {
	Produced, Applied, Duplicates, Lost int
	OrderViolations                     int            `json:"order_violations"`
	StaleRejected                       int            `json:"stale_rejected"`
	Invariants                          map[string]int `json:"invariants"`
	Timeline                            []string       `json:"timeline"`
}

// runDemoJSON runs `demo --commands 1000 --accounts 80 --json` with args
// as a process and fails the test unless it exits 0 with a clean summary:
// every command applied once, in order, every invariant holding, and at
// least one stale write refused. It returns the summary.
func runDemoJSON(t *testing.T, args ...string) demoSummary {
	t.Helper()
	p := clitest.Start(t, append([]string{"demo", "--commands", "1000", "--accounts", "80", "--json"}, args...))
	if code := p.Wait(t); code != 0 {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", code, p.Stdout, p.Stderr)
	}
	var sum demoSummary
	if err := json.Unmarshal([]byte(p.Stdout.String()), &sum); err != nil {
		t.Fatalf("--json output: %v\n%s", err, p.Stdout)
	}
	if sum.Produced != 1000 || sum.Applied != 1000 || sum.Duplicates+sum.Lost+sum.OrderViolations != 0 || sum.StaleRejected < 1 {
		t.Fatalf("summary %+v", sum)
	}
	for k, n := range sum.Invariants {
		if n != 0 {
			t.Errorf("invariant %s: %d violations", k, n)
		}
	}
	return sum
}

func TestVersionCommandRejectsArgs(t *testing.T) {
	p := clitest.Start(t, []string{"version", "extra"})
	if code := p.Wait(t); code == 0 {
		t.Fatal("version with an argument exited 0")
	}
	if !strings.HasPrefix(p.Stderr.String(), "workrouter-lab: ") {
		t.Fatalf("stderr %q", p.Stderr)
	}
}

func TestBrokerServesOpsEndpoints(t *testing.T) {
	p, _, _ := startBroker(t, []string{"--listen", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"})
	var addr string
	testwait.For(t, clitest.Deadline, "the ops address in the log", func() bool {
		m := regexp.MustCompile(`serving /metrics, /healthz and /readyz" addr=(\S+)`).FindStringSubmatch(p.Stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "go_goroutines"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %q", path, resp.StatusCode, b)
		}
	}
	p.Interrupt(t)
	if code := p.Wait(t); code != 0 {
		t.Fatalf("broker exited %d", code)
	}
	// A bad address is refused with one line.
	bad := clitest.Start(t, []string{"broker", "--listen", "127.0.0.1:0", "--metrics-addr", "nonsense"})
	if code := bad.Wait(t); code == 0 || !strings.Contains(bad.Stderr.String(), "--metrics-addr") {
		t.Fatalf("bad --metrics-addr: exit %d, stderr %q", code, bad.Stderr)
	}
}

// TestWorkerCommandKeyConcurrency runs the ledger example worker with
// --key-concurrency 4 on an SQLite sink: every deposit is applied exactly
// once and each account's in order, through the lanes (their gauges are
// on /metrics).
func TestWorkerCommandKeyConcurrency(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{ledger.Topic: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	path := filepath.Join(t.TempDir(), "ledger.db")
	w := clitest.Start(t, []string{"worker", "--example", "ledger", "--brokers", b.Addr(), "--sink", "sqlite:" + path, "--client-id", "w1",
		"--metrics-addr", "127.0.0.1:0", "--key-concurrency", "4", "--max-batch", "8"})
	select {
	case <-w.Stdout.FirstLine():
	case <-time.After(clitest.Deadline):
		t.Fatalf("worker did not start; stderr:\n%s", w.Stderr)
	}
	ctx := context.Background()
	rt, err := router.New(ctx, router.Config{Brokers: []string{b.Addr()}, Topic: ledger.Topic})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	accounts := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for i := range 120 {
		acct := accounts[i%len(accounts)]
		if _, err := rt.Send(ctx, ledger.Deposit(acct, fmt.Sprintf("id-%d", i), i/len(accounts), 100)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var rep ledger.Report
	testwait.For(t, clitest.Deadline, "120 postings", func() bool {
		rep, err = ledger.VerifySQLite(ctx, s.DB())
		return err == nil && rep.Postings == 120
	})
	if rep.Duplicates != 0 || rep.OrderViolations != 0 || len(rep.Mismatches) != 0 {
		t.Fatalf("ledger report %+v", rep)
	}
	addr := opsAddr(t, w.Stderr)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"workrouter_consumer_gapped_spans{", "workrouter_consumer_lanes_busy{"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	w.Cmd.Process.Signal(syscall.SIGINT)
	if code := w.Wait(t); code != 0 {
		t.Fatalf("worker exited %d after SIGINT; stderr:\n%s", code, w.Stderr)
	}
}
