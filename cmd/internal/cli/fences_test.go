package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/topicid"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// claimedSink creates an SQLite sink file whose scopes were claimed the
// way workers claim them: g/t/0 at epoch 5 by member-a with 3 records
// applied (the third a duplicate of the first's command ID, skipped), g/t/1
// at epoch 5 by member-b, and other/t/0 at epoch 2.
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
	if res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0, 1, 2}, IDs: []string{"x", "y", "x"}}, noop); err != nil || len(res.Duplicates) != 1 {
		t.Fatalf("apply: %+v, %v, want one duplicate", res, err)
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
		{"GROUP", "TOPIC", "PARTITION", "HOLDER EPOCH", "HOLDER MEMBER", "NEXT OFFSET", "DUPLICATES SKIPPED"},
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
	if f := strings.Fields(lines[1]); len(f) != 10 || f[6] != "-" || f[8] != "1" {
		t.Errorf("line 1 %q: DONE ABOVE is not - or DUPLICATES SKIPPED is not 1", lines[1])
	}
	var rows []fenceJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("--json does not parse: %v\n%s", err, out)
	}
	if len(rows) != 2 || rows[0].Group != "g" || rows[0].HolderEpoch == nil || *rows[0].HolderEpoch != 5 ||
		rows[0].HolderMember != "member-a" || rows[0].NextOffset != 3 || rows[1].Partition != 1 || rows[0].Duplicates != 1 || rows[1].Duplicates != 0 {
		t.Fatalf("--group g --json rows %+v", rows)
	}
}

// TestFencesShowDoneSpans: a scope whose lanes applied offsets above its
// watermark shows them in fences list and in the next claim's history row,
// as a table column and as JSON.
func TestFencesShowDoneSpans(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gapped.db")
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	a := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 5, Member: "member-a"}
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *sqlite.Tx, int) error { return nil }
	// Offsets 0-1 (the watermark moves to 2), then 4-5 and 8, applied by
	// lanes ahead of offsets 2-3 and 6-7.
	for _, b := range []sink.Batch{
		{Offsets: []int64{0, 1}, From: []int64{0, 1}},
		{Offsets: []int64{4, 5}, From: []int64{4, 5}},
		{Offsets: []int64{8}, From: []int64{8}},
	} {
		if _, err := s.Apply(ctx, a, b, noop); err != nil {
			t.Fatalf("apply %v: %v", b.Offsets, err)
		}
	}
	b := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 6, Member: "member-b"}
	if cp, err := s.Claim(ctx, b, sink.Observed{}); err != nil || cp.NextOffset != 2 || len(cp.Done) != 2 {
		t.Fatalf("claim by %s: %+v, %v; want watermark 2 and 2 done spans", b, cp, err)
	}
	s.Close()

	out, _, err := runCLI(t, nil, "fences", "list", "--sink", "sqlite:"+path)
	if err != nil {
		t.Fatalf("fences list: %v", err)
	}
	if !strings.Contains(out, "DONE ABOVE") || !strings.Contains(out, "3 in 2 spans (4-8)") {
		t.Errorf("fences list does not show the done spans (3 offsets in 2 spans, 4-8):\n%s", out)
	}
	out, _, err = runCLI(t, nil, "fences", "list", "--sink", "sqlite:"+path, "--json")
	if err != nil {
		t.Fatalf("fences list --json: %v", err)
	}
	var rows []fenceJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0].DoneSpans != "4-6,8-9" {
		t.Errorf("fences list --json: %+v, %v; want done_spans 4-6,8-9\n%s", rows, err, out)
	}
	out, _, err = runCLI(t, nil, "fences", "history", "--sink", "sqlite:"+path, "--group", "g", "--topic", "t", "--partition", "0")
	if err != nil {
		t.Fatalf("fences history: %v", err)
	}
	var claimB string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "member-b") {
			claimB = l
		}
	}
	if !strings.Contains(claimB, "3 in 2 spans (4-8)") {
		t.Errorf("fences history: member-b's claim row %q does not show the done spans it took over:\n%s", claimB, out)
	}
	out, _, err = runCLI(t, nil, "fences", "history", "--sink", "sqlite:"+path, "--group", "g", "--topic", "t", "--partition", "0", "--json")
	if err != nil {
		t.Fatalf("fences history --json: %v", err)
	}
	if !strings.Contains(out, `"done_spans":"4-6,8-9"`) {
		t.Errorf("fences history --json lacks done_spans 4-6,8-9:\n%s", out)
	}
}

