package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
)

// TestWorkerRefusesABadDLQTopic: a dead-letter topic that is the command
// topic is refused with the other flags, before the sink is opened; one
// that does not exist is refused by the library (consumer.New) and reaches
// the user as a line naming --dlq-topic, not the library's field.
func TestWorkerRefusesABadDLQTopic(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"ledger": 1})
	dir := t.TempDir()
	db := filepath.Join(dir, "workrouter.db")
	stderr := oneLineFailure(t, []string{"worker", "--brokers", addr, "--sink", "sqlite:" + db, "--example", "ledger", "--dlq-topic", "ledger"},
		`--dlq-topic "ledger" is the topic of commands`)
	assertNoGoIdentifiers(t, stderr)
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("the refused worker created its sink %s (stat: %v)", db, err)
	}

	p := clitest.Start(t, []string{"worker", "--brokers", addr, "--sink", "sqlite:" + db, "--example", "ledger", "--dlq-topic", "ledger.dlq"})
	if code := p.Wait(t); code == 0 {
		t.Fatalf("worker with a missing --dlq-topic exited 0:\n%s", p.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(p.Stderr.String()), "\n")
	last := lines[len(lines)-1]
	for _, want := range []string{`workrouter: --dlq-topic: topic "ledger.dlq" does not exist on ` + addr, "workrouter-lab broker --topic ledger,ledger.dlq"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q does not contain %q", last, want)
		}
	}
	assertNoGoIdentifiers(t, last)
}

// goIdentifiers are the names of the library's fields and options that a
// message shown by the CLI must not use: the user sets flags.
var goIdentifiers = regexp.MustCompile(`\b(Config\.\w+|Command\.\w+|kgo\.\w+|DeadLetterTopic|ClientOpts|KeyConcurrency|ProducerBatchMaxBytes)\b`)

// assertNoGoIdentifiers fails t if msg names a Go identifier of the
// library.
func assertNoGoIdentifiers(t *testing.T, msg string) {
	t.Helper()
	if m := goIdentifiers.FindString(msg); m != "" {
		t.Errorf("message names the Go identifier %s: %q", m, msg)
	}
}

// TestWorkerRefusesBadFlagsBeforeOpening: a worker flag the group client
// or the library would refuse is refused in one line naming the flag,
// before the sink is opened (no database file appears) or a broker is
// asked (the brokers given do not exist).
func TestWorkerRefusesBadFlagsBeforeOpening(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--session-timeout", "1ms"}, "--session-timeout must be between 100ms and"},
		{[]string{"--rebalance-timeout", "10ms"}, "--rebalance-timeout must be between 100ms and"},
		{[]string{"--heartbeat-interval", "20s"}, "--heartbeat-interval 20s must be shorter than --session-timeout 10s"},
		{[]string{"--max-batch", "-1"}, "--max-batch must not be negative (0: the sink's preference), got -1"},
		{[]string{"--key-concurrency", "1025"}, "--key-concurrency must be at most 1024, got 1025"},
		{[]string{"--metrics-addr", "nohostport"}, `--metrics-addr "nohostport"`},
		{[]string{"--dlq-compression", "brotli"}, `--dlq-compression "brotli": want none, gzip, snappy, lz4 or zstd`},
	} {
		dir := t.TempDir()
		db := filepath.Join(dir, "workrouter.db")
		args := append([]string{"worker", "--example", "ledger", "--brokers", "127.0.0.1:1", "--sink", "sqlite:" + db}, tc.args...)
		stderr := oneLineFailure(t, args, tc.want)
		assertNoGoIdentifiers(t, stderr)
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("worker %v created %s before refusing its flag", tc.args, entries[0].Name())
		}
	}
}

// TestDefaultClientIDDiffersPerProcess: the default client ID has a
// random part, so that processes sharing a host name and PID (containers
// on one host network, each PID 1) are told apart in the group.
func TestDefaultClientIDDiffersPerProcess(t *testing.T) {
	re := regexp.MustCompile(`^workrouter-.+-[0-9]+-[0-9a-f]{8}$`)
	a, b := defaultClientID(), defaultClientID()
	if !re.MatchString(a) || !re.MatchString(b) || a == b {
		t.Fatalf("default client IDs %q and %q: want two different workrouter-<host>-<pid>-<8 hex>", a, b)
	}
}

// TestCLIMessagesNameNoGoIdentifiers: errors the library words for its
// own callers (a command too large for a batch, an invalid command ID)
// reach the CLI's user without the library's Go identifiers (the
// embedded broker's, on every interface, in cmd/workrouter-lab:
// TestBrokerMessageNamesNoGoIdentifiers).
func TestCLIMessagesNameNoGoIdentifiers(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"t": 1})
	for _, args := range [][]string{
		{"produce", "--brokers", addr, "--topic", "t", "--key", "k", "--type", "x", "--payload", strings.Repeat("p", 1_100_000)},
		{"produce", "--brokers", addr, "--topic", "t", "--key", "k", "--type", "x", "--id", "a\tb"},
	} {
		_, stderr, err := runCLI(t, nil, args...)
		if err == nil {
			t.Fatalf("%s: no error", args[0])
		}
		assertNoGoIdentifiers(t, err.Error())
		assertNoGoIdentifiers(t, stderr)
		t.Logf("%s: %v", args[0], err)
	}
	big := `{"key":"k","type":"x","payload":"` + strings.Repeat("p", 1_100_000) + `"}` + "\n"
	_, stderr, err := runCLI(t, strings.NewReader(big), "produce", "--brokers", addr, "--topic", "t", "--file", "-")
	if err == nil {
		t.Fatal("produce --file of a command too large: no error")
	}
	assertNoGoIdentifiers(t, err.Error())
	assertNoGoIdentifiers(t, stderr)
	t.Logf("produce --file: %v", err)
}

// TestOneCommandIsSingular: produce says "1 command", not "1 commands".
func TestOneCommandIsSingular(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"t": 1})
	out, stderr, err := runCLI(t, strings.NewReader(`{"key":"k","type":"x","id":"one"}`+"\n"), "produce", "--brokers", addr, "--topic", "t", "--file", "-")
	if err != nil || !strings.HasPrefix(out, "produced 1 command in ") {
		t.Fatalf("produce of one line: %v, stdout %q, stderr %q; want \"produced 1 command in …\"", err, out, stderr)
	}
	if got := count(2, "fence") + ", " + count(1, "fence"); got != "2 fences, 1 fence" {
		t.Fatalf("count: %q", got)
	}
}
