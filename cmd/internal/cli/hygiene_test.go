package cli

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/examples/ledger"
)

// commitOffset makes group exist, with a commit of offset 0 on partition 0
// of topic.
func commitOffset(t *testing.T, cl *kgo.Client, group, topic string) {
	t.Helper()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 0, LeaderEpoch: -1})
	resp, err := kadm.NewClient(cl).CommitOffsets(context.Background(), group, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("commit for group %s: %v", group, err)
	}
}

// TestUnknownCommandsFail: an unknown subcommand, argument, flag or help
// topic exits non-zero with one line, suggesting what was probably meant
// (the lab's commands: cmd/workrouter-lab's TestLabUnknownCommandsFail).
func TestUnknownCommandsFail(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate" for "workrouter"`, "the commands are", "worker"}},
		{[]string{"statsu", "--topic", "x"}, []string{`unknown command "statsu"`, "did you mean status?"}},
		{[]string{"demo"}, []string{`unknown command "demo" for "workrouter"`, "demo is a command of workrouter-lab", "go run ./cmd/workrouter-lab demo"}},
		{[]string{"broker", "--topic", "x"}, []string{`unknown command "broker" for "workrouter"`, "broker is a command of workrouter-lab"}},
		{[]string{"fences", "lst"}, []string{`unknown command "lst" for "workrouter fences"`, "did you mean list?"}},
		{[]string{"help", "frobnicate"}, []string{`unknown command "frobnicate"`}},
		{[]string{"produce", "--topic", "t", "extra"}, []string{`unexpected argument "extra" for "workrouter produce"`}},
		{[]string{"produce", "count=5"}, []string{`unexpected argument "count=5"`, "did you mean --count?"}},
		{[]string{"produce", "--cuont", "5"}, []string{"unknown flag: --cuont", "did you mean --count?"}},
		{[]string{"status", "--grop", "g"}, []string{"unknown flag: --grop", "did you mean --group?"}},
		{[]string{"version", "now"}, []string{`unexpected argument "now" for "workrouter version"`}},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) { oneLineFailure(t, tc.args, tc.want...) })
	}

	// Without arguments, and for a known help topic, the help is shown.
	for _, args := range [][]string{nil, {"help", "fences"}, {"fences", "--help"}} {
		p := clitest.Start(t, args)
		if code := p.Wait(t); code != 0 || !strings.Contains(p.Stdout.String(), "Usage:") {
			t.Errorf("workrouter %v: exit %d, stdout:\n%s", args, code, p.Stdout)
		}
	}
}

// TestProduceBounds: sizes and counts beyond produce's bounds are refused
// with one line before anything is allocated or sent (--size 9000000000000
// used to die of an out-of-memory trace), and the largest --size is one
// that really goes through the embedded broker.
func TestProduceBounds(t *testing.T) {
	addr := clitest.FreeAddr(t) // nothing listens: the bounds are checked first
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--count", "1", "--size", "9000000000000"}, []string{"--size must be at most 990000 bytes", "got 9000000000000"}},
		{[]string{"--count", "1", "--keys", "9000000000000"}, []string{"--keys must be at most 1000000"}},
		{[]string{"--count", "9000000000000"}, []string{"--count must be at most 1000000000"}},
	} {
		oneLineFailure(t, append([]string{"produce", "--brokers", addr, "--topic", "t"}, tc.args...), tc.want...)
	}
	// Too long for a process's argument list: in process.
	_, _, err := runCLI(t, nil, "produce", "--brokers", addr, "--topic", "t", "--key", "k", "--type", "t", "--payload", strings.Repeat("x", maxPayload+1))
	if err == nil || !strings.Contains(err.Error(), "--payload is 990001 bytes") {
		t.Fatalf("produce --payload of %d bytes: %v", maxPayload+1, err)
	}

	broker := clitest.StartBroker(t, map[string]int32{"big": 1})
	var out string
	out, _, err = runCLI(t, nil, "produce", "--brokers", broker, "--topic", "big", "--count", "2", "--size", "990000")
	if err != nil || !strings.HasPrefix(out, "produced 2 commands") {
		t.Fatalf("produce --size 990000 (the maximum): %q, %v", out, err)
	}
	recs := readAll(t, broker, "big", 2)
	if len(recs[0].Value) != maxPayload {
		t.Fatalf("a record of --size %d carries %d bytes", maxPayload, len(recs[0].Value))
	}
}

