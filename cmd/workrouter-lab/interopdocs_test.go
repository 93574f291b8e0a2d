package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/internal/testwait"
)

// docBlock is a fenced code block of a Markdown page: its language and
// its text.
type docBlock struct {
	lang, body string
	line       int
}

// fencedBlocks returns the fenced code blocks of a Markdown page, in order.
func fencedBlocks(text string) []docBlock {
	var out []docBlock
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		j := i + 1
		for j < len(lines) && lines[j] != "```" {
			j++
		}
		out = append(out, docBlock{lang: strings.TrimPrefix(lines[i], "```"), body: strings.Join(lines[i+1:min(j, len(lines))], "\n"), line: i + 1})
		i = j
	}
	return out
}

// saslArgs matches kcat's TLS and SASL settings, which the test's
// plaintext broker does not take (CI's kcat step and
// TestForeignClientsLogIn run them against a broker with TLS and SASL).
var saslArgs = regexp.MustCompile(`-X (?:security\.protocol|sasl\.\w+|ssl\.[\w.]+)=(?:"[^"]*"|\S+)`)

// TestInteropDocsApplyOnce runs docs/interop.md's producing programs in
// the page's order — its kcat commands, the confluent-kafka-python
// program and the KafkaJS program — twice, as an operator who follows the
// page and then re-runs it, against the embedded broker and one ledger
// worker, and checks from the sink that every deposit was applied once.
// Fragments (a lone p.produce( or messages.push( line) are not programs:
// TestInteropDocsCarryIDs (examples/internal/readme) checks that they
// carry IDs. kcat's TLS and SASL settings are dropped: the broker here is
// plaintext.
func TestInteropDocsApplyOnce(t *testing.T) {
	nodeModules, err := filepath.Abs(filepath.Join("..", "internal", "broker", "testdata", "clients", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	if _, err := exec.LookPath("kcat"); err != nil {
		missing = append(missing, "kcat (apt-get install kcat)")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import confluent_kafka").Run(); err != nil {
		missing = append(missing, "confluent-kafka-python (apt-get install python3-confluent-kafka)")
	}
	if _, err := os.Stat(filepath.Join(nodeModules, "kafkajs", "package.json")); err != nil {
		missing = append(missing, "KafkaJS (npm ci --prefix cmd/internal/broker/testdata/clients)")
	} else if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node (apt-get install nodejs)")
	}
	if len(missing) > 0 {
		msg := "not installed: " + strings.Join(missing, ", ")
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true, so this fails instead of skipping (.ci/run installs them)")
		}
		t.Skip(msg)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "interop.md"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{"ledger": 6}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	addr := b.Addr()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	w := clitest.Start(t, []string{"worker", "--example", "ledger", "--brokers", addr, "--sink", "sqlite:" + path, "--client-id", "docs"})
	defer w.Interrupt(t)

	// An example that reads its commands from a file finds one there.
	if err := os.WriteFile(filepath.Join(dir, "commands.txt"), []byte(`acct-7:{"id":"c-file","seq":0,"amount":100}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type program struct {
		name string
		cmd  func(ctx context.Context) *exec.Cmd
	}
	var programs []program
	for _, blk := range fencedBlocks(string(raw)) {
		body := strings.NewReplacer("127.0.0.1:9092", addr, "broker:9093", addr).Replace(blk.body)
		name := fmt.Sprintf("docs/interop.md:%d (%s)", blk.line, blk.lang)
		switch {
		case blk.lang == "sh" && strings.Contains(body, "kcat -P"):
			body = saslArgs.ReplaceAllString(body, "")
			programs = append(programs, program{name, func(ctx context.Context) *exec.Cmd {
				c := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", body)
				c.Dir = dir // where commands.txt is, for an example that reads it
				return c
			}})
		case blk.lang == "python" && strings.Contains(body, "import "):
			file := filepath.Join(dir, fmt.Sprintf("block%d.py", blk.line))
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			programs = append(programs, program{name, func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, "/usr/bin/python3", file) }})
		case blk.lang == "js" && strings.Contains(body, "require("):
			file := filepath.Join(dir, fmt.Sprintf("block%d.js", blk.line))
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			programs = append(programs, program{name, func(ctx context.Context) *exec.Cmd {
				c := exec.CommandContext(ctx, "node", file)
				c.Env = append(os.Environ(), "NODE_PATH="+nodeModules)
				return c
			}})
		}
	}
	if len(programs) < 4 {
		t.Fatalf("found %d programs on docs/interop.md, want its kcat commands, the Python program and the KafkaJS program", len(programs))
	}
	for round := 1; round <= 2; round++ {
		for _, p := range programs {
			ctx, cancel := context.WithTimeout(t.Context(), clitest.Deadline)
			out, err := p.cmd(ctx).CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("round %d: %s: %v\n%s", round, p.name, err, out)
			}
		}
	}
	testwait.For(t, clitest.Deadline, "the worker to apply everything (lag zero)", func() bool {
		return cluster.LagZero(t.Context(), []string{addr}, "ledger", "ledger-workers")
	})
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var postings, deposits int
	if err := db.QueryRow(`SELECT count(*), count(DISTINCT id) FROM ledger_postings`).Scan(&postings, &deposits); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT id, count(*) FROM ledger_postings GROUP BY id HAVING count(*) > 1 ORDER BY id LIMIT 10`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var twice []string
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		twice = append(twice, fmt.Sprintf("%s ×%d", id, n))
	}
	if len(twice) > 0 || deposits < 400 {
		t.Fatalf("after running the page's programs twice: %d postings of %d deposits; applied more than once: %v", postings, deposits, twice)
	}
	t.Logf("%d programs run twice: %d deposits, each applied once", len(programs), deposits)
}
