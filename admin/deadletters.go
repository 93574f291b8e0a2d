package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// DeadLetterReader is what reading dead letters needs: the read side of
// [dlq.Store], which the SQLite, PostgreSQL and memory sinks
// implement (find it with sink.As on a wrapped sink).
type DeadLetterReader interface {
	// DeadLetters returns the dead letters that match f, by ID.
	DeadLetters(ctx context.Context, f dlq.Filter) ([]dlq.Letter, error)
}

// DeadLetterAuditReader is what reading a dead letter's audit rows needs
// (part of [dlq.Store]).
type DeadLetterAuditReader interface {
	// DeadLetterAudit returns the audit rows of dead letter id, in order.
	DeadLetterAudit(ctx context.Context, id int64) ([]dlq.Action, error)
}

// DeadLetterResolver is what Redrive and Drop need of a sink: reading a
// dead letter and moving it between states with an audit row (part of
// [dlq.Store]).
type DeadLetterResolver interface {
	DeadLetterReader
	// ResolveDeadLetter moves dead letter id from state from to state to,
	// a compare-and-set, and appends an audit row (see
	// [dlq.Store]).
	ResolveDeadLetter(ctx context.Context, id int64, from, to dlq.State, reason, detail string) (dlq.Letter, error)
}

// Producer is what Redrive needs to produce a dead letter's command again:
// [*router.Router] implements it. Redrive must send cmd, keeping its ID,
// with the header [envelope.RedriveOfHeader] set to o.DeadLetter and
// [envelope.RedriveForHeader] set to o.Group, and return where it was
// written.
type Producer interface {
	Redrive(ctx context.Context, cmd envelope.Command, o router.RedriveOptions) (router.Result, error)
}

var (
	// ErrNotOpen is matched by the error of a redrive or a drop of a dead
	// letter that is not open (a [*NotOpenError], which also matches
	// dlq.ErrState): nothing was changed or sent.
	ErrNotOpen = errors.New("admin: the dead letter is not open")
	// ErrNotACommand is matched by the error of a redrive of a dead letter
	// whose record is not a workrouter command (no key, no or several type
	// headers; a [*NotACommandError]): there is no command to produce
	// again. Drop it, and produce a corrected command instead.
	ErrNotACommand = errors.New("admin: the dead letter's record is not a workrouter command")
	// ErrChangedFirst is matched by the error of a redrive or a drop that
	// found the dead letter open but lost the compare-and-set to another
	// redrive or drop (a [*ChangedFirstError], which also matches
	// dlq.ErrState): nothing was changed or sent.
	ErrChangedFirst = errors.New("admin: another redrive or drop changed the dead letter first")
	// ErrBadQuery is matched by the error of DeadLetters for a query it
	// cannot answer (a [*QueryError]).
	ErrBadQuery = errors.New("admin: bad dead letter query")
)

// NotOpenError is the error of a redrive (Op "admin.Redrive") or a drop
// (Op "admin.Drop") of a dead letter that is not open; it matches
// ErrNotOpen and dlq.ErrState. Nothing was changed or sent.
type NotOpenError struct {
	Op    string
	ID    int64
	State dlq.State
}

// Error says which dead letter is in which state, and what that means.
// It may be called from any goroutine.
func (e *NotOpenError) Error() string {
	why := ""
	switch e.State {
	case dlq.Redriven:
		why = ": it was redriven already, and a dead letter is redriven at most once"
	case dlq.Redriving:
		why = ": a redrive of it is under way, or was interrupted (its audit rows say which step it reached)"
	}
	return fmt.Sprintf("%s: dead letter %d is %s, not open%s", e.Op, e.ID, e.State, why)
}

// Is reports whether target is ErrNotOpen or dlq.ErrState. It
// may be called from any goroutine.
func (e *NotOpenError) Is(target error) bool {
	return target == ErrNotOpen || target == dlq.ErrState
}

// ChangedFirstError is the error of a redrive (Op "admin.Redrive") or a
// drop (Op "admin.Drop") that read dead letter ID open, but whose move out
// of open the sink refused because another redrive or drop had moved it
// first; it matches ErrChangedFirst and unwraps to the sink's error (which
// matches dlq.ErrState). Nothing was changed or sent.
type ChangedFirstError struct {
	Op  string
	ID  int64
	Err error
}

// Error names the dead letter and the sink's refusal. It may be called
// from any goroutine.
func (e *ChangedFirstError) Error() string {
	return fmt.Sprintf("%s: another redrive or drop changed dead letter %d first: %v", e.Op, e.ID, e.Err)
}

