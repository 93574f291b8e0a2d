package main

import (
	"strings"
	"testing"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// TestWorkerHasNoFaultHooks: the product worker carries no test machinery:
// its help shows no fault flag, it refuses the harness's flags, and the
// fault hooks are reachable only through the harness's internal entry
// point.
func TestWorkerHasNoFaultHooks(t *testing.T) {
	p := clitest.Start(t, []string{"worker", "--help"})
	if code := p.Wait(t); code != 0 {
		t.Fatalf("worker --help exited %d: %s", code, p.Stderr)
	}
	help := p.Stdout.String()
	for _, word := range []string{"chaos", "freeze", "hang", "gate", "panic-type", "SIGSTOP", "SIGUSR"} {
		if strings.Contains(strings.ToLower(help), strings.ToLower(word)) {
			t.Errorf("worker --help mentions %q:\n%s", word, help)
		}
	}
	for _, flag := range []string{"--chaos", "--freeze-before-batch=1", "--hang-before-commit=1", "--gate-batch=1", "--panic-type=boom"} {
		p := clitest.Start(t, []string{"worker", "--example", "ledger", flag})
		if code := p.Wait(t); code == 0 || !strings.Contains(p.Stderr.String(), "unknown flag") {
			t.Errorf("worker %s: exit %d, stderr %q; want an unknown-flag error", flag, code, p.Stderr)
		}
	}
	// The internal entry point: the harness's worker insists on an event
	// stream, since the harness follows its events, not its log.
	p = clitest.Start(t, []string{"--example", "ledger", "--chaos"}, cluster.EnvHarnessWorker+"=1")
	if code := p.Wait(t); code != 1 || !strings.Contains(p.Stderr.String(), "--events") {
		t.Errorf("harness worker without --events: exit %d, stderr %q", code, p.Stderr)
	}
}