// fenceBroker starts an in-process broker whose topic t has 2 partitions,
// with 5 records on partition 0 and 2 on partition 1 (so that claimedSink's
// checkpoints are offsets of the log), and returns its address.
func fenceBroker(t *testing.T) (*kfake.Cluster, string) {
	t.Helper()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	produceTo(t, kf, "t", 0, 5)
	produceTo(t, kf, "t", 1, 2)
	return kf, kf.ListenAddrs()[0]
}

// produceTo produces n records to topic's partition p with a fresh client.
func produceTo(t *testing.T, kf *kfake.Cluster, topic string, p int32, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range n {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// expectOf returns the expect token of scope's fence in the sink at path.
func expectOf(t *testing.T, path string, p int32) string {
	t.Helper()
	return admin.ExpectToken(sinkFences(t, path)[epochs.Scope{Group: "g", Topic: "t", Partition: p}])
}

func resetArgs(path, addr string, more ...string) []string {
	return append([]string{"fences", "reset", "--sink", "sqlite:" + path, "--brokers", addr, "--group", "g", "--topic", "t"}, more...)
}

// TestFencesResetDryRun: without --yes, reset diagnoses each scope, says
// what it would do (or why it would refuse) and the expect token, and
// changes nothing.
func TestFencesResetDryRun(t *testing.T) {
	path := claimedSink(t)
	_, addr := fenceBroker(t)
	before := sinkFences(t, path)
	out, _, err := runCLI(t, nil, resetArgs(path, addr, "--partition", "0", "--keep-checkpoint", "--reason", "group recreated")...)
	if err == nil || !strings.Contains(err.Error(), "the reset of partition 0 would be refused, so --yes would fail too") {
		t.Fatalf("dry run of a refused reset: %v, want it to say --yes would fail too", err)
	}
	if strings.Contains(out, "run the same command with --yes") {
		t.Errorf("the dry run of a refused reset says to rerun it with --yes, which would fail:\n%s", out)
	}
	for _, want := range []string{
		"g/t/0\n",
		"fence:    holder epoch 5 member member-a, checkpoint 3, topic ID -",
		"log:      topic ID ", "offsets 0 to 5",
		"group:    0 members; the partition is assigned to nobody; committed offset nothing",
		"problems: none",
		"reset:    refused: the group and the log show no reason to reset this fence (--force",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = runCLI(t, nil, resetArgs(path, addr, "--partition", "0", "--keep-checkpoint", "--force", "--reason", "group recreated")...)
	for _, want := range []string{
		"to reset, run the same command with --yes --expect 0=" + expectOf(t, path, 0),
		"reset:    holder -> none (forced); checkpoint 3 -> 3; the next claim must prove its membership",
		"then:     no member is assigned the partition now",
		"expect:   0=" + expectOf(t, path, 0),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("forced dry run lacks %q:\n%s", want, out)
		}
	}
	after := sinkFences(t, path)
	for k, v := range before {
		if !after[k].Equal(v) {
			t.Fatalf("fence %s changed without --yes: %+v -> %+v", k, v, after[k])
		}
	}
}

// TestFencesResetKeepCheckpoint: a forced reset with the expect token of
// the dry run clears the holder, keeps the checkpoint, requires a proof
// from the next claim and is audited with its reason and diagnosis.
func TestFencesResetKeepCheckpoint(t *testing.T) {
	path := claimedSink(t)
	_, addr := fenceBroker(t)
	const reason = "group recreated after broker data loss (INC-1)"
	out, _, err := runCLI(t, nil, resetArgs(path, addr, "--partition", "0", "--keep-checkpoint", "--force", "--reason", reason,
		"--expect", "0="+expectOf(t, path, 0), "--yes")...)
	if err != nil {
		t.Fatalf("reset --yes: %v\n%s", err, out)
	}
	for _, want := range []string{
		"reset g/t/0",
		"before: holder epoch 5 member member-a, checkpoint 3",
		"after:  holder none, checkpoint 3",
		"the next claim must prove its membership",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("reset output lacks %q:\n%s", want, out)
		}
	}
	fs := sinkFences(t, path)
	if f := fs[epochs.Scope{Group: "g", Topic: "t", Partition: 0}]; !f.Holder.IsZero() || f.NextOffset != 3 || !f.ProofRequired {
		t.Fatalf("after reset g/t/0 is %+v, want no holder, NextOffset 3, proof required", f)
	}
	if f := fs[epochs.Scope{Group: "g", Topic: "t", Partition: 1}]; f.Holder.Member != "member-b" {
		t.Fatalf("g/t/1 changed too: %+v", f)
	}

	// The sink's history records the reset with its reason and diagnosis,
	// and `fences history` shows it.
	out, _, err = runCLI(t, nil, "fences", "history", "--sink", "sqlite:"+path, "--group", "g", "--topic", "t", "--partition", "0", "--json")
	if err != nil {
		t.Fatalf("fences history --json: %v", err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 3 || rows[2]["kind"] != "reset" || rows[2]["reason"] != reason {
		t.Fatalf("fences history --json: %v\n%s", err, out)
	}
	var detail map[string]any
	if err := json.Unmarshal([]byte(rows[2]["detail"].(string)), &detail); err != nil || detail["forced"] != true || detail["observed"] == nil || detail["before"] == nil {
		t.Fatalf("the reset's audited detail: %v %v", err, rows[2]["detail"])
	}
	out, _, err = runCLI(t, nil, "fences", "list", "--sink", "sqlite:"+path, "--group", "g")
	if err != nil || !strings.Contains(out, "reset: the next claim must prove its membership") {
		t.Fatalf("fences list after the reset: %v\n%s", err, out)
	}

	// A claim at a lower epoch is accepted only with a proof of membership.
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "new"}
	_, err = s.Claim(context.Background(), old, sink.Observed{})
	var pe *sink.ProofRequiredError
	if !errors.As(err, &pe) {
		t.Fatalf("unproven claim after the reset: %v, want a *sink.ProofRequiredError", err)
	}
	if next, err := nextOf(s.Claim(context.Background(), old, sink.Observed{Proof: &sink.Proof{Version: pe.Version}})); err != nil || next != 3 {
		t.Fatalf("proven claim at epoch 1 after the reset: %d, %v; want 3, nil", next, err)
	}
}

// TestFencesResetGuards: a reset is refused without a cause (unless
// --force), with a stale expect token, and with --yes but no --expect off
// a terminal; none of them changes anything.
func TestFencesResetGuards(t *testing.T) {
	path := claimedSink(t)
	_, addr := fenceBroker(t)
	before := sinkFences(t, path)
	tok := "0=" + expectOf(t, path, 0)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no cause", []string{"--keep-checkpoint", "--expect", tok}, "show no reason to reset this fence: g/t/0"},
		{"stale expect", []string{"--keep-checkpoint", "--force", "--expect", "0=00000000"}, "the fence changed since it was inspected"},
		{"no expect", []string{"--keep-checkpoint", "--force"}, "--yes needs --expect"},
		{"bare expect for two", []string{"--all", "--keep-checkpoint", "--force", "--expect", "00000000"}, "names no partition"},
		{"expect misses one", []string{"--all", "--keep-checkpoint", "--force", "--expect", tok}, "no token for partition 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--reason", "r", "--yes"}
			if !slices.Contains(tc.args, "--all") {
				args = append(args, "--partition", "0")
			}
			_, _, err := runCLI(t, nil, resetArgs(path, addr, append(args, tc.args...)...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: %v, want %q", tc.args, err, tc.want)
			}
		})
	}
	after := sinkFences(t, path)
	for k, v := range before {
		if !after[k].Equal(v) {
			t.Fatalf("a refused reset changed %s: %+v -> %+v", k, v, after[k])
		}
	}
}