// Is reports whether target is ErrChangedFirst. It may be called from any
// goroutine.
func (e *ChangedFirstError) Is(target error) bool { return target == ErrChangedFirst }

// Unwrap returns the sink's error. It may be called from any goroutine.
func (e *ChangedFirstError) Unwrap() error { return e.Err }

// NotACommandError is the error of a redrive of a dead letter whose record
// does not decode as a workrouter command; it matches ErrNotACommand and
// unwraps to the decoding error. Nothing was changed or sent.
type NotACommandError struct {
	ID  int64
	Err error
}

// Error names the dead letter and why its record is not a command. It may
// be called from any goroutine.
func (e *NotACommandError) Error() string {
	return fmt.Sprintf("admin.Redrive: dead letter %d: its record is not a workrouter command: %v", e.ID, e.Err)
}

// Is reports whether target is ErrNotACommand. It may be called from any
// goroutine.
func (e *NotACommandError) Is(target error) bool { return target == ErrNotACommand }

// Unwrap returns the decoding error. It may be called from any goroutine.
func (e *NotACommandError) Unwrap() error { return e.Err }

// RedriveError is the error of a redrive that failed after it moved the
// dead letter to redriving: producing failed, or the command was produced
// but marking the dead letter redriven failed. Every other error of
// Redrive means that nothing was changed or sent. It unwraps to Err and,
// if set, RevertErr.
type RedriveError struct {
	ID int64
	// Produced reports whether the command was produced (at Result); if
	// so, Err is the failure to mark the dead letter redriven.
	Produced bool
	Result   router.Result
	// Topic is the topic the command was (or was to be) produced to.
	Topic string
	// State is the state the dead letter is left in: open when producing
	// failed and it was moved back, else redriving (look for a record with
	// header envelope.RedriveOfHeader naming ID on Topic before resolving
	// it by hand).
	State dlq.State
	// Err is what failed: producing (Produced false) or marking the dead
	// letter redriven (Produced true).
	Err error
	// RevertErr is why the dead letter could not be moved back to open
	// after producing failed (nil if it was).
	RevertErr error
}

// Error says what failed and the state the dead letter is left in. It may
// be called from any goroutine.
func (e *RedriveError) Error() string {
	switch {
	case e.Produced:
		return fmt.Sprintf("admin.Redrive: dead letter %d was produced to %s partition %d offset %d, but marking it redriven failed: %v (it stays redriving)",
			e.ID, e.Topic, e.Result.Partition, e.Result.Offset, e.Err)
	case e.RevertErr != nil:
		return fmt.Sprintf("admin.Redrive: dead letter %d: producing failed (%v), and moving it back to open failed too (%v): it stays redriving",
			e.ID, e.Err, e.RevertErr)
	}
	return fmt.Sprintf("admin.Redrive: dead letter %d: producing failed: %v (it is open again, with an audit row saying so)", e.ID, e.Err)
}

// Unwrap returns Err and, if set, RevertErr. It may be called from any
// goroutine.
func (e *RedriveError) Unwrap() []error {
	if e.RevertErr != nil {
		return []error{e.Err, e.RevertErr}
	}
	return []error{e.Err}
}

// QueryError is the error of DeadLetters, PlanRedrives and Redrives for a
// field of DeadLetterQuery they cannot answer; it matches ErrBadQuery.
type QueryError struct {
	// Field is the DeadLetterQuery field ("Reason", "Partition", "States",
	// "Limit", "Topic"), Value its offending value, and Want what it may be.
	Field string
	Value string
	Want  string
}

// Error names the field, its value and what it may be. It may be called
// from any goroutine.
func (e *QueryError) Error() string {
	return fmt.Sprintf("admin: DeadLetterQuery.%s %s: want %s", e.Field, e.Value, e.Want)
}

// Is reports whether target is ErrBadQuery. It may be called from any
// goroutine.
func (e *QueryError) Is(target error) bool { return target == ErrBadQuery }

// RecordType returns the command type of a dead-lettered record: its
// envelope.TypeHeader headers, comma-joined if there are several ("" if
// none). It may be called from any goroutine.
func RecordType(r sink.DeadRecord) string {
	var types []string
	for _, h := range r.Headers {
		if h.Key == envelope.TypeHeader {
			types = append(types, string(h.Value))
		}
	}
	return strings.Join(types, ",")
}

// DeadLetterQuery selects dead letters; zero fields select all.
type DeadLetterQuery struct {
	Group     string
	Topic     string
	Partition *int32
	// Type selects the records whose RecordType is Type.
	Type string
	// Reason is one of consumer.Reasons().
	Reason string
	States []dlq.State
	// Since, if not zero, selects dead letters stored at or after it.
	Since time.Time
	// Limit caps the result (0: no cap); DeadLetterPage.More says whether
	// more match.
	Limit int
}

