package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// RedrivesPlan is what Redrives would do with the dead letters a query
// selects: the dry run of a bulk redrive.
type RedrivesPlan struct {
	// Plans are the open dead letters that can be redriven, oldest (lowest
	// ID) first: the order Redrives produces them in, so that dead letters
	// of one key are produced again in the order they were stored.
	Plans []RedrivePlan
	// NotCommands are the open dead letters selected whose record is not
	// a workrouter command (a *NotACommandError each): they cannot be
	// redriven, only dropped. Redrives leaves them open.
	NotCommands []error
}

// Topics returns the topics the planned commands are produced to, sorted:
// a Producer produces to one topic, so a plan with several is redriven one
// topic at a time (a query with Topic). It may be called from any
// goroutine.
func (p RedrivesPlan) Topics() []string {
	var topics []string
	for _, pl := range p.Plans {
		if !slices.Contains(topics, pl.DeadLetter.Scope.Topic) {
			topics = append(topics, pl.DeadLetter.Scope.Topic)
		}
	}
	slices.Sort(topics)
	return topics
}

// PlanRedrives reads the open dead letters q selects and says what
// Redrives would do with them, changing nothing. q selects open dead
// letters only: a q with States is refused (a *QueryError), and so is a
// q with a Limit (a bulk redrive takes every dead letter it selects). It
// may be called from any goroutine.
func PlanRedrives(ctx context.Context, r DeadLetterReader, q DeadLetterQuery) (RedrivesPlan, error) {
	if len(q.States) > 0 {
		return RedrivesPlan{}, &QueryError{Field: "States", Value: fmt.Sprint(q.States), Want: "none: a redrive selects open dead letters only"}
	}
	if q.Limit != 0 {
		return RedrivesPlan{}, &QueryError{Field: "Limit", Value: fmt.Sprint(q.Limit), Want: "0: a redrive takes every dead letter it selects"}
	}
	q.States = []dlq.State{dlq.Open}
	page, err := DeadLetters(ctx, r, q)
	if err != nil {
		return RedrivesPlan{}, err
	}
	var plan RedrivesPlan
	for _, d := range page.DeadLetters {
		p, err := PlanRedrive(ctx, r, d.ID)
		var nac *NotACommandError
		switch {
		case errors.As(err, &nac):
			plan.NotCommands = append(plan.NotCommands, err)
		case err != nil:
			// Changed since the list was read (redriven or dropped by
			// another operator): not this redrive's any more.
			if errors.Is(err, dlq.ErrState) || errors.Is(err, sink.ErrNotFound) {
				continue
			}
			return RedrivesPlan{}, err
		default:
			plan.Plans = append(plan.Plans, p)
		}
	}
	return plan, nil
}

// RedrivesResult is what Redrives did.
type RedrivesResult struct {
	// Redriven are the dead letters redriven, in the order produced.
	Redriven []Redriven
	// ChangedFirst are the planned dead letters another redrive or drop
	// changed before this one reached them (a *ChangedFirstError or
	// *NotOpenError each): left as the other operator left them.
	ChangedFirst []error
}

// Redrives redrives the dead letters of plan, in its order, each as
// Redrive does with o (one audit row pair each, o.Reason in every one).
// A dead letter another redrive or drop changed since the plan is left
// as it is and reported in RedrivesResult.ChangedFirst; any other failure
// stops the bulk redrive: the result holds what was done before it and
// the error is Redrive's (a *RedriveError says the state that dead letter
// is left in), wrapped with how many were redriven and how many were not
// tried. An empty o.Reason fails first, with an error matching
// sink.ErrNoReason, and a plan on several topics with a *QueryError for
// Topic, redriving nothing. It may be called from any
// goroutine.
func Redrives(ctx context.Context, s DeadLetterResolver, p Producer, plan RedrivesPlan, o RedriveOptions) (RedrivesResult, error) {
	var res RedrivesResult
	if strings.TrimSpace(o.Reason) == "" {
		return res, fmt.Errorf("admin.Redrives: RedriveOptions.Reason is empty: %w", sink.ErrNoReason)
	}
	if topics := plan.Topics(); len(topics) > 1 {
		return res, &QueryError{Field: "Topic", Value: `""`, Want: "one topic: the dead letters selected are on " + strings.Join(topics, ", ") + ", and a producer produces to one"}
	}
	for i, pl := range plan.Plans {
		r, err := Redrive(ctx, s, p, pl.DeadLetter.ID, o)
		var (
			cf *ChangedFirstError
			no *NotOpenError
		)
		switch {
		case errors.As(err, &cf), errors.As(err, &no):
			res.ChangedFirst = append(res.ChangedFirst, err)
		case err != nil:
			return res, fmt.Errorf("admin.Redrives: %d of %d redriven, %d not tried after dead letter %d: %w",
				len(res.Redriven), len(plan.Plans), len(plan.Plans)-i-1, pl.DeadLetter.ID, err)
		default:
			res.Redriven = append(res.Redriven, r)
		}
	}
	return res, nil
}
