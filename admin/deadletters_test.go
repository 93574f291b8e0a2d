package admin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/memory"
)

// *router.Router is what Redrive produces through.
var _ admin.Producer = (*router.Router)(nil)

// The memory sink is a store Redrive and Drop can use.
var _ admin.DeadLetterResolver = (*memory.Sink)(nil)

// deadLettered returns a memory sink holding three dead letters, stored
// as a worker stores them (claimed, then dead-lettered under the holder's
// token):
//
//	1: g/ledger/0@0  deposit, key acct-1, ID c1, permanent, a trace header
//	2: g/ledger/0@1  undecodable: no key, no type
//	3: g/ledger/1@0  withdraw, key acct-2, no ID, handler_error after 8 attempts
func deadLettered(t *testing.T) *memory.Sink {
	t.Helper()
	ctx := context.Background()
	s := memory.New()
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
		{t0, sink.DeadRecord{Offset: 0, Key: []byte("acct-1"), Value: []byte(`{"amount":500}`),
			Headers: []sink.RecordHeader{typ("deposit"), {Key: envelope.IDHeader, Value: []byte("c1")}, {Key: "trace", Value: []byte("abc")}}, Timestamp: time.Now(),
			Reason: consumer.ReasonPermanent, Error: "permanent: malformed", Attempts: 1}},
		{t0, sink.DeadRecord{Offset: 1, Value: []byte{0, 0xff}, Timestamp: time.Now(),
			Reason: consumer.ReasonUndecodable, Error: "consumer: undecodable record: no key"}},
		{t1, sink.DeadRecord{Offset: 0, Key: []byte("acct-2"), Value: []byte(`{"amount":7}`),
			Headers: []sink.RecordHeader{typ("withdraw")}, Timestamp: time.Now(),
			Reason: consumer.ReasonHandlerError, Error: "database is locked", Attempts: 8}},
	} {
		if _, err := s.DeadLetter(ctx, dl.tok, dl.rec); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// fakeProducer records the commands it is asked to produce and fails with
// err if it is set.
type fakeProducer struct {
	err   error
	calls []produced
}

type produced struct {
	cmd router.Command
	o   router.RedriveOptions
}

func (p *fakeProducer) Redrive(ctx context.Context, cmd router.Command, o router.RedriveOptions) (router.Result, error) {
	p.calls = append(p.calls, produced{cmd, o})
	if p.err != nil {
		return router.Result{}, p.err
	}
	id := cmd.ID
	if id == "" {
		id = fmt.Sprintf("generated-%d", len(p.calls)) // as the router generates one
	}
	return router.Result{Partition: 2, Offset: int64(40 + len(p.calls)), ID: id}, nil
}

// faultyStore fails the ResolveDeadLetter moves to the states in fail,
// and runs before (if set) before the first move.
type faultyStore struct {
	*memory.Sink
	fail   map[dlq.State]error
	before func()
	failed int
}

func (s *faultyStore) ResolveDeadLetter(ctx context.Context, id int64, from, to dlq.State, reason, detail string) (dlq.Letter, error) {
	if s.before != nil {
		b := s.before
		s.before = nil
		b()
	}
	if err := s.fail[to]; err != nil {
		s.failed++
		return dlq.Letter{}, err
	}
	return s.Sink.ResolveDeadLetter(ctx, id, from, to, reason, detail)
}

// stateOf reads dead letter id's state and audit rows.
func stateOf(t *testing.T, s *memory.Sink, id int64) (dlq.State, []dlq.Action) {
	t.Helper()
	ctx := context.Background()
	d, err := admin.DeadLetter(ctx, s, id)
	if err != nil {
		t.Fatal(err)
	}
	audit, err := admin.DeadLetterAudit(ctx, s, id)
	if err != nil {
		t.Fatal(err)
	}
	return d.State, audit
}

// TestRedrive: Redrive produces the dead letter's command again (key,
// type, payload, user headers, its original ID, the dead letter it comes
// from and the group it is for) and
// moves it open → redriving → redriven with two audit rows; a second
// redrive is refused with nothing produced.
func TestRedrive(t *testing.T) {
	ctx := context.Background()
	s := deadLettered(t)
	p := &fakeProducer{}

	plan, err := admin.PlanRedrive(ctx, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	if plan.DeadLetter.ID != 1 || plan.Command.Type != "deposit" || string(plan.Command.Key) != "acct-1" {
		t.Fatalf("PlanRedrive(1) = %+v", plan)
	}
	if st, audit := stateOf(t, s, 1); st != dlq.Open || len(audit) != 0 || len(p.calls) != 0 {
		t.Fatalf("PlanRedrive changed something: state %s, audit %v, %d produced", st, audit, len(p.calls))
	}

	res, err := admin.Redrive(ctx, s, p, 1, admin.RedriveOptions{Reason: "handler fixed", Actor: "test"})
	if err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	if len(p.calls) != 1 {
		t.Fatalf("Redrive produced %d commands, want 1", len(p.calls))
	}
	c := p.calls[0]
	if c.o != (router.RedriveOptions{DeadLetter: "1", Group: "g"}) || string(c.cmd.Key) != "acct-1" || c.cmd.Type != "deposit" ||
		string(c.cmd.Payload) != `{"amount":500}` || c.cmd.ID != "c1" ||
		len(c.cmd.Headers) != 1 || c.cmd.Headers[0].Key != "trace" || string(c.cmd.Headers[0].Value) != "abc" {
		t.Errorf("Redrive produced %+v with %+v", c.cmd, c.o)
	}
	if res.DeadLetter.State != dlq.Redriven || res.Result != (router.Result{Partition: 2, Offset: 41, ID: "c1"}) ||
		res.Detail != "produced to ledger partition 2 offset 41" || res.Command.Type != "deposit" {
		t.Errorf("Redrive returned %+v", res)
	}
	st, audit := stateOf(t, s, 1)
	if st != dlq.Redriven || len(audit) != 2 ||
		audit[0].From != dlq.Open || audit[0].To != dlq.Redriving || audit[0].Reason != "handler fixed" ||
		audit[0].Detail != "test: producing it again to topic ledger" ||
		audit[1].From != dlq.Redriving || audit[1].To != dlq.Redriven || audit[1].Reason != "handler fixed" ||
		audit[1].Detail != "produced to ledger partition 2 offset 41" {
		t.Fatalf("after the redrive: state %s, audit %+v", st, audit)
	}

	_, err = admin.Redrive(ctx, s, p, 1, admin.RedriveOptions{Reason: "again"})
	var no *admin.NotOpenError
	if !errors.As(err, &no) || no.State != dlq.Redriven || no.ID != 1 || no.Op != "admin.Redrive" ||
		!errors.Is(err, admin.ErrNotOpen) || !errors.Is(err, dlq.ErrState) || !strings.Contains(err.Error(), "redriven at most once") {
		t.Fatalf("a second redrive: %v, want a *NotOpenError in state redriven", err)
	}
	if _, err := admin.PlanRedrive(ctx, s, 1); !errors.Is(err, admin.ErrNotOpen) {
		t.Errorf("PlanRedrive of a redriven dead letter: %v", err)
	}
	if len(p.calls) != 1 {
		t.Fatalf("the second redrive produced: %d commands in all", len(p.calls))
	}
	if st, audit := stateOf(t, s, 1); st != dlq.Redriven || len(audit) != 2 {
		t.Fatalf("the second redrive changed dead letter 1: state %s, audit %v", st, audit)
	}
}

// TestRedriveNewID: a redrive with NewID (a dead letter whose cause is an
// outcome a service recorded under the command's idempotency key, such as
// a fencehttp service's 4xx) produces the command without its original ID,
// so that the producer gives it a new one, and both audit rows say so:
// the first names the ID not reused, the second the new one. Without
// NewID the original ID is produced (TestRedrive).
func TestRedriveNewID(t *testing.T) {
	ctx := context.Background()
	s := deadLettered(t)
	p := &fakeProducer{}
	res, err := admin.Redrive(ctx, s, p, 1, admin.RedriveOptions{Reason: "the payee exists now", Actor: "test", NewID: true})
	if err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	if len(p.calls) != 1 || p.calls[0].cmd.ID != "" || string(p.calls[0].cmd.Key) != "acct-1" || p.calls[0].cmd.Type != "deposit" {
		t.Fatalf("Redrive with NewID produced %+v, want the command without its ID c1", p.calls)
	}
	if res.Result.ID != "generated-1" {
		t.Errorf("Redrive returned ID %q, want the producer's generated-1", res.Result.ID)
	}
	st, audit := stateOf(t, s, 1)
	if st != dlq.Redriven || len(audit) != 2 ||
		audit[0].Detail != `test: producing it again to topic ledger as a new command: a new command ID, not "c1"` ||
		audit[1].Detail != `produced to ledger partition 2 offset 41 with the new command ID "generated-1" (was "c1")` {
		t.Fatalf("after the redrive as a new command: state %s, audit %+v", st, audit)
	}
}

// TestRedriveProduceFails: producing fails; the dead letter goes back to
// open with an audit row saying so, the error is a *RedriveError that
// says so, and a later redrive succeeds.
func TestRedriveProduceFails(t *testing.T) {
	ctx := context.Background()
	s := deadLettered(t)
	refused := errors.New("broker: INVALID_RECORD")
	p := &fakeProducer{err: refused}
	_, err := admin.Redrive(ctx, s, p, 3, admin.RedriveOptions{Reason: "retry it"})
	var re *admin.RedriveError
	if !errors.As(err, &re) || re.Produced || re.State != dlq.Open || re.RevertErr != nil || re.ID != 3 || re.Topic != "ledger" ||
		!errors.Is(err, refused) || !strings.Contains(err.Error(), "open again") {
		t.Fatalf("Redrive through a refusing producer: %v (%+v)", err, re)
	}
	if len(p.calls) != 1 {
		t.Fatalf("the producer was asked %d times, want 1: the fault did not happen as planned", len(p.calls))
	}
	st, audit := stateOf(t, s, 3)
	if st != dlq.Open || len(audit) != 2 || audit[1].From != dlq.Redriving || audit[1].To != dlq.Open ||
		audit[1].Detail != "the redrive failed, back to open: broker: INVALID_RECORD" || audit[1].Reason != "retry it" {
		t.Fatalf("after the failed redrive: state %s, audit %+v", st, audit)
	}
	p.err = nil
	if _, err := admin.Redrive(ctx, s, p, 3, admin.RedriveOptions{Reason: "retry it"}); err != nil {
		t.Fatalf("redrive once the producer accepts: %v", err)
	}
	if st, audit := stateOf(t, s, 3); st != dlq.Redriven || len(audit) != 4 {
		t.Fatalf("after the second redrive: state %s, audit %+v", st, audit)
	}
}

// TestRedriveProduceAndRevertFail: producing fails and so does moving the
// dead letter back to open: it stays redriving, and the error says both.
func TestRedriveProduceAndRevertFail(t *testing.T) {
	ctx := context.Background()
	s := deadLettered(t)
	refused, down := errors.New("broker refused"), errors.New("sink down")
	fs := &faultyStore{Sink: s, fail: map[dlq.State]error{dlq.Open: down}}
	_, err := admin.Redrive(ctx, fs, &fakeProducer{err: refused}, 1, admin.RedriveOptions{Reason: "r"})
	var re *admin.RedriveError
	if !errors.As(err, &re) || re.Produced || re.State != dlq.Redriving || !errors.Is(err, refused) || !errors.Is(err, down) {
		t.Fatalf("Redrive: %v, want a *RedriveError left redriving", err)
	}
	if fs.failed != 1 {
		t.Fatalf("the move back to open failed %d times, want 1: the fault did not happen as planned", fs.failed)
	}
	if st, audit := stateOf(t, s, 1); st != dlq.Redriving || len(audit) != 1 {
		t.Fatalf("after the failed revert: state %s, audit %+v", st, audit)
	}
}

// TestRedriveProducedButNotMarked: the command is produced, then the move
// to redriven fails, as when the process dies between the two: the dead
// letter stays redriving, and neither a redrive nor a drop touches it
// again (nothing is produced twice).
func TestRedriveProducedButNotMarked(t *testing.T) {
	ctx := context.Background()
	s := deadLettered(t)
	down := errors.New("sink down")
	fs := &faultyStore{Sink: s, fail: map[dlq.State]error{dlq.Redriven: down}}
	p := &fakeProducer{}
	_, err := admin.Redrive(ctx, fs, p, 1, admin.RedriveOptions{Reason: "r"})
	var re *admin.RedriveError
	if !errors.As(err, &re) || !re.Produced || re.Result != (router.Result{Partition: 2, Offset: 41, ID: "c1"}) || re.State != dlq.Redriving ||
		!errors.Is(err, down) || !strings.Contains(err.Error(), "stays redriving") {
		t.Fatalf("Redrive: %v, want a *RedriveError, produced, left redriving", err)
	}
	if fs.failed != 1 || len(p.calls) != 1 {
		t.Fatalf("failed moves %d, produced %d: want 1 and 1 (the fault did not happen as planned)", fs.failed, len(p.calls))
	}
	st, audit := stateOf(t, s, 1)
	if st != dlq.Redriving || len(audit) != 1 || audit[0].To != dlq.Redriving {
		t.Fatalf("after the produce: state %s, audit %+v", st, audit)
	}
	fs.fail = nil
	_, err = admin.Redrive(ctx, fs, p, 1, admin.RedriveOptions{Reason: "again"})
	var no *admin.NotOpenError
	if !errors.As(err, &no) || no.State != dlq.Redriving || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("a redrive of a redriving dead letter: %v, want a *NotOpenError", err)
	}
	if _, err := admin.Drop(ctx, fs, 1, admin.DropOptions{Reason: "give up"}); !errors.As(err, &no) || no.Op != "admin.Drop" {
		t.Fatalf("a drop of a redriving dead letter: %v, want a *NotOpenError", err)
	}
	if len(p.calls) != 1 {
		t.Fatalf("the command was produced %d times, want once", len(p.calls))
	}
	if st, audit := stateOf(t, s, 1); st != dlq.Redriving || len(audit) != 1 {
		t.Fatalf("the refused redrive or drop changed it: state %s, audit %+v", st, audit)
	}
}

// TestRedriveRefusals: an unknown ID, an empty reason, a record that is
// not a command and a lost race are refused, with nothing changed or
// produced.
func TestRedriveRefusals(t *testing.T) {
	ctx := context.Background()
	s := deadLettered(t)
	p := &fakeProducer{}
	if _, err := admin.Redrive(ctx, s, p, 77, admin.RedriveOptions{Reason: "x"}); !errors.Is(err, sink.ErrNotFound) {
		t.Errorf("Redrive of an unknown ID: %v", err)
	}
	if _, err := admin.Redrive(ctx, s, p, 1, admin.RedriveOptions{Reason: " "}); !errors.Is(err, sink.ErrNoReason) ||
		!strings.Contains(err.Error(), "RedriveOptions.Reason") || strings.Contains(err.Error(), "--") {
		t.Errorf("Redrive without a reason: %v", err)
	}
	_, err := admin.Redrive(ctx, s, p, 2, admin.RedriveOptions{Reason: "x"})
	var nac *admin.NotACommandError
	if !errors.As(err, &nac) || nac.ID != 2 || !errors.Is(err, admin.ErrNotACommand) || nac.Err == nil {
		t.Errorf("Redrive of an undecodable record: %v, want a *NotACommandError", err)
	}

	// Another operator drops it between the read and the move.
	fs := &faultyStore{Sink: s, before: func() {
		if _, err := admin.Drop(ctx, s, 3, admin.DropOptions{Reason: "the other operator"}); err != nil {
			t.Fatal(err)
		}
	}}
	_, err = admin.Redrive(ctx, fs, p, 3, admin.RedriveOptions{Reason: "x"})
	var cf *admin.ChangedFirstError
	if !errors.As(err, &cf) || cf.ID != 3 || !errors.Is(err, admin.ErrChangedFirst) || !errors.Is(err, dlq.ErrState) {
		t.Errorf("Redrive that loses the race: %v, want a *ChangedFirstError", err)
	}
	if len(p.calls) != 0 {
		t.Fatalf("the refused redrives produced %d commands", len(p.calls))
	}
	for id, want := range map[int64]dlq.State{1: dlq.Open, 2: dlq.Open, 3: dlq.Dropped} {
		if st, audit := stateOf(t, s, id); st != want || len(audit) != map[bool]int{true: 1, false: 0}[id == 3] {
			t.Errorf("dead letter %d after the refusals: state %s, audit %+v", id, st, audit)
		}
	}
}

// TestDrop: Drop moves an open dead letter to dropped with an audit row;
// a dead letter that is not open, an unknown ID, an empty reason and a
// lost race are refused.
func TestDrop(t *testing.T) {
	ctx := context.Background()
	s := deadLettered(t)
	if d, err := admin.PlanDrop(ctx, s, 2); err != nil || d.ID != 2 || d.State != dlq.Open {
		t.Fatalf("PlanDrop(2) = %+v, %v", d, err)
	}
	if _, err := admin.Drop(ctx, s, 2, admin.DropOptions{}); !errors.Is(err, sink.ErrNoReason) || !strings.Contains(err.Error(), "DropOptions.Reason") {
		t.Errorf("Drop without a reason: %v", err)
	}
	if st, audit := stateOf(t, s, 2); st != dlq.Open || len(audit) != 0 {
		t.Fatalf("PlanDrop or a refused Drop changed it: state %s, audit %v", st, audit)
	}
	d, err := admin.Drop(ctx, s, 2, admin.DropOptions{Reason: "a stray test record"})
	if err != nil || d.State != dlq.Dropped {
		t.Fatalf("Drop: %+v, %v", d, err)
	}
	st, audit := stateOf(t, s, 2)
	if st != dlq.Dropped || len(audit) != 1 || audit[0].From != dlq.Open || audit[0].To != dlq.Dropped ||
		audit[0].Reason != "a stray test record" || audit[0].Detail != "admin.Drop" {
		t.Fatalf("after the drop: state %s, audit %+v", st, audit)
	}
	var no *admin.NotOpenError
	if _, err := admin.Drop(ctx, s, 2, admin.DropOptions{Reason: "again"}); !errors.As(err, &no) || no.State != dlq.Dropped {
		t.Errorf("a second drop: %v", err)
	}
	if _, err := admin.Redrive(ctx, s, &fakeProducer{}, 2, admin.RedriveOptions{Reason: "x"}); !errors.As(err, &no) || no.State != dlq.Dropped {
		t.Errorf("a redrive of a dropped dead letter: %v", err)
	}
	if _, err := admin.Drop(ctx, s, 42, admin.DropOptions{Reason: "x"}); !errors.Is(err, sink.ErrNotFound) {
		t.Errorf("Drop of an unknown ID: %v", err)
	}
	fs := &faultyStore{Sink: s, before: func() {
		if _, err := admin.Drop(ctx, s, 3, admin.DropOptions{Reason: "the other operator"}); err != nil {
			t.Fatal(err)
		}
	}}
	if _, err := admin.Drop(ctx, fs, 3, admin.DropOptions{Reason: "me"}); !errors.Is(err, admin.ErrChangedFirst) || !errors.Is(err, dlq.ErrState) {
		t.Errorf("Drop that loses the race: %v", err)
	}
	if st, audit := stateOf(t, s, 2); st != dlq.Dropped || len(audit) != 1 {
		t.Fatalf("the refusals changed dead letter 2: state %s, audit %v", st, audit)
	}
	if st, audit := stateOf(t, s, 3); st != dlq.Dropped || len(audit) != 1 || audit[0].Reason != "the other operator" {
		t.Fatalf("dead letter 3: state %s, audit %+v, want the other operator's drop only", st, audit)
	}
}

// TestDeadLetters: the query's filters, its limit and whether more match,
// and the queries it refuses.
func TestDeadLetters(t *testing.T) {
	ctx := context.Background()
	s := deadLettered(t)
	part := func(p int32) *int32 { return &p }
	for _, tc := range []struct {
		q    admin.DeadLetterQuery
		want string
		more bool
	}{
		{admin.DeadLetterQuery{}, "[1 2 3]", false},
		{admin.DeadLetterQuery{Partition: part(1)}, "[3]", false},
		{admin.DeadLetterQuery{Partition: part(0), Group: "g", Topic: "ledger"}, "[1 2]", false},
		{admin.DeadLetterQuery{Group: "other"}, "[]", false},
		{admin.DeadLetterQuery{Type: "deposit"}, "[1]", false},
		{admin.DeadLetterQuery{Reason: consumer.ReasonUndecodable}, "[2]", false},
		{admin.DeadLetterQuery{States: []dlq.State{dlq.Open}}, "[1 2 3]", false},
		{admin.DeadLetterQuery{States: []dlq.State{dlq.Dropped, dlq.Redriven}}, "[]", false},
		{admin.DeadLetterQuery{Since: time.Now().Add(-time.Hour)}, "[1 2 3]", false},
		{admin.DeadLetterQuery{Since: time.Now().Add(time.Hour)}, "[]", false},
		{admin.DeadLetterQuery{Limit: 2}, "[1 2]", true},
		{admin.DeadLetterQuery{Limit: 3}, "[1 2 3]", false},
		{admin.DeadLetterQuery{Limit: 1, Type: "withdraw"}, "[3]", false},
		{admin.DeadLetterQuery{Limit: 1, Type: ""}, "[1]", true},
	} {
		page, err := admin.DeadLetters(ctx, s, tc.q)
		if err != nil {
			t.Errorf("DeadLetters(%+v): %v", tc.q, err)
			continue
		}
		ids := []int64{}
		for _, d := range page.DeadLetters {
			ids = append(ids, d.ID)
		}
		if fmt.Sprint(ids) != tc.want || page.More != tc.more {
			t.Errorf("DeadLetters(%+v): IDs %v, more %v; want %s, more %v", tc.q, ids, page.More, tc.want, tc.more)
		}
	}
	for _, tc := range []struct {
		q     admin.DeadLetterQuery
		field string
	}{
		{admin.DeadLetterQuery{Reason: "bogus"}, "Reason"},
		{admin.DeadLetterQuery{Partition: part(-1)}, "Partition"},
		{admin.DeadLetterQuery{States: []dlq.State{"gone"}}, "States"},
		{admin.DeadLetterQuery{Limit: -1}, "Limit"},
	} {
		_, err := admin.DeadLetters(ctx, s, tc.q)
		var qe *admin.QueryError
		if !errors.As(err, &qe) || qe.Field != tc.field || !errors.Is(err, admin.ErrBadQuery) || strings.Contains(err.Error(), "--") {
			t.Errorf("DeadLetters(%+v): %v, want a *QueryError on %s", tc.q, err, tc.field)
		}
	}
	if got := admin.RecordType(sink.DeadRecord{Headers: []sink.RecordHeader{
		{Key: envelope.TypeHeader, Value: []byte("a")}, {Key: "x", Value: []byte("y")}, {Key: envelope.TypeHeader, Value: []byte("b")}}}); got != "a,b" {
		t.Errorf("RecordType of two type headers = %q, want a,b", got)
	}
	if _, err := admin.DeadLetter(ctx, s, 9); !errors.Is(err, sink.ErrNotFound) {
		t.Errorf("DeadLetter(9): %v", err)
	}
}
