package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestWorkerRefusesABadDLQTopic: a dead-letter topic that is the command
// topic is refused with the other flags, before the sink is opened; one
// that does not exist is refused by the library (consumer.New) and reaches
// the user as a line naming --dlq-topic, not the library's field.
func TestWorkerRefusesABadDLQTopic(t *testing.T) {
	addr := startCLITestBroker(t, map[string]int32{"ledger": 1})
	dir := t.TempDir()
	db := filepath.Join(dir, "workrouter.db")
	stderr := oneLineFailure(t, []string{"worker", "--brokers", addr, "--sink", "sqlite:" + db, "--example", "ledger", "--dlq-topic", "ledger"},
		`--dlq-topic "ledger" is the topic of commands`)
	assertNoGoIdentifiers(t, stderr)
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("the refused worker created its sink %s (stat: %v)", db, err)
	}

	p := startProc(t, []string{"worker", "--brokers", addr, "--sink", "sqlite:" + db, "--example", "ledger", "--dlq-topic", "ledger.dlq"})
	if code := p.wait(t); code == 0 {
		t.Fatalf("worker with a missing --dlq-topic exited 0:\n%s", p.stderr)
	}
	lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	last := lines[len(lines)-1]
	for _, want := range []string{`workrouter: --dlq-topic: topic "ledger.dlq" does not exist on ` + addr, "workrouter broker --topic ledger,ledger.dlq"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q does not contain %q", last, want)
		}
	}
	assertNoGoIdentifiers(t, last)
}

// goIdentifiers are the names of the library's fields and options that a
// message shown by the CLI must not use: the user sets flags.
var goIdentifiers = regexp.MustCompile(`\b(Config\.\w+|Command\.\w+|kgo\.\w+|DeadLetterTopic|ClientOpts|KeyConcurrency)\b`)

// assertNoGoIdentifiers fails t if msg names a Go identifier of the
// library.
func assertNoGoIdentifiers(t *testing.T, msg string) {
	t.Helper()
	if m := goIdentifiers.FindString(msg); m != "" {
		t.Errorf("message names the Go identifier %s: %q", m, msg)
	}
}
