package admin_test

import (
	"context"
	"errors"
	"testing"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// TestPlanRedrivesAndRedrives: the bulk redrive's dry run selects the
// open dead letters of a query, oldest first, and sets aside the ones that
// are not commands; Redrives produces each planned one (in order, each
// with its audit rows), skips one another operator dropped meanwhile and
// reports it, and leaves the not-commands open.
func TestPlanRedrivesAndRedrives(t *testing.T) {
	ctx := context.Background()
	s := deadLettered(t) // 1: deposit (c1), 2: undecodable, 3: withdraw

	plan, err := admin.PlanRedrives(ctx, s, admin.DeadLetterQuery{Topic: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	var nac *admin.NotACommandError
	if len(plan.Plans) != 2 || plan.Plans[0].DeadLetter.ID != 1 || plan.Plans[1].DeadLetter.ID != 3 ||
		len(plan.NotCommands) != 1 || !errors.As(plan.NotCommands[0], &nac) || nac.ID != 2 {
		t.Fatalf("plan %+v: want 1 and 3, oldest first, and 2 set aside as not a command", plan)
	}
	for id := int64(1); id <= 3; id++ {
		if st, audit := stateOf(t, s, id); st != dlq.Open || len(audit) != 0 {
			t.Fatalf("the dry run changed dead letter %d: %s, %v", id, st, audit)
		}
	}
	// A query narrows it: by reason.
	narrow, err := admin.PlanRedrives(ctx, s, admin.DeadLetterQuery{Reason: consumer.ReasonHandlerError})
	if err != nil || len(narrow.Plans) != 1 || narrow.Plans[0].DeadLetter.ID != 3 || len(narrow.NotCommands) != 0 {
		t.Fatalf("plan by reason: %+v, %v; want dead letter 3 only", narrow, err)
	}
	// States and Limit are not a redrive's to choose.
	for _, q := range []admin.DeadLetterQuery{{States: []dlq.State{dlq.Redriven}}, {Limit: 1}} {
		if _, err := admin.PlanRedrives(ctx, s, q); !errors.Is(err, admin.ErrBadQuery) {
			t.Errorf("PlanRedrives(%+v): %v, want ErrBadQuery", q, err)
		}
	}

	// Another operator drops dead letter 1 between the plan and the
	// redrive.
	if _, err := admin.Drop(ctx, s, 1, admin.DropOptions{Reason: "duplicate of INC-3"}); err != nil {
		t.Fatal(err)
	}
	p := &fakeProducer{}
	if _, err := admin.Redrives(ctx, s, p, plan, admin.RedriveOptions{}); !errors.Is(err, sink.ErrNoReason) || len(p.calls) != 0 {
		t.Fatalf("Redrives without a reason: %v, %d produced; want ErrNoReason, nothing", err, len(p.calls))
	}
	res, err := admin.Redrives(ctx, s, p, plan, admin.RedriveOptions{Reason: "handler fixed", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var no *admin.NotOpenError
	if len(res.Redriven) != 1 || res.Redriven[0].DeadLetter.ID != 3 || len(res.ChangedFirst) != 1 || !errors.As(res.ChangedFirst[0], &no) || no.ID != 1 {
		t.Fatalf("result %+v: want 3 redriven and 1 reported as changed first", res)
	}
	if len(p.calls) != 1 || p.calls[0].cmd.Type != "withdraw" {
		t.Fatalf("produced %+v, want dead letter 3's withdraw only", p.calls)
	}
	if st, audit := stateOf(t, s, 3); st != dlq.Redriven || len(audit) != 2 || audit[0].Reason != "handler fixed" {
		t.Fatalf("dead letter 3: %s, %+v; want redriven with two audit rows", st, audit)
	}
	if st, _ := stateOf(t, s, 2); st != dlq.Open {
		t.Fatalf("the not-command dead letter 2 is %s, want left open", st)
	}

	// A producer produces to one topic: a plan on two is refused whole.
	two := admin.RedrivesPlan{Plans: []admin.RedrivePlan{plan.Plans[1], plan.Plans[1]}}
	two.Plans[1].DeadLetter.Scope.Topic = "payments"
	if _, err := admin.Redrives(ctx, s, p, two, admin.RedriveOptions{Reason: "x"}); !errors.Is(err, admin.ErrBadQuery) || len(p.calls) != 1 {
		t.Fatalf("Redrives of a plan on two topics: %v, %d produced; want ErrBadQuery, nothing more", err, len(p.calls))
	}

	// A producer that fails stops the bulk redrive, saying how far it got.
	s2 := deadLettered(t)
	plan2, err := admin.PlanRedrives(ctx, s2, admin.DeadLetterQuery{})
	if err != nil {
		t.Fatal(err)
	}
	failing := &fakeProducer{err: errors.New("broker down")}
	res2, err := admin.Redrives(ctx, s2, failing, plan2, admin.RedriveOptions{Reason: "retry"})
	var re *admin.RedriveError
	if !errors.As(err, &re) || re.ID != 1 || re.State != dlq.Open || len(res2.Redriven) != 0 || len(failing.calls) != 1 {
		t.Fatalf("Redrives with a failing producer: %+v, %v; want it stopped at dead letter 1, left open, 3 not tried", res2, err)
	}
	if st, _ := stateOf(t, s2, 3); st != dlq.Open {
		t.Fatalf("dead letter 3 after the stop: %s, want open (not tried)", st)
	}
}
