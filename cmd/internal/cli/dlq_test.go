package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// binaryPayload is the value of the undecodable dead letter: not text.
var binaryPayload = []byte{0x00, 0xff, 0x10, 'x', 0x80}

// deadLetteredSink creates an SQLite sink file holding three dead letters,
// stored the way a worker stores them (claimed, then dead-lettered under
// the holder's token):
//
//	1: g/ledger/0@0  deposit, key acct-1, command ID c1, permanent, a trace header
//	2: g/ledger/0@1  undecodable: no key, no type, a binary payload
//	3: g/ledger/1@0  withdraw, key acct-2, handler_error after 8 attempts
func deadLetteredSink(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "dlq.db")
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := epochs.Token{Group: "g", Topic: "ledger", Partition: 0, Epoch: 3, Member: "m-0"}
	t1 := epochs.Token{Group: "g", Topic: "ledger", Partition: 1, Epoch: 3, Member: "m-1"}
	for _, tok := range []epochs.Token{t0, t1} {
		if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
			t.Fatal(err)
		}
	}
	typ := func(v string) sink.RecordHeader { return sink.RecordHeader{Key: envelope.TypeHeader, Value: []byte(v)} }
	for _, dl := range []struct {
		tok epochs.Token
		rec sink.DeadRecord
	}{
		{t0, sink.DeadRecord{Offset: 0, Key: []byte("acct-1"), Value: []byte(`{"id":"c1","seq":0,"amount":500}`),
			Headers: []sink.RecordHeader{typ("deposit"), {Key: envelope.IDHeader, Value: []byte("c1")}, {Key: "trace", Value: []byte("abc")}}, Timestamp: time.Now(),
			Reason: consumer.ReasonPermanent, Error: "permanent: ledger: malformed command", Attempts: 1}},
		{t0, sink.DeadRecord{Offset: 1, Value: binaryPayload, Timestamp: time.Now(),
			Reason: consumer.ReasonUndecodable, Error: "consumer: undecodable record: no key"}},
		{t1, sink.DeadRecord{Offset: 0, Key: []byte("acct-2"), Value: []byte(`{"id":"c2","seq":0,"amount":7}`),
			Headers: []sink.RecordHeader{typ("withdraw")}, Timestamp: time.Now(),
			Reason: consumer.ReasonHandlerError, Error: "ledger: withdraw \"c2\": database is\nlocked", Attempts: 8}},
	} {
		if _, err := s.DeadLetter(ctx, dl.tok, dl.rec); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// deadLetterState reads dead letter id's state and audit rows from the
// SQLite sink at path.
func deadLetterState(t *testing.T, path string, id int64) (dlq.State, []dlq.Action) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dls, err := s.DeadLetters(ctx, dlq.Filter{IDs: []int64{id}})
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letter %d: %v, %v", id, dls, err)
	}
	audit, err := s.DeadLetterAudit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return dls[0].State, audit
}

// listIDs runs dlq list --json with args and returns the IDs printed.
func listIDs(t *testing.T, path string, args ...string) []int64 {
	t.Helper()
	out, stderr, err := runCLI(t, nil, append([]string{"dlq", "list", "--sink", "sqlite:" + path, "--json"}, args...)...)
	if err != nil {
		t.Fatalf("dlq list %v: %v (stderr %q)", args, err, stderr)
	}
	var rows []dlqJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("dlq list --json does not parse: %v\n%s", err, out)
	}
	ids := []int64{}
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

// TestActorNamesUserAndHost: a dead letter's audit rows name the tool,
// the OS user and the host that ran it.
func TestActorNamesUserAndHost(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		t.Skip("no current user:", err)
	}
	host, _ := os.Hostname()
	if got, want := actor("workrouter dlq drop"), "workrouter dlq drop (by "+u.Username+" on "+host+")"; got != want {
		t.Fatalf("actor = %q, want %q", got, want)
	}
}