// DeadLetterPage is the answer of DeadLetters.
type DeadLetterPage struct {
	// DeadLetters are the dead letters that match, oldest (lowest ID)
	// first, at most the query's Limit.
	DeadLetters []dlq.Letter
	// More reports whether more dead letters match than Limit.
	More bool
}

// Validate checks q as DeadLetters does, reading nothing: an unknown
// reason or state, or a negative partition or limit, is a *QueryError. It
// may be called from any goroutine.
func (q DeadLetterQuery) Validate() error {
	if q.Reason != "" && !slices.Contains(consumer.Reasons(), q.Reason) {
		return &QueryError{Field: "Reason", Value: fmt.Sprintf("%q", q.Reason), Want: strings.Join(consumer.Reasons(), ", ")}
	}
	if q.Partition != nil && *q.Partition < 0 {
		return &QueryError{Field: "Partition", Value: fmt.Sprint(*q.Partition), Want: "0 or more"}
	}
	for _, st := range q.States {
		if !st.Valid() {
			return &QueryError{Field: "States", Value: fmt.Sprintf("%q", st), Want: "open, redriving, redriven or dropped"}
		}
	}
	if q.Limit < 0 {
		return &QueryError{Field: "Limit", Value: fmt.Sprint(q.Limit), Want: "0 (all) or more"}
	}
	return nil
}

// DeadLetters returns the dead letters of r that match q, oldest first. A
// query that fails Validate fails before r is read. It may be called from
// any goroutine.
func DeadLetters(ctx context.Context, r DeadLetterReader, q DeadLetterQuery) (DeadLetterPage, error) {
	if err := q.Validate(); err != nil {
		return DeadLetterPage{}, err
	}
	f := dlq.Filter{Group: q.Group, Topic: q.Topic, Partition: q.Partition, Reason: q.Reason, States: q.States, Since: q.Since}
	if q.Limit > 0 && q.Type == "" {
		f.Limit = q.Limit + 1 // one more tells whether there are more
	}
	all, err := r.DeadLetters(ctx, f)
	if err != nil {
		return DeadLetterPage{}, fmt.Errorf("admin.DeadLetters: reading dead letters: %w", err)
	}
	var page DeadLetterPage
	for _, d := range all {
		if q.Type == "" || RecordType(d.Record) == q.Type {
			page.DeadLetters = append(page.DeadLetters, d)
		}
	}
	if q.Limit > 0 && len(page.DeadLetters) > q.Limit {
		page.DeadLetters, page.More = page.DeadLetters[:q.Limit], true
	}
	return page, nil
}

// DeadLetter returns dead letter id of r, or an error matching
// sink.ErrNotFound if r has none. It may be called from any goroutine.
func DeadLetter(ctx context.Context, r DeadLetterReader, id int64) (dlq.Letter, error) {
	dls, err := r.DeadLetters(ctx, dlq.Filter{IDs: []int64{id}})
	if err != nil {
		return dlq.Letter{}, fmt.Errorf("admin: reading dead letter %d: %w", id, err)
	}
	if len(dls) == 0 {
		return dlq.Letter{}, fmt.Errorf("admin: dead letter %d: %w", id, sink.ErrNotFound)
	}
	return dls[0], nil
}

// DeadLetterAudit returns the audit rows of dead letter id, in order: one
// per move between states, with who-said-why. It may be called from any
// goroutine.
func DeadLetterAudit(ctx context.Context, r DeadLetterAuditReader, id int64) ([]dlq.Action, error) {
	audit, err := r.DeadLetterAudit(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("admin: reading the audit rows of dead letter %d: %w", id, err)
	}
	return audit, nil
}

// RedrivePlan is what Redrive would do with a dead letter.
type RedrivePlan struct {
	// DeadLetter is the dead letter, open.
	DeadLetter dlq.Letter
	// Command is its record as a command: Redrive produces it to
	// DeadLetter.Scope.Topic (on its key's partition), with its ID
	// (Command.ID, "" if the record had none: then the producer gives it
	// one), the header envelope.RedriveOfHeader naming DeadLetter.ID and
	// envelope.RedriveForHeader naming DeadLetter.Scope.Group, the one
	// group that is to apply it: the topic's other groups skip it, and so
	// does this group if it applied the command's ID already. Its
	// RedriveFor, set if the record was itself a redrive, is replaced.
	Command envelope.Command
}

