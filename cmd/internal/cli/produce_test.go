package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/envelope"
)

// readAll consumes n records of topic from the start.
func readAll(t *testing.T, addr, topic string, n int) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Deadline)
	defer cancel()
	cl := clitest.NewClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", len(recs), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	cl.Close()
	return recs
}

func TestProduceSingleCommand(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"cmds": 4})
	out, stderr, err := runCLI(t, nil, "produce", "--brokers", addr, "--topic", "cmds",
		"--key", "acct-42", "--type", "deposit", "--payload", `{"cents":100}`, "--header", "trace=abc")
	if err != nil {
		t.Fatalf("produce: %v (stderr %q)", err, stderr)
	}
	want := fmt.Sprintf("partition=%d offset=0\n", envelope.Partition([]byte("acct-42"), 4))
	if out != want {
		t.Fatalf("stdout %q, want %q", out, want)
	}
	if stderr != "" {
		t.Errorf("stderr not empty: %q", stderr)
	}
	recs := readAll(t, addr, "cmds", 1)
	c, err := envelope.Decode(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Key) != "acct-42" || c.Type != "deposit" || string(c.Payload) != `{"cents":100}` ||
		len(c.Headers) != 1 || c.Headers[0].Key != "trace" || string(c.Headers[0].Value) != "abc" {
		t.Fatalf("record decodes to %+v", c)
	}
}