// dirFiles returns every file of dir with its bytes.
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

// sameDir fails unless dir holds the same files, byte for byte, as before.
func sameDir(t *testing.T, what string, before, after map[string][]byte) {
	t.Helper()
	names := func(m map[string][]byte) []string {
		var n []string
		for k := range m {
			n = append(n, k)
		}
		slices.Sort(n)
		return n
	}
	if !slices.Equal(names(before), names(after)) {
		t.Fatalf("%s: files before %v, after %v", what, names(before), names(after))
	}
	for name, b := range before {
		if !bytes.Equal(b, after[name]) {
			t.Fatalf("%s changed %s (%d bytes before, %d after)", what, name, len(b), len(after[name]))
		}
	}
}

// TestReadOnlyCommandsLeaveSQLiteUnchanged: fences list, fences history
// and status --sink, pointed at an SQLite file, leave it byte for byte as
// it was, with no -wal or -shm file appearing; pointed at another
// application's database they say it holds no sink, and create nothing in
// it (they used to create three tables and switch it to WAL for good).
func TestReadOnlyCommandsLeaveSQLiteUnchanged(t *testing.T) {
	path := claimedSink(t) // closed: no -wal or -shm file
	dir := filepath.Dir(path)
	before := dirFiles(t, dir)
	if _, ok := before[filepath.Base(path)+"-wal"]; ok {
		t.Fatalf("the sink has a -wal file before the test: %v", before)
	}
	spec := "sqlite:" + path
	if out, _, err := runCLI(t, nil, "fences", "list", "--sink", spec); err != nil || !strings.Contains(out, "member-a") {
		t.Fatalf("fences list: %q, %v", out, err)
	}
	sameDir(t, "fences list", before, dirFiles(t, dir))
	if out, _, err := runCLI(t, nil, "fences", "history", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "0"); err != nil ||
		!strings.Contains(out, "member-old") {
		t.Fatalf("fences history: %q, %v", out, err)
	}
	sameDir(t, "fences history", before, dirFiles(t, dir))

	// status --sink, on a topic and group that exist.
	addr := clitest.StartBroker(t, map[string]int32{ledger.Topic: 2})
	group := "g-status"
	cl := clitest.NewClient(t, addr)
	commitOffset(t, cl, group, ledger.Topic)
	if out, _, err := runCLI(t, nil, "status", "--brokers", addr, "--group", group, "--topic", ledger.Topic, "--sink", spec); err != nil ||
		!strings.Contains(out, "sink sqlite:") {
		t.Fatalf("status --sink: %q, %v", out, err)
	}
	sameDir(t, "status --sink", before, dirFiles(t, dir))

	// Another application's database, in rollback-journal mode.
	appDir := t.TempDir()
	app := filepath.Join(appDir, "app.db")
	db, err := sql.Open("sqlite", app)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('keep me')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	appBefore := dirFiles(t, appDir)
	oneLineFailure(t, []string{"fences", "list", "--sink", "sqlite:" + app}, "no workrouter sink tables", app)
	oneLineFailure(t, []string{"fences", "history", "--sink", "sqlite:" + app, "--group", "g", "--topic", "t", "--partition", "0"}, "no workrouter sink tables")
	sameDir(t, "fences on another application's database", appBefore, dirFiles(t, appDir))
}

// TestStatusSaysTheTopicIsMissing: status on a topic that does not exist
// says so in one line, naming the brokers it asked and what the group's
// workers do meanwhile.
func TestStatusSaysTheTopicIsMissing(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"here": 1})
	oneLineFailure(t, []string{"status", "--brokers", addr, "--group", "ledger-workers", "--topic", "ledger"},
		`topic "ledger" does not exist on `+addr, `the workers of group "ledger-workers" wait for it`, "workrouter-lab broker --topic ledger")
}
