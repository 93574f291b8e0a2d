package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/brokerproc"
	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/internal/testpg"
)

// chaosLine is the final line of a passing run: every kind fired
// (kinds=10), at least one stale write rejected, poison records
// dead-lettered (at least one right after an offset gap), duplicates
// skipped (the resend fault's copies at least), V sampled while the run
// went on, no violation.
var chaosLine = regexp.MustCompile(`^chaos: faults=([0-9]+) kinds=10 commands=[1-9][0-9]* stale_rejected=[1-9][0-9]* dead_letters=[1-9][0-9]* gap_dead_letters=[1-9][0-9]* duplicates_skipped=[1-9][0-9]* v_samples=[1-9][0-9]* violations=0$`)

// runChaos runs `workrouter-lab chaos` with args and returns its exit code and
// stdout, waiting up to limit.
func runChaos(t *testing.T, limit time.Duration, args ...string) (int, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs worker processes under faults for about a minute")
	}
	if raceEnabled {
		// Every worker process would be a race-instrumented binary: too
		// slow for the profile's timing. Run without -race (CI does both).
		t.Skip("the chaos profile runs in go test without -race")
	}
	p := clitest.Start(t, append([]string{"chaos"}, args...))
	select {
	case <-p.Done:
	case <-time.After(limit):
		p.Cmd.Process.Kill()
		<-p.Done
		t.Fatalf("chaos %v did not finish within %s\nstdout:\n%s\nstderr:\n%s", args, limit, p.Stdout, p.Stderr)
	}
	return p.Cmd.ProcessState.ExitCode(), p.Stdout.String()
}

