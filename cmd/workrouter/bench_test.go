package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestBenchCommand runs a tiny `workrouter bench` and checks the report's
// final line, and that W6 froze a real worker process.
func TestBenchCommand(t *testing.T) {
	p := startProc(t, []string{"bench", "--quick", "--records", "2000", "--only", "W1,B1,W4,B4,W6"})
	if code := p.wait(t); code != 0 {
		t.Fatalf("bench exited %d\nstdout:\n%s\nstderr:\n%s", code, p.stdout, p.stderr)
	}
	out := p.stdout.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	re := regexp.MustCompile(`^bench: router_vs_raw=[0-9]+\.[0-9]{2} fenced_vs_unfenced_pg=n/a fenced_vs_unfenced_sqlite=n/a produce_vs_raw=[0-9]+\.[0-9]{2} router_vs_sarama=n/a$`)
	if !re.MatchString(last) {
		t.Fatalf("final line %q does not match %v\n%s", last, re, out)
	}
	for _, want := range []string{"records/s", "CPU µs/rec", "target router_vs_raw=", "SIGSTOP of a worker process", "takeover="} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchCommandRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--only", "X9"},
		{"bench", "--records", "-5", "--only", "W1"},
		{"bench", "extra-arg"},
	} {
		p := startProc(t, args)
		if code := p.wait(t); code == 0 {
			t.Errorf("%v exited 0", args)
		}
		if errLine := strings.TrimSpace(p.stderr.String()); !strings.HasPrefix(errLine, "workrouter: ") {
			t.Errorf("%v: stderr %q", args, errLine)
		}
	}
}