// writeFile writes content to a file in a temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const badThirdLine = `{"key":"a","type":"touch","payload":{"n":1},"headers":{"h":"v"}}
{"key":"b","type":"touch","payload":"plain text"}
{"key":"c","type":"touch","payload":{"n":3}
{"key":"d","type":"touch"}
`

func TestProduceFileStopsAtFirstBadLine(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"cmds": 3})
	path := writeFile(t, "cmds.jsonl", badThirdLine)
	out, _, err := runCLI(t, nil, "produce", "--brokers", addr, "--topic", "cmds", "--file", path)
	if err == nil {
		t.Fatalf("produce succeeded on a bad line 3; stdout %q", out)
	}
	for _, want := range []string{"line 3:", "invalid JSON", "1 line failed, 2 commands acknowledged; no line after line 2 was sent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n := clitest.EndOffsetSum(t, addr, "cmds"); n != 2 {
		t.Fatalf("topic holds %d records, want the 2 before the bad line", n)
	}
	recs := readAll(t, addr, "cmds", 2)
	got := map[string]string{}
	for _, r := range recs {
		c, err := envelope.Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		got[string(c.Key)] = string(c.Payload)
	}
	if got["a"] != `{"n":1}` || got["b"] != "plain text" {
		t.Fatalf("payloads %q: want a JSON value as its encoding and a JSON string as its text", got)
	}
}

// TestProduceFileBadLineInTheMiddle is issue 23's check: with a bad line
// in the middle of a file sent pipelined, produce names that line, exits
// non-zero, and a consumer finds every good line before it exactly once,
// each key's in file order, and nothing after it.
func TestProduceFileBadLineInTheMiddle(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"cmds": 4})
	const n, bad, keys = 5000, 3001, 9
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i == bad {
			b.WriteString(`{"key":"k1","type":"step","payload":{"line":3001},"extra":1}` + "\n")
			continue
		}
		fmt.Fprintf(&b, `{"key":"k%d","type":"step","payload":%d}`+"\n", i%keys, i)
	}
	path := writeFile(t, "cmds.jsonl", b.String())
	out, _, err := runCLI(t, nil, "produce", "--brokers", addr, "--topic", "cmds", "--file", path)
	if err == nil {
		t.Fatalf("produce succeeded with a bad line %d; stdout %q", bad, out)
	}
	for _, want := range []string{"line 3001: ", `unknown field "extra"`, "1 line failed, 3000 commands acknowledged; no line after line 3000 was sent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got := clitest.EndOffsetSum(t, addr, "cmds"); got != bad-1 {
		t.Fatalf("topic holds %d records, want the %d before line %d", got, bad-1, bad)
	}
	seen, last := map[int]int{}, map[string]int{}
	for _, r := range readAll(t, addr, "cmds", bad-1) {
		c, err := envelope.Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		line, err := strconv.Atoi(string(c.Payload))
		if err != nil {
			t.Fatalf("payload %q", c.Payload)
		}
		seen[line]++
		if k := string(c.Key); line <= last[k] {
			t.Fatalf("key %s: line %d consumed after line %d", k, line, last[k])
		} else {
			last[k] = line
		}
	}
	for line := 1; line < bad; line++ {
		if seen[line] != 1 {
			t.Fatalf("line %d acknowledged and written %d times, want exactly once", line, seen[line])
		}
	}
}

func TestProduceFromStdin(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"cmds": 3})
	in := strings.NewReader("{\"key\":\"x\",\"type\":\"t\"}\n\n{\"key\":\"y\",\"type\":\"t\",\"payload\":[1,2]}\n{\"key\":\"z\",\"type\":\"t\",\"payload\":null}")
	out, _, err := runCLI(t, in, "produce", "--brokers", addr, "--topic", "cmds", "--file", "-")
	if err != nil {
		t.Fatalf("produce --file -: %v", err)
	}
	if !regexp.MustCompile(`^produced 3 commands in \d+\.\d\ds \(\d+/s\)\n$`).MatchString(out) {
		t.Fatalf("stdout %q lacks the closing line", out)
	}
	if n := clitest.EndOffsetSum(t, addr, "cmds"); n != 3 {
		t.Fatalf("topic holds %d records, want 3", n)
	}
}

func TestProduceLoad(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"load": 6})
	const count, keys, size = 5000, 7, 32
	out, stderr, err := runCLI(t, nil, "produce", "--brokers", addr, "--topic", "load",
		"--count", fmt.Sprint(count), "--keys", fmt.Sprint(keys), "--size", fmt.Sprint(size))
	if err != nil {
		t.Fatalf("produce --count: %v (stderr %q)", err, stderr)
	}
	if !regexp.MustCompile(`^produced 5000 commands in \d+\.\d\ds \(\d+/s\)\n$`).MatchString(out) {
		t.Fatalf("stdout %q is not the throughput line", out)
	}
	if n := clitest.EndOffsetSum(t, addr, "load"); n != count {
		t.Fatalf("topic holds %d records, want %d", n, count)
	}
	perKey := map[string]int{}
	for _, r := range readAll(t, addr, "load", count) {
		c, err := envelope.Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		if c.Type != "load" || len(c.Payload) != size {
			t.Fatalf("record type %q payload %d bytes, want load and %d", c.Type, len(c.Payload), size)
		}
		if want := envelope.Partition(c.Key, 6); r.Partition != want {
			t.Fatalf("key %s on partition %d, want %d", c.Key, r.Partition, want)
		}
		perKey[string(c.Key)]++
	}
	for i := range keys {
		// Round-robin: 5000 = 714*7 + 2.
		want := count / keys
		if i < count%keys {
			want++
		}
		if k := fmt.Sprintf("key-%d", i); perKey[k] != want {
			t.Errorf("%s has %d commands, want %d (all: %v)", k, perKey[k], want, perKey)
		}
	}
}

func TestProduceUnreachableBroker(t *testing.T) {
	addr := clitest.FreeAddr(t)
	start := time.Now()
	_, _, err := runCLI(t, nil, "produce", "--brokers", addr, "--topic", "cmds", "--timeout", "2s",
		"--key", "k", "--type", "t")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the brokers "+addr) {
		t.Fatalf("produce to %s: %v, want a cannot-reach error", addr, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %s, want it bounded by --timeout", d)
	}
}

func TestProduceMissingTopic(t *testing.T) {
	addr := clitest.StartBroker(t, nil)
	_, _, err := runCLI(t, nil, "produce", "--brokers", addr, "--topic", "nope", "--key", "k", "--type", "t")
	if err == nil || !strings.Contains(err.Error(), `topic "nope" does not exist`) {
		t.Fatalf("produce to a missing topic: %v", err)
	}
}

func TestProduceRejectsBadInput(t *testing.T) {
	// All of these fail before any broker is contacted.
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no topic", []string{"--key", "k", "--type", "t"}, "--topic is required"},
		{"nothing to send", []string{"--topic", "x"}, "nothing to produce"},
		{"two sources", []string{"--topic", "x", "--key", "k", "--type", "t", "--count", "5"}, "only one source"},
		{"key without type", []string{"--topic", "x", "--key", "k"}, "--type is required"},
		{"empty key", []string{"--topic", "x", "--key", "", "--type", "t"}, "--key is required"},
		{"reserved header", []string{"--topic", "x", "--key", "k", "--type", "t", "--header", "workrouter-x=1"}, "reserved header"},
		{"bad header", []string{"--topic", "x", "--key", "k", "--type", "t", "--header", "novalue"}, "want KEY=VALUE"},
		{"long id", []string{"--topic", "x", "--key", "k", "--type", "t", "--id", strings.Repeat("x", envelope.MaxIDLen+1)}, "invalid command ID"},
		{"id with count", []string{"--topic", "x", "--id", "a", "--count", "3"}, "only one source"},
		{"count zero", []string{"--topic", "x", "--count", "0"}, "--count must be at least 1"},
		{"keys zero", []string{"--topic", "x", "--count", "3", "--keys", "0"}, "--keys must be at least 1"},
		{"negative size", []string{"--topic", "x", "--count", "3", "--size", "-1"}, "--size must not be negative"},
		{"keys without count", []string{"--topic", "x", "--key", "k", "--type", "t", "--keys", "3"}, "only apply to generated load"},
		{"type with file", []string{"--topic", "x", "--file", "-", "--type", "t"}, "each line carries its own type"},
		{"missing file", []string{"--topic", "x", "--file", "/nonexistent/cmds.jsonl"}, "no such file"},
		{"bad brokers", []string{"--topic", "x", "--brokers", "localhost", "--key", "k", "--type", "t"}, "not host:port"},
		{"zero timeout", []string{"--topic", "x", "--timeout", "0s", "--key", "k", "--type", "t"}, "--timeout must be positive"},
		{"positional", []string{"--topic", "x", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCLI(t, nil, append([]string{"produce"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("produce %v: error %v, want one containing %q", tc.args, err, tc.want)
			}
			if out != "" {
				t.Fatalf("stdout not empty on failure: %q", out)
			}
		})
	}
}

func TestProduceReadsEnvironment(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"envtopic": 2})
	t.Setenv("WORKROUTER_BROKERS", addr)
	t.Setenv("WORKROUTER_TOPIC", "envtopic")
	t.Setenv("WORKROUTER_COUNT", "10")
	out, _, err := runCLI(t, nil, "produce")
	if err != nil {
		t.Fatalf("produce from the environment: %v", err)
	}
	if !strings.HasPrefix(out, "produced 10 commands") {
		t.Fatalf("stdout %q", out)
	}
	if n := clitest.EndOffsetSum(t, addr, "envtopic"); n != 10 {
		t.Fatalf("topic holds %d records, want 10", n)
	}
}

// TestProduceBadLineExitCode runs the real binary: a bad line exits
// non-zero with one line on stderr, after sending the lines before it.
func TestProduceBadLineExitCode(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"cmds": 3})
	path := writeFile(t, "cmds.jsonl", badThirdLine)
	p := clitest.Start(t, []string{"produce", "--brokers", addr, "--topic", "cmds", "--file", path})
	if code := p.Wait(t); code == 0 {
		t.Fatalf("exit code 0 on a bad line; stdout %q", p.Stdout)
	}
	stderr := p.Stderr.String()
	if !strings.HasPrefix(stderr, "workrouter: line 3: ") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("stderr is not one \"workrouter: line 3: ...\" line:\n%s", stderr)
	}
	if p.Stdout.String() != "" {
		t.Fatalf("stdout not empty: %q", p.Stdout)
	}
	if n := clitest.EndOffsetSum(t, addr, "cmds"); n != 2 {
		t.Fatalf("topic holds %d records, want 2", n)
	}
}

// TestProduceCommandIDs: a command's ID is --id or its line's "id", sent
// in the workrouter-id header; a command without one gets a generated ID,
// a different one for each.
func TestProduceCommandIDs(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{"cmds": 3})
	if _, stderr, err := runCLI(t, nil, "produce", "--brokers", addr, "--topic", "cmds", "--key", "a", "--type", "t", "--id", "dep-7"); err != nil {
		t.Fatalf("produce --id: %v (stderr %q)", err, stderr)
	}
	in := strings.NewReader(`{"key":"b","type":"t","id":"dep-8","payload":{"id":"not this one"}}` + "\n" +
		`{"key":"c","type":"t"}` + "\n" + `{"key":"d","type":"t"}` + "\n")
	if _, stderr, err := runCLI(t, in, "produce", "--brokers", addr, "--topic", "cmds", "--file", "-"); err != nil {
		t.Fatalf("produce --file: %v (stderr %q)", err, stderr)
	}
	ids := map[string]string{}
	for _, r := range readAll(t, addr, "cmds", 4) {
		c, err := envelope.Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		ids[string(c.Key)] = c.ID
	}
	if ids["a"] != "dep-7" || ids["b"] != "dep-8" || ids["c"] == "" || ids["d"] == "" || ids["c"] == ids["d"] {
		t.Fatalf("the records' IDs by key are %q: want a: dep-7, b: dep-8 and two different generated ones", ids)
	}
}

func TestCleanBrokers(t *testing.T) {
	got, err := CleanBrokers([]string{" a:1 , b:2", "", "[::1]:3"})
	if err != nil || !slices.Equal(got, []string{"a:1", "b:2", "[::1]:3"}) {
		t.Fatalf("CleanBrokers = %v, %v", got, err)
	}
	for _, bad := range [][]string{{""}, {"a"}, {"a:"}, {"a:x"}, {":1"}} {
		if _, err := CleanBrokers(bad); err == nil {
			t.Errorf("CleanBrokers(%q) accepted", bad)
		}
	}
}

func TestNewCommandsHaveHelpWithExamples(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"produce"}, []string{"WORKROUTER_BROKERS", "WORKROUTER_COUNT", "workrouter produce --topic commands --count"}},
		{[]string{"status"}, []string{"WORKROUTER_GROUP", "WORKROUTER_SINK", "workrouter status --group"}},
		{[]string{"fences"}, []string{"list", "reset", "history"}},
		{[]string{"fences", "list"}, []string{"WORKROUTER_SINK", "workrouter fences list --sink"}},
		{[]string{"fences", "reset"}, []string{"WORKROUTER_REASON", "--yes", "workrouter fences reset --sink"}},
		{[]string{"fences", "history"}, []string{"WORKROUTER_PARTITION", "workrouter fences history --sink"}},
	} {
		out, _, err := runCLI(t, nil, append(tc.args, "--help")...)
		if err != nil {
			t.Fatalf("%v --help: %v", tc.args, err)
		}
		for _, want := range append(tc.want, "Examples:") {
			if !strings.Contains(out, want) {
				t.Errorf("%v --help lacks %q:\n%s", tc.args, want, out)
			}
		}
	}
}