// checkChaos asserts a passing run: exit 0, every kind in the table with
// at least one fault, and the final line.
func checkChaos(t *testing.T, code int, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if code != 0 || !chaosLine.MatchString(last) {
		t.Fatalf("exit %d, final line %q\n%s", code, last, out)
	}
	for _, k := range []string{"pause", "kill", "heartbeat", "broker-conn", "sink-conn", "coordinator", "poison", "broker-restart", "resend", "churn"} {
		if !regexp.MustCompile(`(?m)^` + k + ` +[1-9][0-9]*$`).MatchString(out) {
			t.Errorf("table lacks a fired %s row:\n%s", k, out)
		}
	}
	for _, want := range []string{"PAUSE ", "KILL ", "HEARTBEAT blackhole", "BROKER-CONN ", "SINK-CONN ", "COORDINATOR ", "POISON: ", "BROKER-RESTART: ", "RESEND: ", "CHURN "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, inv := range []string{"F", "L", "O", "X", "V", "D"} {
		if !regexp.MustCompile(`(?m)^violations ` + inv + ` \([^)]*\) +0$`).MatchString(out) {
			t.Errorf("table lacks a zero %s row:\n%s", inv, out)
		}
	}
	// Every broker restart lost nothing and saw every worker back; every
	// poison kind was acknowledged, and dead-lettered.
	if m := regexp.MustCompile(`(?m)^broker restarts: workers back +([0-9]+) of ([0-9]+)$`).FindStringSubmatch(out); m == nil || m[1] != m[2] || m[1] == "0" {
		t.Errorf("not every worker came back after the broker restarts:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^broker restarts: acknowledged records lost +0$`).MatchString(out) {
		t.Errorf("a broker restart lost acknowledged records:\n%s", out)
	}
	// V was sampled all along; poison records were written in committed
	// transactions and records in aborted ones.
	if !regexp.MustCompile(`(?m)^V samples: compared / skipped / readings failed +[1-9][0-9]* / `).MatchString(out) {
		t.Errorf("V was not sampled:\n%s", out)
	}
	for _, row := range []string{"poison records in committed transactions", "records of aborted transactions", "dead letters right after an offset gap",
		"acknowledged commands re-sent with their IDs", "records in the log repeating a command ID"} {
		if !regexp.MustCompile(`(?m)^` + row + ` +[1-9][0-9]*$`).MatchString(out) {
			t.Errorf("the table's %q row is not above zero:\n%s", row, out)
		}
	}
	if m := regexp.MustCompile(`(?m)^records in the log repeating a command ID +([0-9]+)\nduplicates skipped \(sink's count / workers' events\) +([0-9]+) / `).FindStringSubmatch(out); m == nil || m[1] != m[2] {
		t.Errorf("the duplicates skipped are not the copies in the log:\n%s", out)
	}
	for _, kind := range []string{"not-envelope", "null-key", "duplicate-type", "unknown-type", "malformed"} {
		if !regexp.MustCompile(`(?m)^poison records acknowledged .*\b` + kind + ` [1-9]`).MatchString(out) {
			t.Errorf("no %s poison record was acknowledged:\n%s", kind, out)
		}
	}
}

// TestChaosShortProfile is CI's short seeded profile on SQLite: every
// fault kind fires, a stale write is rejected, and no invariant is
// violated.
func TestChaosShortProfile(t *testing.T) {
	code, out := runChaos(t, 5*time.Minute, "--duration", "40s", "--seed", "1")
	checkChaos(t, code, out)
}

// TestChaosKIP848 runs the short profile with the KIP-848 group protocol.
func TestChaosKIP848(t *testing.T) {
	code, out := runChaos(t, 5*time.Minute, "--duration", "40s", "--seed", "2", "--protocol", "kip848")
	checkChaos(t, code, out)
}

// TestChaosPostgres runs the short profile on PostgreSQL, where sink-conn
// terminates the worker's backends.
func TestChaosPostgres(t *testing.T) {
	dsn := testpg.DSN(t)
	code, out := runChaos(t, 5*time.Minute, "--duration", "40s", "--seed", "3", "--sink", dsn)
	checkChaos(t, code, out)
	if !strings.Contains(out, "pg_terminate_backend on ") {
		t.Errorf("sink-conn did not terminate backends:\n%s", out)
	}
}

// TestHarnessBrokerEntry: the harness's broker is reachable only through
// its internal entry point, and refuses to start without its settings.
func TestHarnessBrokerEntry(t *testing.T) {
	p := clitest.Start(t, nil, brokerproc.EnvHarnessBroker+"=1")
	if code := p.Wait(t); code != 1 || !strings.Contains(p.Stderr.String(), "--data-dir, --control and --topic are required") {
		t.Errorf("harness broker without settings: exit %d, stderr %q", code, p.Stderr)
	}
	for _, args := range [][]string{{"--help"}, {"broker", "--help"}} {
		p := clitest.Start(t, args)
		if code := p.Wait(t); code != 0 {
			t.Fatalf("%v exited %d", args, code)
		}
		if out := strings.ToLower(p.Stdout.String()); strings.Contains(out, "harness broker") || strings.Contains(out, "internal_harness") || strings.Contains(out, "--control") {
			t.Errorf("%v mentions the harness broker:\n%s", args, out)
		}
	}
	// The harness worker's poison flags are checked.
	p = clitest.Start(t, []string{"--example", "ledger", "--events", os.DevNull, "--on-no-handler", "skip"}, cluster.EnvHarnessWorker+"=1")
	if code := p.Wait(t); code != 1 || !strings.Contains(p.Stderr.String(), "want dead-letter or stall") {
		t.Errorf("harness worker --on-no-handler skip: exit %d, stderr %q", code, p.Stderr)
	}
}

func TestChaosCommandRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"chaos", "--workers", "1"},
		{"chaos", "--faults", "pause,gc"},
		{"chaos", "--protocol", "eager"},
		{"chaos", "--sink", "bogus:x"},
		{"chaos", "--key-concurrency", "-1"},
		{"chaos", "--kafka-nodes", "2"},
		{"chaos", "--kafka-nodes", "3", "--faults", "heartbeat"},
		{"chaos", "--kafka-nodes", "3", "--brokers", "127.0.0.1:9092"},
		{"chaos", "--faults", "leader-kill"},
	} {
		p := clitest.Start(t, args)
		if code := p.Wait(t); code == 0 {
			t.Errorf("%v exited 0", args)
		}
		if errLine := strings.TrimSpace(p.Stderr.String()); !strings.HasPrefix(errLine, "workrouter-lab: ") || strings.Count(errLine, "\n") != 0 {
			t.Errorf("%v: want one 'workrouter-lab: …' line on stderr, got %q", args, errLine)
		}
	}
}

// TestChaosSetupErrorPrintsNoSummary: a run that stops before its check (a
// fault kind refused once the run knows its sink) prints no table and no
// final line, whose zeros would read "violations=0" for a run that never
// ran; its error says what happened.
func TestChaosSetupErrorPrintsNoSummary(t *testing.T) {
	p := clitest.Start(t, []string{"chaos", "--faults", "partition-sink", "--duration", "10s"})
	if code := p.Wait(t); code == 0 {
		t.Fatalf("chaos with partition-sink on SQLite exited 0:\n%s", p.Stdout)
	}
	if out := p.Stdout.String(); strings.Contains(out, "chaos: faults=") || strings.Contains(out, "fault                injected") {
		t.Fatalf("chaos printed a summary before its setup error:\n%s", out)
	}
	if errLine := p.Stderr.String(); !strings.Contains(errLine, "partition-sink and one-way need a sink reached over the network") {
		t.Fatalf("stderr %q, want the setup error", errLine)
	}
}