// PlanRedrive reads dead letter id and says what Redrive would produce,
// changing nothing: the dry run. It fails with an error matching
// sink.ErrNotFound for an unknown id, a *NotOpenError for a dead letter
// that is not open, and a *NotACommandError for a record that is not a
// workrouter command. It may be called from any goroutine.
func PlanRedrive(ctx context.Context, r DeadLetterReader, id int64) (RedrivePlan, error) {
	d, err := DeadLetter(ctx, r, id)
	if err != nil {
		return RedrivePlan{}, err
	}
	if d.State != dlq.Open {
		return RedrivePlan{}, &NotOpenError{Op: "admin.Redrive", ID: id, State: d.State}
	}
	rec := &kgo.Record{Topic: d.Scope.Topic, Partition: d.Scope.Partition, Offset: d.Record.Offset, Key: d.Record.Key, Value: d.Record.Value}
	for _, h := range d.Record.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	c, err := envelope.Decode(rec)
	if err != nil {
		return RedrivePlan{}, &NotACommandError{ID: id, Err: err}
	}
	return RedrivePlan{DeadLetter: d, Command: c}, nil
}

// DefaultRevertTimeout is how long Redrive gives moving a dead letter back
// to open after producing failed, when RedriveOptions.RevertTimeout is 0.
const DefaultRevertTimeout = 30 * time.Second

// RedriveOptions are the operator's side of a redrive.
type RedriveOptions struct {
	// Reason is why the dead letter is redriven, recorded in each of its
	// audit rows. Required.
	Reason string
	// Actor names who redrives, at the start of the first audit row's
	// detail ("" is "admin.Redrive").
	Actor string
	// NewID produces the command with a new command ID (the producer
	// generates it) instead of its original one, audited as such. Use it
	// when the dead letter's cause is an outcome recorded under the
	// original ID: a fencehttp service (or any service keyed by the
	// command's idempotency key) that answered 4xx replays that answer to
	// every call with the same key, so a redrive with the original ID is
	// dead-lettered again. A new ID forgoes the sink's deduplication of
	// the original: only use it for a command the group never applied (a
	// dead letter's command was not).
	NewID bool
	// RevertTimeout bounds moving the dead letter back to open after
	// producing failed, which runs on a context of its own (ctx may be
	// spent by then); 0 is DefaultRevertTimeout.
	RevertTimeout time.Duration
}

// Redriven is what Redrive did.
type Redriven struct {
	// DeadLetter is the dead letter as it is after: redriven.
	DeadLetter dlq.Letter
	// Command is the command produced again (without the
	// envelope.RedriveOfHeader and envelope.RedriveForHeader headers p
	// added).
	Command envelope.Command
	// Result is where it was produced, and its ID (Command.ID, or the one
	// p generated).
	Result router.Result
	// Detail is the last audit row's detail: where it was produced.
	Detail string
}

