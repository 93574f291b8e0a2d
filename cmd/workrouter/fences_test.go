package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// claimedSink creates an SQLite sink file whose scopes were claimed the
// way workers claim them: g/t/0 at epoch 5 by member-a with 3 records
// applied, g/t/1 at epoch 5 by member-b, and other/t/0 at epoch 2.
func claimedSink(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fences.db")
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 5, Member: "member-a"}
	for _, tok := range []epochs.Token{
		{Group: "g", Topic: "t", Partition: 0, Epoch: 4, Member: "member-old"},
		a,
		{Group: "g", Topic: "t", Partition: 1, Epoch: 5, Member: "member-b"},
		{Group: "other", Topic: "t", Partition: 0, Epoch: 2, Member: "member-c"},
	} {
		if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
			t.Fatalf("claim %s: %v", tok, err)
		}
	}
	noop := func(context.Context, *sqlite.Tx, int) error { return nil }
	if _, err := s.Apply(ctx, a, []int64{0, 1, 2}, noop); err != nil {
		t.Fatalf("apply: %v", err)
	}
	return path
}

// sinkFences reads the fences of the SQLite sink at path.
func sinkFences(t *testing.T, path string) map[epochs.Scope]sink.Fence {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fs, err := s.Fences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[epochs.Scope]sink.Fence)
	for _, f := range fs {
		out[f.Scope] = f
	}
	return out
}

func TestFencesList(t *testing.T) {
	path := claimedSink(t)
	out, _, err := runCLI(t, nil, "fences", "list", "--sink", "sqlite:"+path)
	if err != nil {
		t.Fatalf("fences list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("fences list printed %d lines, want a header and 3 rows:\n%s", len(lines), out)
	}
	for i, want := range [][]string{
		{"GROUP", "TOPIC", "PARTITION", "HOLDER EPOCH", "HOLDER MEMBER", "NEXT OFFSET"},
		{"g", "t", "0", "5", "member-a", "3"},
		{"g", "t", "1", "5", "member-b", "0"},
		{"other", "t", "0", "2", "member-c", "0"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}

	out, _, err = runCLI(t, nil, "fences", "list", "--sink", "sqlite:"+path, "--group", "g", "--json")
	if err != nil {
		t.Fatalf("fences list --json: %v", err)
	}
	var rows []fenceJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("--json does not parse: %v\n%s", err, out)
	}
	if len(rows) != 2 || rows[0].Group != "g" || rows[0].HolderEpoch == nil || *rows[0].HolderEpoch != 5 ||
		rows[0].HolderMember != "member-a" || rows[0].NextOffset != 3 || rows[1].Partition != 1 {
		t.Fatalf("--group g --json rows %+v", rows)
	}
}

func TestFencesResetRefusesWithoutYes(t *testing.T) {
	path := claimedSink(t)
	before := sinkFences(t, path)
	out, _, err := runCLI(t, nil, "fences", "reset", "--sink", "sqlite:"+path, "--group", "g", "--topic", "t",
		"--partition", "0", "--reason", "group recreated")
	if err == nil || !strings.Contains(err.Error(), "without --yes (nothing changed)") {
		t.Fatalf("reset without --yes: %v, want a refusal", err)
	}
	if !strings.Contains(out, "would reset g/t/0: holder epoch 5 member member-a -> none; next offset 3 kept") {
		t.Fatalf("reset without --yes did not say what it would change:\n%s", out)
	}
	after := sinkFences(t, path)
	if len(after) != len(before) {
		t.Fatalf("fences changed: %v -> %v", before, after)
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("fence %s changed without --yes: %+v -> %+v", k, v, after[k])
		}
	}
}

