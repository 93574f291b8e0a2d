package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
)

// byHandCommands returns the command lines of the README's "By hand, in
// four terminals" block, as argument lists (after `go run
// ./cmd/workrouter-lab` for the broker, `go run ./cmd/workrouter` for the
// others: the product binary has no broker), with comments and line
// continuations resolved and single quotes honoured.
func byHandCommands(t *testing.T) [][]string {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "### By hand, in four terminals")
	if !ok {
		t.Fatal(`the README has no section "By hand, in four terminals"`)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("the section has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	block = strings.ReplaceAll(block, "\\\n", " ")
	var out [][]string
	for _, line := range strings.Split(block, "\n") {
		words := shellSplit(t, line)
		if len(words) == 0 {
			continue
		}
		want := "go run ./cmd/workrouter"
		if len(words) > 3 && words[3] == "broker" {
			want = "go run ./cmd/workrouter-lab"
		}
		if len(words) < 3 || strings.Join(words[:3], " ") != want {
			t.Fatalf("README by-hand line %q is not %s: the broker is workrouter-lab's, the other commands the product's", line, want)
		}
		out = append(out, words[3:])
	}
	return out
}

// shellSplit splits a shell line into words: single quotes group, and a #
// outside quotes starts a comment.
func shellSplit(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	in, quoted := false, false
	for _, r := range line {
		switch {
		case quoted:
			if r == '\'' {
				quoted = false
			} else {
				cur.WriteRune(r)
			}
		case r == '\'':
			quoted, in = true, true
		case r == '#' && !in:
			return words
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestREADMEByHand runs the README's "By hand" commands as written (plus a
// free port for the broker, and the brokers' address through
// WORKROUTER_BROKERS, which the commands do not set): the broker creates
// the topic the worker consumes, the produced deposit is applied, and
// status shows it applied in the sink with no lag left.
func TestREADMEByHand(t *testing.T) {
	cmds := byHandCommands(t)
	if len(cmds) != 4 || cmds[0][0] != "broker" || cmds[1][0] != "worker" || cmds[2][0] != "produce" || cmds[3][0] != "status" {
		t.Fatalf("README by-hand commands %q: want broker, worker, produce and status", cmds)
	}
	_, addr, _ := startBroker(t, append(cmds[0][1:], "--listen", "127.0.0.1:0"))
	dir := t.TempDir()
	run := func(args []string) *exec.Cmd {
		c := clitest.Command(args, "WORKROUTER_BROKERS="+addr)
		c.Dir = dir
		return c
	}

	worker := run(cmds[1])
	logs := clitest.NewSyncBuffer()
	worker.Stdout, worker.Stderr = logs, logs
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	defer func() {
		worker.Process.Signal(syscall.SIGINT)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the worker exited with %v after SIGINT; its log:\n%s", err, logs)
			}
		case <-time.After(clitest.Deadline):
			worker.Process.Kill()
			t.Errorf("the worker did not exit after SIGINT")
		}
	}()

	if out, err := run(cmds[2]).CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "partition=") {
		t.Fatalf("workrouter %s: %v\n%s", strings.Join(cmds[2], " "), err, out)
	}
	var last string
	ok := false
	for end := time.Now().Add(clitest.Deadline); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		out, err := run(cmds[3]).CombinedOutput()
		last = string(out)
		if err == nil && strings.Contains(last, "total lag 0") && strings.Contains(last, "sink sqlite:ledger.db") && strings.Contains(last, "1 member") {
			ok = true
			break
		}
	}
	if !ok {
		t.Fatalf("status never showed the deposit applied with no lag; last output:\n%s\nworker log:\n%s", last, logs)
	}
	if !strings.Contains(logs.String(), "partition claimed") {
		t.Errorf("the worker logged no claim:\n%s", logs)
	}
}