// Redrive produces the command of open dead letter id again through p, as
// a new command for the dead letter's group only (see RedrivePlan.Command:
// it keeps its ID, and the topic's other groups skip it), and moves the
// dead letter open → redriving before it
// produces and redriving → redriven after, each move an audit row with
// o.Reason (the second names the partition and offset produced). If
// producing fails it moves the dead letter back to open, with an audit row
// saying so, and returns a *RedriveError; it returns one too if the command
// was produced but the move to redriven failed, and then the dead letter
// stays redriving (as it does when the process dies between the two): a
// redriving dead letter is neither redriven nor dropped again until an
// operator has looked for its record. A dead letter is redriven at most
// once.
//
// It checks as PlanRedrive does, and an empty o.Reason fails with an
// error matching sink.ErrNoReason; a lost compare-and-set with another
// redrive or drop fails with an error matching ErrChangedFirst. Those
// errors, and every other that is not a *RedriveError, mean nothing was
// changed or sent. It may be called from any goroutine.
func Redrive(ctx context.Context, s DeadLetterResolver, p Producer, id int64, o RedriveOptions) (Redriven, error) {
	if strings.TrimSpace(o.Reason) == "" {
		return Redriven{}, fmt.Errorf("admin.Redrive: dead letter %d: RedriveOptions.Reason is empty: %w", id, sink.ErrNoReason)
	}
	plan, err := PlanRedrive(ctx, s, id)
	if err != nil {
		return Redriven{}, err
	}
	d, c := plan.DeadLetter, plan.Command
	actor := o.Actor
	if actor == "" {
		actor = "admin.Redrive"
	}
	how := ""
	if o.NewID {
		how = fmt.Sprintf(" as a new command: a new command ID, not %s", idText(c.ID))
		c.ID = "" // the producer gives it a new one
	}
	if _, err := s.ResolveDeadLetter(ctx, id, dlq.Open, dlq.Redriving, o.Reason,
		fmt.Sprintf("%s: producing it again to topic %s%s", actor, d.Scope.Topic, how)); err != nil {
		if errors.Is(err, dlq.ErrState) {
			return Redriven{}, &ChangedFirstError{Op: "admin.Redrive", ID: id, Err: err}
		}
		return Redriven{}, fmt.Errorf("admin.Redrive: marking dead letter %d redriving: %w", id, err)
	}
	res, perr := p.Redrive(ctx, c, router.RedriveOptions{DeadLetter: fmt.Sprint(id), Group: d.Scope.Group})
	if perr != nil {
		// Back to open, so that it can be redriven again; ctx may be
		// spent, so the move gets its own.
		timeout := o.RevertTimeout
		if timeout <= 0 {
			timeout = DefaultRevertTimeout
		}
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		e := &RedriveError{ID: id, Topic: d.Scope.Topic, State: dlq.Open, Err: perr}
		if _, err := s.ResolveDeadLetter(bctx, id, dlq.Redriving, dlq.Open, o.Reason,
			"the redrive failed, back to open: "+auditLine(perr.Error())); err != nil {
			e.State, e.RevertErr = dlq.Redriving, err
		}
		return Redriven{}, e
	}
	detail := fmt.Sprintf("produced to %s partition %d offset %d", d.Scope.Topic, res.Partition, res.Offset)
	if o.NewID {
		detail += fmt.Sprintf(" with the new command ID %s (was %s)", idText(res.ID), idText(plan.Command.ID))
	}
	after, err := s.ResolveDeadLetter(ctx, id, dlq.Redriving, dlq.Redriven, o.Reason, detail)
	if err != nil {
		return Redriven{}, &RedriveError{ID: id, Produced: true, Result: res, Topic: d.Scope.Topic, State: dlq.Redriving, Err: err}
	}
	return Redriven{DeadLetter: after, Command: c, Result: res, Detail: detail}, nil
}

// idText names a command ID in an audit row.
func idText(id string) string {
	if id == "" {
		return "none"
	}
	return strconv.Quote(id)
}

// PlanDrop reads dead letter id and checks that Drop may drop it, changing
// nothing: the dry run. It fails with an error matching sink.ErrNotFound
// for an unknown id and a *NotOpenError for a dead letter that is not
// open. It may be called from any goroutine.
func PlanDrop(ctx context.Context, r DeadLetterReader, id int64) (dlq.Letter, error) {
	d, err := DeadLetter(ctx, r, id)
	if err != nil {
		return dlq.Letter{}, err
	}
	if d.State != dlq.Open {
		return dlq.Letter{}, &NotOpenError{Op: "admin.Drop", ID: id, State: d.State}
	}
	return d, nil
}

// DropOptions are the operator's side of a drop.
type DropOptions struct {
	// Reason is why the dead letter needs nothing more, recorded in its
	// audit row. Required.
	Reason string
	// Actor names who drops it: the audit row's detail ("" is
	// "admin.Drop").
	Actor string
}

// Drop marks open dead letter id handled: it moves it open → dropped with
// an audit row recording o.Reason, and returns it as it is after. Nothing
// is deleted. It checks as PlanDrop does; an empty o.Reason fails with an
// error matching sink.ErrNoReason, and a lost compare-and-set with another
// redrive or drop with one matching ErrChangedFirst. It may be called from
// any goroutine.
func Drop(ctx context.Context, s DeadLetterResolver, id int64, o DropOptions) (dlq.Letter, error) {
	if strings.TrimSpace(o.Reason) == "" {
		return dlq.Letter{}, fmt.Errorf("admin.Drop: dead letter %d: DropOptions.Reason is empty: %w", id, sink.ErrNoReason)
	}
	if _, err := PlanDrop(ctx, s, id); err != nil {
		return dlq.Letter{}, err
	}
	actor := o.Actor
	if actor == "" {
		actor = "admin.Drop"
	}
	after, err := s.ResolveDeadLetter(ctx, id, dlq.Open, dlq.Dropped, o.Reason, actor)
	if err != nil {
		if errors.Is(err, dlq.ErrState) {
			return dlq.Letter{}, &ChangedFirstError{Op: "admin.Drop", ID: id, Err: err}
		}
		return dlq.Letter{}, fmt.Errorf("admin.Drop: dropping dead letter %d: %w", id, err)
	}
	return after, nil
}

// auditLine folds s onto one line, for an audit row's detail.
func auditLine(s string) string { return strings.Join(strings.Fields(s), " ") }