func TestFencesResetWithYes(t *testing.T) {
	path := claimedSink(t)
	const reason = "group recreated after broker data loss (INC-1)"
	out, _, err := runCLI(t, nil, "fences", "reset", "--sink", "sqlite:"+path, "--group", "g", "--topic", "t",
		"--partition", "0", "--reason", reason, "--yes")
	if err != nil {
		t.Fatalf("reset --yes: %v", err)
	}
	for _, want := range []string{
		"reset g/t/0",
		"before: holder epoch 5 member member-a, next offset 3",
		"after:  holder none (reset), next offset 3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("reset output lacks %q:\n%s", want, out)
		}
	}
	fences := sinkFences(t, path)
	if f := fences[epochs.Scope{Group: "g", Topic: "t", Partition: 0}]; !f.Holder.IsZero() || f.NextOffset != 3 {
		t.Fatalf("after reset g/t/0 is %+v, want no holder and NextOffset 3", f)
	}
	if f := fences[epochs.Scope{Group: "g", Topic: "t", Partition: 1}]; f.Holder.Member != "member-b" {
		t.Fatalf("g/t/1 changed too: %+v", f)
	}

	// The sink's own history records the reset with its reason...
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := s.History(context.Background(), epochs.Scope{Group: "g", Topic: "t", Partition: 0})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	last := hs[len(hs)-1]
	if len(hs) != 3 || last.Kind != sqlite.KindReset || last.Reason != reason || last.Token.Member != "member-a" || last.NextOffset != 3 {
		t.Fatalf("history %+v: want two claims then the reset with its reason", hs)
	}

	// ... and `fences history` shows it.
	out, _, err = runCLI(t, nil, "fences", "history", "--sink", "sqlite:"+path, "--group", "g", "--topic", "t", "--partition", "0")
	if err != nil {
		t.Fatalf("fences history: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.Contains(lines[2], "SEQ") || !strings.Contains(lines[3], "claim") || !strings.Contains(lines[4], "claim") ||
		!strings.Contains(lines[5], "reset") || !strings.Contains(lines[5], reason) || !strings.Contains(lines[5], "member-a") {
		t.Fatalf("fences history:\n%s", out)
	}
	out, _, err = runCLI(t, nil, "fences", "history", "--sink", "sqlite:"+path, "--group", "g", "--topic", "t", "--partition", "0", "--json")
	if err != nil {
		t.Fatalf("fences history --json: %v", err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 3 || rows[2]["kind"] != "reset" || rows[2]["reason"] != reason {
		t.Fatalf("fences history --json: %v\n%s", err, out)
	}

	// A new claim at a lower epoch now succeeds (that is what the reset is for).
	s, err = sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if next, err := s.Claim(context.Background(), epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "new"}, sink.Observed{MemberProven: true}); err != nil || next != 3 {
		t.Fatalf("claim at epoch 1 after the reset: %d, %v; want 3, nil", next, err)
	}
}

func TestFencesResetAll(t *testing.T) {
	for _, flag := range [][]string{{"--all"}, {"--partition", "-1"}} {
		t.Run(flag[0], func(t *testing.T) {
			path := claimedSink(t)
			args := append([]string{"fences", "reset", "--sink", "sqlite:" + path, "--group", "g", "--topic", "t",
				"--reason", "recreated", "--yes"}, flag...)
			out, _, err := runCLI(t, nil, args...)
			if err != nil {
				t.Fatalf("reset %v: %v", flag, err)
			}
			if strings.Count(out, "reset g/t/") != 2 {
				t.Fatalf("reset %v output:\n%s", flag, out)
			}
			fences := sinkFences(t, path)
			for p := range int32(2) {
				if f := fences[epochs.Scope{Group: "g", Topic: "t", Partition: p}]; !f.Holder.IsZero() {
					t.Errorf("g/t/%d not reset: %+v", p, f)
				}
			}
			if f := fences[epochs.Scope{Group: "other", Topic: "t", Partition: 0}]; f.Holder.IsZero() {
				t.Errorf("other/t/0 was reset too")
			}
			out, _, err = runCLI(t, nil, "fences", "history", "--sink", "sqlite:"+path, "--group", "g", "--topic", "t", "--partition", "1")
			if err != nil || !strings.Contains(out, "reset") || !strings.Contains(out, "recreated") {
				t.Fatalf("g/t/1 history lacks the audited reset: %v\n%s", err, out)
			}
		})
	}
}

func TestFencesErrors(t *testing.T) {
	path := claimedSink(t)
	missing := filepath.Join(t.TempDir(), "typo.db")
	spec := "sqlite:" + path
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"fences"}, "needs a subcommand"},
		{"unknown subcommand", []string{"fences", "drop"}, "unknown command"},
		{"list no sink", []string{"fences", "list"}, "--sink is required"},
		{"list bad sink", []string{"fences", "list", "--sink", "redis://localhost"}, `unknown sink kind "redis"`},
		{"list empty sqlite path", []string{"fences", "list", "--sink", "sqlite:"}, "empty path"},
		{"list missing file", []string{"fences", "list", "--sink", "sqlite:" + missing}, "no such file"},
		{"list bad dsn", []string{"fences", "list", "--sink", "postgres://u:hunter2@host:notaport/db"}, "not a valid PostgreSQL connection string"},
		{"reset no reason", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "0", "--yes"}, "--reason is required"},
		{"reset no partition", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--reason", "r", "--yes"}, "--partition is required (or --all"},
		{"reset no group", []string{"fences", "reset", "--sink", spec, "--topic", "t", "--partition", "0", "--reason", "r", "--yes"}, "--group is required"},
		{"reset bad partition", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "-2", "--reason", "r", "--yes"}, "must be a partition number"},
		{"reset all and partition", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "1", "--all", "--reason", "r", "--yes"}, "do not combine"},
		{"reset unknown scope", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "9", "--reason", "r", "--yes"}, "has no fence for g/t/9"},
		{"history no partition", []string{"fences", "history", "--sink", spec, "--group", "g", "--topic", "t"}, "--partition is required"},
		{"history unknown scope", []string{"fences", "history", "--sink", spec, "--group", "g", "--topic", "zz", "--partition", "0"}, "no history for g/zz/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCLI(t, nil, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: %v, want an error containing %q", tc.args, err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error repeats the password: %v", err)
			}
			if out != "" {
				t.Fatalf("stdout not empty on failure: %q", out)
			}
		})
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("fences list created the mistyped sink file %s: %v", missing, err)
	}
}

// TestFencesResetWithoutYesExitCode runs the real binary: a refused reset
// exits non-zero, says what it would change, and changes nothing.
func TestFencesResetWithoutYesExitCode(t *testing.T) {
	path := claimedSink(t)
	p := startProc(t, []string{"fences", "reset", "--group", "g", "--topic", "t", "--all", "--reason", "r"},
		"WORKROUTER_SINK=sqlite:"+path)
	if code := p.wait(t); code == 0 {
		t.Fatalf("exit code 0 without --yes; stdout:\n%s", p.stdout)
	}
	if out := p.stdout.String(); strings.Count(out, "would reset g/t/") != 2 {
		t.Fatalf("stdout does not list the two fences it would reset:\n%s", out)
	}
	if stderr := p.stderr.String(); stderr != "workrouter: refusing to reset 2 fence(s) without --yes (nothing changed)\n" {
		t.Fatalf("stderr %q", stderr)
	}
	for scope, f := range sinkFences(t, path) {
		if f.Holder.IsZero() {
			t.Fatalf("%s was reset without --yes", scope)
		}
	}
}
