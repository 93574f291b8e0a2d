package consumer

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// Reasons a record is dead-lettered, as stored in the dead letter
// (sink.DeadRecord.Reason), in DeadLettered events and in the
// workrouter_consumer_dead_letters_total{reason} metric.
const (
	// ReasonUndecodable: the record is not a workrouter command (no
	// key, no or an empty type header, two type headers).
	ReasonUndecodable = "undecodable"
	// ReasonNoHandler: no handler is registered for the command's type.
	ReasonNoHandler = "no_handler"
	// ReasonPermanent: the handler returned an error marked permanent
	// (Permanent, ErrPermanent).
	ReasonPermanent = "permanent"
	// ReasonHandlerError: the handler kept failing (or panicking) until
	// the record's retry budget was spent.
	ReasonHandlerError = "handler_error"
	// ReasonMisrouted: the record's key maps to another partition and
	// Config.Misroute is MisrouteRefuse (docs/design.md#hazard-11).
	ReasonMisrouted = "misrouted"
)

// Reasons returns every reason the Worker dead-letters a record for, in
// a fixed order (a new slice each call). Tools that filter dead letters by
// reason, and the metrics that pre-create a series per reason, use it. It
// may be called from any goroutine.
func Reasons() []string {
	return []string{ReasonUndecodable, ReasonNoHandler, ReasonPermanent, ReasonHandlerError, ReasonMisrouted}
}

// PoisonAction is what happens to a record that cannot be applied.
type PoisonAction int

const (
	// PoisonDefault takes the documented default of the field.
	PoisonDefault PoisonAction = iota
	// PoisonDeadLetter stores the record as a dead letter in the sink,
	// in the same fenced unit that moves the checkpoint past it, and goes
	// on with the next record. It needs a sink with sink.Features.DeadLetters;
	// with another sink it stalls (New logs that once).
	PoisonDeadLetter
	// PoisonStall retries the record with backoff until it applies: the
	// partition makes no progress meanwhile (visible as Stalled events,
	// the stalled gauge and Worker.Partitions).
	PoisonStall
)

// String returns "dead-letter", "stall" or "default".
func (a PoisonAction) String() string {
	switch a {
	case PoisonDeadLetter:
		return "dead-letter"
	case PoisonStall:
		return "stall"
	case PoisonDefault:
		return "default"
	}
	return fmt.Sprintf("PoisonAction(%d)", int(a))
}

// PoisonPolicy says what happens to records that cannot be applied
// (docs/design.md#dead-letters). Whatever it says, a record before a
// poison record in a batch is applied first, failures of the sink itself
// (sink.Health) are retried without limit and never spend a
// budget, and nothing is skipped without a dead letter. The zero value is
// the documented defaults.
type PoisonPolicy struct {
	// Undecodable is for records that are not workrouter commands, and
	// for misrouted records under MisrouteRefuse; default
	// PoisonDeadLetter (at once: retrying cannot change them).
	Undecodable PoisonAction
	// NoHandler is for commands whose type has no handler; default
	// PoisonStall, so that commands sent before their handler is deployed
	// wait for it.
	NoHandler PoisonAction
	// HandlerError is for commands whose handler returns an error (or
	// panics); default PoisonDeadLetter once the budget below is spent,
	// or at once for an error marked Permanent.
	HandlerError PoisonAction
	// MaxAttempts is a record's budget of failed attempts before its
	// handler error dead-letters it; default 8 (with the default backoff,
	// about 6 s of retries).
	MaxAttempts int
	// MaxRetryTime bounds, as well, how long a record is retried from its
	// first failure; default 1 minute. The budget is spent when either
	// is reached.
	MaxRetryTime time.Duration
	// Types overrides HandlerError, MaxAttempts and MaxRetryTime for
	// commands of the given types (zero fields take the worker's).
	Types map[string]TypePolicy
}

// TypePolicy is the handler-error policy of one command type.
type TypePolicy struct {
	HandlerError PoisonAction
	MaxAttempts  int
	MaxRetryTime time.Duration
}

// withDefaults fills in the documented defaults.
func (p PoisonPolicy) withDefaults() (PoisonPolicy, error) {
	for name, a := range map[string]PoisonAction{"Undecodable": p.Undecodable, "NoHandler": p.NoHandler, "HandlerError": p.HandlerError} {
		if a < PoisonDefault || a > PoisonStall {
			return p, fmt.Errorf("%w: Poison.%s is %v", ErrConfig, name, a)
		}
	}
	if p.MaxAttempts < 0 || p.MaxRetryTime < 0 {
		return p, fmt.Errorf("%w: negative Poison.MaxAttempts or MaxRetryTime", ErrConfig)
	}
	if p.Undecodable == PoisonDefault {
		p.Undecodable = PoisonDeadLetter
	}
	if p.NoHandler == PoisonDefault {
		p.NoHandler = PoisonStall
	}
	if p.HandlerError == PoisonDefault {
		p.HandlerError = PoisonDeadLetter
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 8
	}
	if p.MaxRetryTime == 0 {
		p.MaxRetryTime = time.Minute
	}
	for typ, tp := range p.Types {
		if tp.HandlerError < PoisonDefault || tp.HandlerError > PoisonStall || tp.MaxAttempts < 0 || tp.MaxRetryTime < 0 {
			return p, fmt.Errorf("%w: Poison.Types[%q] is invalid", ErrConfig, typ)
		}
	}
	return p, nil
}

// forType returns the handler-error policy of command type typ.
func (p PoisonPolicy) forType(typ string) TypePolicy {
	tp := TypePolicy{HandlerError: p.HandlerError, MaxAttempts: p.MaxAttempts, MaxRetryTime: p.MaxRetryTime}
	if o, ok := p.Types[typ]; ok {
		if o.HandlerError != PoisonDefault {
			tp.HandlerError = o.HandlerError
		}
		if o.MaxAttempts != 0 {
			tp.MaxAttempts = o.MaxAttempts
		}
		if o.MaxRetryTime != 0 {
			tp.MaxRetryTime = o.MaxRetryTime
		}
	}
	return tp
}

// ErrPermanent is matched by an error a handler marked permanent (see
// Permanent): retrying cannot help, so the record is dead-lettered at once
// (unless the policy stalls).
var ErrPermanent = errors.New("consumer: permanent handler error")

// PermanentError is an error a handler marked permanent. It matches
// ErrPermanent, and its Err through Unwrap.
type PermanentError struct{ Err error }

// Permanent marks err as permanent: a handler returns Permanent(err) for a
// command that can never be applied (it fails validation, it refers to
// something that does not exist), so that it is dead-lettered at once
// instead of after its retry budget. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Error returns the wrapped error's text, marked permanent.
func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Is reports whether target is ErrPermanent.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// PanicError is what a handler's panic becomes: the Worker recovers it and
// treats it as a handler error (it counts against the record's budget);
// the process keeps running.
type PanicError struct {
	Value any
	Stack []byte
}

// Error describes the panic.
func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// recoverHandler turns a panic of the handler call it is deferred in into
// a *PanicError in *err.
func recoverHandler(err *error) {
	if r := recover(); r != nil {
		*err = &PanicError{Value: r, Stack: debug.Stack()}
	}
}