// TestFencesResetRecreatedTopic: the topic was deleted and created again.
// The dry run names it; keeping the checkpoint is refused; restarting at
// the new log's start moves the fence onto the new topic ID.
func TestFencesResetRecreatedTopic(t *testing.T) {
	kf, addr := fenceBroker(t)
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx := context.Background()
	oldID := topicIDOf(t, adm, "t")
	path := filepath.Join(t.TempDir(), "fences.db")
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 5, Member: "member-a"}
	if _, err := s.Claim(ctx, tok, sink.Observed{TopicID: oldID, LogStart: 0, LogEnd: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1, 2, 3, 4}}, func(context.Context, *sqlite.Tx, int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := adm.DeleteTopics(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	produceTo(t, kf, "t", 0, 2)
	adm2, err := kadm.NewOptClient(kgo.SeedBrokers(addr)) // no cached metadata of the old topic
	if err != nil {
		t.Fatal(err)
	}
	defer adm2.Close()
	newID := topicIDOf(t, adm2, "t")
	if newID == oldID {
		t.Fatalf("the recreated topic kept its ID %s", oldID)
	}

	out, _, _ := runCLI(t, nil, resetArgs(path, addr, "--partition", "0", "--restart-at", "earliest", "--reason", "r")...)
	for _, want := range []string{"problem:  topic recreated: ", "topic ID " + oldID, "offsets 0 to 2", "checkpoint 5 -> 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	exp := "0=" + expectOf(t, path, 0)
	_, _, err = runCLI(t, nil, resetArgs(path, addr, "--partition", "0", "--keep-checkpoint", "--reason", "r", "--expect", exp, "--yes")...)
	if err == nil || !strings.Contains(err.Error(), "keeping the checkpoint would not resume") {
		t.Fatalf("--keep-checkpoint on a recreated topic: %v", err)
	}
	out, _, err = runCLI(t, nil, resetArgs(path, addr, "--partition", "0", "--restart-at", "earliest", "--reason", "topic recreated (INC-2)", "--expect", exp, "--yes")...)
	if err != nil || !strings.Contains(out, "after:  holder none, checkpoint 0, topic ID "+newID) {
		t.Fatalf("--restart-at earliest: %v\n%s", err, out)
	}
	if f := sinkFences(t, path)[tok.Scope()]; f.TopicID != newID || f.NextOffset != 0 || !f.ProofRequired {
		t.Fatalf("fence after the restart: %+v", f)
	}
}

func topicIDOf(t *testing.T, adm *kadm.Client, topic string) string {
	t.Helper()
	tds, err := adm.ListTopics(context.Background(), topic)
	if err != nil || tds[topic].Err != nil {
		t.Fatalf("topic %s: %v %v", topic, err, tds[topic].Err)
	}
	return topicid.Format(tds[topic].ID)
}

func TestFencesResetAll(t *testing.T) {
	for _, flag := range [][]string{{"--all"}, {"--partition", "-1"}} {
		t.Run(flag[0], func(t *testing.T) {
			path := claimedSink(t)
			_, addr := fenceBroker(t)
			exp := fmt.Sprintf("0=%s,1=%s", expectOf(t, path, 0), expectOf(t, path, 1))
			args := resetArgs(path, addr, append([]string{"--keep-checkpoint", "--force", "--reason", "recreated", "--expect", exp, "--yes"}, flag...)...)
			out, _, err := runCLI(t, nil, args...)
			if err != nil {
				t.Fatalf("reset %v: %v", flag, err)
			}
			if strings.Count(out, "reset g/t/") != 2 {
				t.Fatalf("reset %v output:\n%s", flag, out)
			}
			fs := sinkFences(t, path)
			for p := range int32(2) {
				if f := fs[epochs.Scope{Group: "g", Topic: "t", Partition: p}]; !f.Holder.IsZero() {
					t.Errorf("g/t/%d not reset: %+v", p, f)
				}
			}
			if f := fs[epochs.Scope{Group: "other", Topic: "t", Partition: 0}]; f.Holder.IsZero() {
				t.Errorf("other/t/0 was reset too")
			}
			out, _, err = runCLI(t, nil, "fences", "history", "--sink", "sqlite:"+path, "--group", "g", "--topic", "t", "--partition", "1")
			if err != nil || !strings.Contains(out, "reset") || !strings.Contains(out, "recreated") {
				t.Fatalf("g/t/1 history lacks the audited reset: %v\n%s", err, out)
			}
		})
	}
}

func TestConfirm(t *testing.T) {
	var out strings.Builder
	if !confirm(strings.NewReader("reset 2\n"), &out, 2) || !strings.Contains(out.String(), `type "reset 2"`) {
		t.Fatalf("confirm with the right answer: %q", out.String())
	}
	for _, in := range []string{"yes\n", "reset 1\n", ""} {
		if confirm(strings.NewReader(in), io.Discard, 2) {
			t.Errorf("confirm(%q) = true", in)
		}
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
		{"list bad sink", []string{"fences", "list", "--sink", "mongodb://localhost"}, `unknown sink kind "mongodb"`},
		{"list empty sqlite path", []string{"fences", "list", "--sink", "sqlite:"}, "empty path"},
		{"list missing file", []string{"fences", "list", "--sink", "sqlite:" + missing}, "no such file"},
		{"list bad dsn", []string{"fences", "list", "--sink", "postgres://u:hunter2@host:notaport/db"}, "not a valid PostgreSQL connection string"},
		{"reset no reason", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "0", "--keep-checkpoint", "--yes"}, "--reason is required"},
		{"reset no checkpoint choice", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "0", "--reason", "r"}, "--keep-checkpoint (the epochs went backwards"},
		{"reset both checkpoints", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "0", "--reason", "r", "--keep-checkpoint", "--restart-at", "earliest"}, "exclude each other"},
		{"reset bad restart-at", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "0", "--reason", "r", "--restart-at", "first"}, `--restart-at "first": want earliest, latest or an offset`},
		{"reset bad expect", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "0", "--reason", "r", "--keep-checkpoint", "--expect", "x=1,2=3"}, "want PARTITION=TOKEN"},
		{"reset no partition", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--reason", "r", "--keep-checkpoint", "--yes"}, "--partition is required (or --all"},
		{"reset no group", []string{"fences", "reset", "--sink", spec, "--topic", "t", "--partition", "0", "--reason", "r", "--keep-checkpoint", "--yes"}, "--group is required"},
		{"reset bad partition", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "-2", "--reason", "r", "--keep-checkpoint", "--yes"}, "must be a partition number"},
		{"reset all and partition", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "1", "--all", "--reason", "r", "--keep-checkpoint", "--yes"}, "do not combine"},
		{"reset unknown scope", []string{"fences", "reset", "--sink", spec, "--group", "g", "--topic", "t", "--partition", "9", "--reason", "r", "--keep-checkpoint", "--yes"}, "has no fence for g/t/9"},
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

// TestFencesResetWithoutYesExitCode runs the real binary: a reset without
// --yes exits non-zero, prints the dry run and changes nothing.
func TestFencesResetWithoutYesExitCode(t *testing.T) {
	path := claimedSink(t)
	_, addr := fenceBroker(t)
	p := clitest.Start(t, []string{"fences", "reset", "--brokers", addr, "--group", "g", "--topic", "t", "--all", "--keep-checkpoint", "--force", "--reason", "r"},
		"WORKROUTER_SINK=sqlite:"+path)
	if code := p.Wait(t); code == 0 {
		t.Fatalf("exit code 0 without --yes; stdout:\n%s", p.Stdout)
	}
	if out := p.Stdout.String(); strings.Count(out, "expect:   ") != 2 {
		t.Fatalf("stdout does not show the two fences it would reset:\n%s", out)
	}
	if stderr := p.Stderr.String(); stderr != "workrouter: refusing to reset 2 fences without --yes (nothing changed)\n" {
		t.Fatalf("stderr %q", stderr)
	}
	for scope, f := range sinkFences(t, path) {
		if f.Holder.IsZero() {
			t.Fatalf("%s was reset without --yes", scope)
		}
	}
}