func TestDLQList(t *testing.T) {
	path := deadLetteredSink(t)
	out, _, err := runCLI(t, nil, "dlq", "list", "--sink", "sqlite:"+path)
	if err != nil {
		t.Fatalf("dlq list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("dlq list printed %d lines, want a header and 3 rows:\n%s", len(lines), out)
	}
	for i, want := range [][]string{
		{"ID", "SCOPE", "OFFSET", "KEY", "TYPE", "REASON", "ATTEMPTS", "STATE", "AGE", "ERROR"},
		{"1", "g/ledger/0", "acct-1", "deposit", "permanent", "open", "permanent: ledger: malformed command"},
		{"2", "g/ledger/0", "(null)", " - ", "undecodable", "open"},
		{"3", "g/ledger/1", "acct-2", "withdraw", "handler_error", " 8 ", `database is locked`},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}

	for _, tc := range []struct {
		args []string
		want []int64
	}{
		{nil, []int64{1, 2, 3}},
		{[]string{"--partition", "1"}, []int64{3}},
		{[]string{"--partition", "0", "--group", "g", "--topic", "ledger"}, []int64{1, 2}},
		{[]string{"--group", "other"}, []int64{}},
		{[]string{"--type", "deposit"}, []int64{1}},
		{[]string{"--reason", "undecodable"}, []int64{2}},
		{[]string{"--state", "open"}, []int64{1, 2, 3}},
		{[]string{"--state", "dropped,redriven"}, []int64{}},
		{[]string{"--since", "1h"}, []int64{1, 2, 3}},
		{[]string{"--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, []int64{}},
		{[]string{"--limit", "2"}, []int64{1, 2}},
		{[]string{"--limit", "1", "--type", "withdraw"}, []int64{3}},
	} {
		if got := listIDs(t, path, tc.args...); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("dlq list %v: IDs %v, want %v", tc.args, got, tc.want)
		}
	}
	_, stderr, err := runCLI(t, nil, "dlq", "list", "--sink", "sqlite:"+path, "--limit", "2")
	if err != nil || !strings.Contains(stderr, "showing the first 2") {
		t.Errorf("dlq list --limit 2: err %v, stderr %q: want a note that more match", err, stderr)
	}
	out, _, err = runCLI(t, nil, "dlq", "list", "--sink", "sqlite:"+path, "--state", "dropped")
	if err != nil || strings.TrimSpace(out) != "no dead letters" {
		t.Errorf("dlq list --state dropped: %q, %v", out, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "gone"}, `--state "gone"`},
		{[]string{"--since", "yesterday"}, `--since "yesterday"`},
		{[]string{"--partition", "-1"}, "--partition must be 0 or more"},
		{[]string{"--limit", "-1"}, "--limit must be 0"},
	} {
		_, _, err := runCLI(t, nil, append([]string{"dlq", "list", "--sink", "sqlite:" + path}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("dlq list %v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	_, _, err = runCLI(t, nil, "dlq", "list")
	if err == nil || !strings.Contains(err.Error(), "--sink is required") {
		t.Errorf("dlq list without --sink: %v", err)
	}
	_, _, err = runCLI(t, nil, "dlq", "list", "--sink", "sqlite:"+filepath.Join(t.TempDir(), "none.db"))
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("dlq list of a missing file: %v", err)
	}
}

func TestDLQShow(t *testing.T) {
	path := deadLetteredSink(t)
	out, _, err := runCLI(t, nil, "dlq", "show", "1", "--sink", "sqlite:"+path)
	if err != nil {
		t.Fatalf("dlq show 1: %v", err)
	}
	for _, want := range []string{"dead letter 1", "scope:", "g/ledger/0", "offset:", "topic id:", "key:", "acct-1",
		"type:", "deposit", "reason:", "permanent", "error:", "attempts:", "token:", "epoch 3, member m-0",
		"record time:", "stored at:", "state:", "open", "mirrored:", "no", "headers:", "workrouter-type: deposit", "trace: abc",
		"payload (32 bytes, text):", `{"id":"c1","seq":0,"amount":500}`, "audit: none"} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq show 1 lacks %q:\n%s", want, out)
		}
	}

	out, _, err = runCLI(t, nil, "dlq", "show", "2", "--sink", "sqlite:"+path)
	if err != nil {
		t.Fatalf("dlq show 2: %v", err)
	}
	for _, want := range []string{"key:", "(null)", "type:", "(none)", "headers: none", "payload (5 bytes, not text", "00 ff 10 78 80"} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq show 2 lacks %q:\n%s", want, out)
		}
	}
	raw, _, err := runCLI(t, nil, "dlq", "show", "2", "--sink", "sqlite:"+path, "--raw")
	if err != nil || !bytes.Equal([]byte(raw), binaryPayload) {
		t.Errorf("dlq show 2 --raw wrote %q (%v), want the payload's bytes %q", raw, err, binaryPayload)
	}
	out, _, err = runCLI(t, nil, "dlq", "show", "2", "--sink", "sqlite:"+path, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var j dlqJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("--json does not parse: %v\n%s", err, out)
	}
	if j.ID != 2 || j.Key != nil || j.Payload == nil || j.Payload.Base64 == nil || *j.Payload.Base64 != "AP8QeIA=" || j.Reason != consumer.ReasonUndecodable {
		t.Errorf("dlq show 2 --json = %s", out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"99"}, "dead letter 99 does not exist"},
		{[]string{"x"}, `dead letter ID "x"`},
		{[]string{"1", "--raw", "--json"}, "exclude each other"},
	} {
		_, _, err := runCLI(t, nil, append([]string{"dlq", "show", "--sink", "sqlite:" + path}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("dlq show %v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}

func TestDLQDrop(t *testing.T) {
	path := deadLetteredSink(t)
	spec := "sqlite:" + path
	out, _, err := runCLI(t, nil, "dlq", "drop", "2", "--sink", spec, "--reason", "a stray test record")
	if err == nil || !strings.Contains(err.Error(), "without --yes (nothing changed)") {
		t.Fatalf("drop without --yes: %v, want a refusal", err)
	}
	if !strings.Contains(out, "would drop dead letter 2 (g/ledger/0 offset 1, key (null), undecodable): open -> dropped") {
		t.Errorf("drop without --yes did not say what it would do:\n%s", out)
	}
	if st, audit := deadLetterState(t, path, 2); st != dlq.Open || len(audit) != 0 {
		t.Fatalf("after a refused drop: state %s, audit %v", st, audit)
	}
	if _, _, err := runCLI(t, nil, "dlq", "drop", "2", "--sink", spec, "--yes"); err == nil || !strings.Contains(err.Error(), "--reason is required") {
		t.Fatalf("drop without --reason: %v", err)
	}

	out, _, err = runCLI(t, nil, "dlq", "drop", "2", "--sink", spec, "--reason", "a stray test record", "--yes")
	if err != nil || !strings.Contains(out, "dropped dead letter 2") {
		t.Fatalf("drop --yes: %v\n%s", err, out)
	}
	st, audit := deadLetterState(t, path, 2)
	if st != dlq.Dropped || len(audit) != 1 || audit[0].From != dlq.Open || audit[0].To != dlq.Dropped ||
		audit[0].Reason != "a stray test record" || audit[0].Detail != actor("workrouter dlq drop") {
		t.Fatalf("after drop: state %s, audit %+v", st, audit)
	}
	out, _, _ = runCLI(t, nil, "dlq", "show", "2", "--sink", spec)
	if !strings.Contains(out, `open -> dropped  reason "a stray test record"`) {
		t.Errorf("dlq show does not list the audit row:\n%s", out)
	}

	for _, args := range [][]string{
		{"drop", "2", "--reason", "again", "--yes"},
		{"redrive", "2", "--reason", "again", "--yes", "--brokers", clitest.FreeAddr(t)},
	} {
		_, _, err := runCLI(t, nil, append([]string{"dlq", args[0], "--sink", spec}, args[1:]...)...)
		if !errors.Is(err, dlq.ErrState) || !strings.Contains(err.Error(), "it was dropped") {
			t.Errorf("dlq %v of a dropped dead letter: %v, want a refusal", args, err)
		}
	}
	_, _, err = runCLI(t, nil, "dlq", "drop", "42", "--sink", spec, "--reason", "x", "--yes")
	if !errors.Is(err, sink.ErrNotFound) || !strings.Contains(err.Error(), "dead letter 42 does not exist") {
		t.Errorf("drop of an unknown id: %v", err)
	}
	if st, audit := deadLetterState(t, path, 2); st != dlq.Dropped || len(audit) != 1 {
		t.Fatalf("the refused commands changed dead letter 2: state %s, audit %v", st, audit)
	}
}

// TestDLQRedrive: redrive produces the dead letter's command again, as a
// new command with the same key, type, payload, user headers and command
// ID plus workrouter-redrive-of and workrouter-redrive-for naming the dead
// letter's group (and says so), and moves it open → redriving → redriven with
// audit rows; a second redrive, a redrive without --yes, of an unknown ID
// or of a record that is not a command are refused with nothing sent.
func TestDLQRedrive(t *testing.T) {
	path := deadLetteredSink(t)
	spec := "sqlite:" + path
	addr := clitest.StartBroker(t, map[string]int32{"ledger": 4})
	redrive := func(args ...string) (string, error) {
		out, _, err := runCLI(t, nil, append([]string{"dlq", "redrive", "--sink", spec, "--brokers", addr}, args...)...)
		return out, err
	}

	out, err := redrive("1", "--reason", "handler fixed")
	if err == nil || !strings.Contains(err.Error(), "without --yes (nothing changed, nothing sent)") {
		t.Fatalf("redrive without --yes: %v", err)
	}
	if !strings.Contains(out, "would redrive dead letter 1 (g/ledger/0 offset 0, permanent): produce a new deposit command with key acct-1") ||
		!strings.Contains(out, "command ID c1") || !strings.Contains(out, "workrouter-redrive-for: g (only group g applies it; the topic's other groups skip it)") {
		t.Errorf("redrive without --yes did not say what it would do:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"2", "--reason", "x", "--yes"}, "not a workrouter command"},
		{[]string{"77", "--reason", "x", "--yes"}, "dead letter 77 does not exist"},
		{[]string{"1", "--yes"}, "--reason is required"},
	} {
		if _, err := redrive(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("redrive %v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	if _, err := redrive("2", "--reason", "x", "--yes"); err == nil || !strings.Contains(err.Error(), "workrouter dlq drop 2") {
		t.Errorf("redrive of an undecodable record does not suggest drop: %v", err)
	}
	if n := clitest.EndOffsetSum(t, addr, "ledger"); n != 0 {
		t.Fatalf("the refused redrives sent %d records", n)
	}
	if st, audit := deadLetterState(t, path, 1); st != dlq.Open || len(audit) != 0 {
		t.Fatalf("the refused redrives changed dead letter 1: state %s, audit %v", st, audit)
	}

	out, err = redrive("1", "--reason", "handler fixed", "--yes")
	if err != nil {
		t.Fatalf("redrive --yes: %v", err)
	}
	p := envelope.Partition([]byte("acct-1"), 4)
	if want := fmt.Sprintf("redrove dead letter 1: produced to ledger partition %d offset 0 as a new deposit command with ID c1, for group g only "+
		"(headers workrouter-redrive-of: 1, workrouter-redrive-for: g)", p); !strings.Contains(out, want) {
		t.Errorf("redrive printed %q, want %q", out, want)
	}
	recs := readAll(t, addr, "ledger", 1)
	if len(recs) != 1 || recs[0].Partition != p {
		t.Fatalf("read %d records (%v), want one on partition %d", len(recs), recs, p)
	}
	c, err := envelope.Decode(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Key) != "acct-1" || c.Type != "deposit" || string(c.Payload) != `{"id":"c1","seq":0,"amount":500}` ||
		len(c.Headers) != 1 || c.Headers[0].Key != "trace" || string(c.Headers[0].Value) != "abc" || c.ID != "c1" || c.RedriveFor != "g" {
		t.Errorf("the redriven record decodes to %+v", c)
	}
	var of []string
	for _, h := range recs[0].Headers {
		if h.Key == envelope.RedriveOfHeader {
			of = append(of, string(h.Value))
		}
	}
	if len(of) != 1 || of[0] != "1" {
		t.Errorf("the redriven record's %s headers are %v, want [1]", envelope.RedriveOfHeader, of)
	}
	st, audit := deadLetterState(t, path, 1)
	if st != dlq.Redriven || len(audit) != 2 ||
		audit[0].From != dlq.Open || audit[0].To != dlq.Redriving || audit[0].Reason != "handler fixed" ||
		audit[0].Detail != actor("workrouter dlq redrive")+": producing it again to topic ledger" ||
		audit[1].From != dlq.Redriving || audit[1].To != dlq.Redriven ||
		audit[1].Detail != fmt.Sprintf("produced to ledger partition %d offset 0", p) {
		t.Fatalf("after the redrive: state %s, audit %+v", st, audit)
	}

	_, err = redrive("1", "--reason", "again", "--yes")
	if !errors.Is(err, dlq.ErrState) || !strings.Contains(err.Error(), "redriven at most once") || !strings.Contains(err.Error(), "nothing sent") {
		t.Fatalf("a second redrive: %v, want a refusal", err)
	}
	if n := clitest.EndOffsetSum(t, addr, "ledger"); n != 1 {
		t.Fatalf("the topic holds %d records after the second redrive, want 1", n)
	}
	if st, audit := deadLetterState(t, path, 1); st != dlq.Redriven || len(audit) != 2 {
		t.Fatalf("the second redrive changed dead letter 1: state %s, audit %v", st, audit)
	}
}

// TestDLQRedriveNewID (issue 41): `dlq redrive --new-id` produces the
// dead letter's command with a new command ID, for a dead letter whose
// cause a service recorded under the original one (a fencehttp service
// replays its 4xx to the same ID), and both audit rows say so; the dry run
// says it too.
func TestDLQRedriveNewID(t *testing.T) {
	path := deadLetteredSink(t)
	spec := "sqlite:" + path
	addr := clitest.StartBroker(t, map[string]int32{"ledger": 4})
	args := []string{"dlq", "redrive", "1", "--sink", spec, "--brokers", addr, "--reason", "the payee exists now", "--new-id"}
	out, _, err := runCLI(t, nil, args...)
	if err == nil || !strings.Contains(out, "a new command ID (--new-id), not command ID c1") {
		t.Fatalf("the dry run of --new-id: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, nil, append(args, "--yes")...)
	if err != nil {
		t.Fatalf("redrive --new-id --yes: %v", err)
	}
	recs := readAll(t, addr, "ledger", 1)
	if len(recs) != 1 {
		t.Fatalf("read %d records, want 1", len(recs))
	}
	c, err := envelope.Decode(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	if c.ID == "" || c.ID == "c1" || c.Type != "deposit" || string(c.Key) != "acct-1" || c.RedriveFor != "g" {
		t.Fatalf("the redriven record decodes to %+v, want the deposit with a new command ID", c)
	}
	if !strings.Contains(out, "with ID "+c.ID) {
		t.Errorf("redrive printed %q, want the new ID %s", out, c.ID)
	}
	st, audit := deadLetterState(t, path, 1)
	if st != dlq.Redriven || len(audit) != 2 ||
		audit[0].Detail != actor("workrouter dlq redrive")+`: producing it again to topic ledger as a new command: a new command ID, not "c1"` ||
		!strings.HasSuffix(audit[1].Detail, fmt.Sprintf(` with the new command ID %q (was "c1")`, c.ID)) {
		t.Fatalf("after the redrive: state %s, audit %+v", st, audit)
	}
}

// TestDLQRedriveProduceFails: the broker refuses the produce; the dead
// letter goes back to open with an audit row saying so, and a later
// redrive succeeds.
func TestDLQRedriveProduceFails(t *testing.T) {
	path := deadLetteredSink(t)
	spec := "sqlite:" + path
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{"ledger": 4}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var refused atomic.Int32
	b.Cluster().ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		refused.Add(1)
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range pr.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.InvalidRecord.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	_, _, err = runCLI(t, nil, "dlq", "redrive", "3", "--sink", spec, "--brokers", b.Addr(), "--reason", "retry it", "--yes", "--timeout", "10s")
	if err == nil || !strings.Contains(err.Error(), "producing failed") || !strings.Contains(err.Error(), "open again") {
		t.Fatalf("redrive against a refusing broker: %v", err)
	}
	if n := refused.Load(); n != 1 {
		t.Fatalf("the broker refused %d produce requests, want 1: the fault did not happen as planned", n)
	}
	st, audit := deadLetterState(t, path, 3)
	if st != dlq.Open || len(audit) != 2 || audit[1].From != dlq.Redriving || audit[1].To != dlq.Open ||
		!strings.Contains(audit[1].Detail, "the redrive failed") {
		t.Fatalf("after the failed redrive: state %s, audit %+v", st, audit)
	}
	out, _, err := runCLI(t, nil, "dlq", "redrive", "3", "--sink", spec, "--brokers", b.Addr(), "--reason", "retry it", "--yes")
	if err != nil || !strings.Contains(out, "redrove dead letter 3") {
		t.Fatalf("redrive after the broker accepts again: %v\n%s", err, out)
	}
	if st, audit := deadLetterState(t, path, 3); st != dlq.Redriven || len(audit) != 4 {
		t.Fatalf("after the second redrive: state %s, audit %+v", st, audit)
	}
}

// noDeadLetters is an admin sink without the dead-letter capability.
type noDeadLetters struct{ adminSink }

func TestDLQNeedsTheCapability(t *testing.T) {
	if _, ok := deadLetterStoreOf(noDeadLetters{}); ok {
		t.Fatal("a sink without DeadLetterStore was taken for one")
	}
	path := deadLetteredSink(t)
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := deadLetterStoreOf(s); !ok {
		t.Fatal("the SQLite sink's dead-letter store was not found")
	}
}

// TestDLQErrorsRendered: each error admin's dead-letter operations return
// is rendered with what was (not) done, the CLI's hints, and its cause
// still matchable, for the failures the end-to-end tests cannot cause (a
// sink failing mid-redrive, a lost race).
func TestDLQErrorsRendered(t *testing.T) {
	spec := sinkSpec{kind: "sqlite", path: "dlq.db"}
	down, refused := errors.New("sink down"), errors.New("broker refused")
	for _, tc := range []struct {
		name  string
		err   error
		is    []error
		wants []string
	}{
		{"produced, not marked", &admin.RedriveError{ID: 7, Produced: true, Result: router.Result{Partition: 2, Offset: 9}, Topic: "ledger",
			State: dlq.Redriving, Err: down}, []error{down},
			[]string{"dead letter 7 was produced to ledger partition 2 offset 9, but marking it redriven failed: sink down (it stays redriving)"}},
		{"not produced, not reverted", &admin.RedriveError{ID: 7, Topic: "ledger", State: dlq.Redriving, Err: refused, RevertErr: down},
			[]error{refused}, []string{"producing failed (broker refused), and moving it back to open failed too (sink down): it stays redriving",
				"check the topic for a record with header workrouter-redrive-of: 7"}},
		{"not produced, reverted", &admin.RedriveError{ID: 7, Topic: "ledger", State: dlq.Open, Err: refused}, []error{refused},
			[]string{"redriving dead letter 7: producing failed: broker refused (it is open again, with an audit row saying so)"}},
		{"lost race", &admin.ChangedFirstError{Op: "admin.Redrive", ID: 7, Err: fmt.Errorf("sqlite: %w", dlq.ErrState)},
			[]error{dlq.ErrState}, []string{"cannot redrive dead letter 7: another redrive or drop changed it first: sqlite: ", "(nothing sent)"}},
		{"redriving", &admin.NotOpenError{Op: "admin.Redrive", ID: 7, State: dlq.Redriving}, []error{dlq.ErrState},
			[]string{"cannot redrive dead letter 7", "it is redriving, not open", "see its audit rows: workrouter dlq show 7", "(nothing changed, nothing sent)"}},
		{"not found", fmt.Errorf("admin: dead letter 7: %w", sink.ErrNotFound), []error{sink.ErrNotFound},
			[]string{"dead letter 7 does not exist in sink sqlite:dlq.db", "(nothing sent)"}},
		{"other", fmt.Errorf("admin.Redrive: marking dead letter 7 redriving: %w", down), []error{down},
			[]string{"marking dead letter 7 redriving: sink down (nothing sent)"}},
	} {
		err := redriveError(tc.err, spec, 7)
		for _, is := range tc.is {
			if !errors.Is(err, is) {
				t.Errorf("%s: %v does not match %v", tc.name, err, is)
			}
		}
		for _, w := range tc.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.name, err, w)
			}
		}
	}
	err := decisionError(&admin.ChangedFirstError{Op: "admin.Drop", ID: 8, Err: dlq.ErrState}, spec, 8, "drop", "")
	if !errors.Is(err, dlq.ErrState) || !strings.HasPrefix(err.Error(), "cannot drop dead letter 8: another redrive or drop changed it first") ||
		strings.HasSuffix(err.Error(), ")") {
		t.Errorf("a drop that lost the race: %v", err)
	}
	for field, want := range map[string]string{"Reason": `--reason "x": want`, "States": `--state "x": want`,
		"Partition": "--partition must be 0 or more, got -1", "Limit": "--limit must be 0 (all) or more, got -1"} {
		q := admin.DeadLetterQuery{}
		m1 := int32(-1)
		switch field {
		case "Reason":
			q.Reason = "x"
		case "States":
			q.States = []dlq.State{"x"}
		case "Partition":
			q.Partition = &m1
		case "Limit":
			q.Limit = -1
		}
		if err := queryFlagError(q.Validate()); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("query with a bad %s: %v, want %q", field, err, want)
		}
	}
}

// TestDLQRedriveByFilter: dlq redrive without an ID redrives the open dead
// letters its filters select: a dry run lists them (and the one that is
// not a command) and changes nothing; --yes produces each, oldest first,
// with its audit rows, leaves the not-command open and exits non-zero for
// it. Filters with an ID, and no ID without filters, are refused.
func TestDLQRedriveByFilter(t *testing.T) {
	path := deadLetteredSink(t)
	spec := "sqlite:" + path
	addr := clitest.StartBroker(t, map[string]int32{"ledger": 4})
	base := []string{"dlq", "redrive", "--sink", spec, "--brokers", addr, "--reason", "INC-88 fixed"}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "redrive", "--sink", spec, "--reason", "x"}, "needs a dead letter's ID, or filters"},
		{[]string{"dlq", "redrive", "1", "--sink", spec, "--reason", "x", "--topic", "ledger"}, "give a dead letter's ID or filters, not both: --topic"},
		{[]string{"dlq", "redrive", "--sink", spec, "--reason", "x", "--all", "--type", "deposit"}, "--all selects every open dead letter: give it without --type"},
		{[]string{"dlq", "redrive", "--sink", spec, "--all"}, "--reason is required"},
		{[]string{"dlq", "redrive", "--sink", spec, "--reason", "x", "--dead-letter-reason", "flaky"}, "--dead-letter-reason \"flaky\": want"},
	} {
		if _, _, err := runCLI(t, nil, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}

	// By reason: dead letter 3 only; a dry run.
	out, _, err := runCLI(t, nil, append(base, "--dead-letter-reason", "handler_error")...)
	if err == nil || !strings.Contains(err.Error(), "refusing to redrive 1 dead letter without --yes") ||
		!strings.Contains(out, "would redrive dead letter 3 ") || strings.Contains(out, "dead letter 1 ") {
		t.Fatalf("the dry run by reason: %v\n%s", err, out)
	}
	for id := int64(1); id <= 3; id++ {
		if st, audit := deadLetterState(t, path, id); st != dlq.Open || len(audit) != 0 {
			t.Fatalf("the dry run changed dead letter %d: %s %+v", id, st, audit)
		}
	}

	// Everything on the topic.
	out, _, err = runCLI(t, nil, append(base, "--topic", "ledger")...)
	if err == nil || !strings.Contains(out, "would redrive dead letter 1 ") || !strings.Contains(out, "would redrive dead letter 3 ") ||
		!strings.Contains(out, "cannot redrive dead letter 2: its record is not a workrouter command") ||
		!strings.Contains(err.Error(), "refusing to redrive 2 dead letters without --yes; 1 dead letter left open (not commands)") {
		t.Fatalf("the dry run by topic: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, nil, append(base, "--topic", "ledger", "--yes")...)
	if err == nil || !strings.Contains(err.Error(), "1 dead letter of the 3 selected not redriven") ||
		!strings.Contains(out, "redrove 2 dead letters; 1 dead letter left open (not commands)") {
		t.Fatalf("redrive by topic --yes: %v\n%s", err, out)
	}
	if i, j := strings.Index(out, "redrove dead letter 1:"), strings.Index(out, "redrove dead letter 3:"); i < 0 || j < i {
		t.Fatalf("want dead letters 1 then 3 redriven, oldest first:\n%s", out)
	}
	for id, want := range map[int64]dlq.State{1: dlq.Redriven, 2: dlq.Open, 3: dlq.Redriven} {
		st, audit := deadLetterState(t, path, id)
		if st != want || (want == dlq.Redriven && (len(audit) != 2 || audit[0].Reason != "INC-88 fixed" ||
			!strings.HasPrefix(audit[0].Detail, actor("workrouter dlq redrive")))) {
			t.Fatalf("dead letter %d: %s %+v, want %s with its audit rows", id, st, audit, want)
		}
	}
	var types []string
	for _, r := range readAll(t, addr, "ledger", 2) {
		c, err := envelope.Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, c.Type)
	}
	slices.Sort(types)
	if !slices.Equal(types, []string{"deposit", "withdraw"}) {
		t.Fatalf("produced %v, want the deposit and the withdraw", types)
	}

	// Nothing left to redrive but the not-command.
	out, _, err = runCLI(t, nil, append(base, "--all", "--yes")...)
	if err == nil || !strings.Contains(out, "no open dead letter to redrive matches; 1 dead letter left open") {
		t.Fatalf("redrive --all after: %v\n%s", err, out)
	}
}
