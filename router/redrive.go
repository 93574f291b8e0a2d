package router

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
)

// ErrNoRedriveSource is matched by the error [Router.Redrive] returns
// when it is not told which dead letter the command comes from.
var ErrNoRedriveSource = errors.New("router: a redrive needs the dead letter it comes from")

// ErrNoRedriveGroup is matched by the error [Router.Redrive] returns when
// it is not told which consumer group the redrive is for.
var ErrNoRedriveGroup = errors.New("router: a redrive needs the consumer group it is for")

// RedriveOptions say where a redriven command comes from and which group
// is to apply it. Both are required.
type RedriveOptions struct {
	// DeadLetter is the ID of the dead letter the command is re-produced
	// from: the value of the [envelope.RedriveOfHeader] header.
	DeadLetter string
	// Group is the consumer group the redrive is for, the group that
	// dead-lettered the command: the value of the
	// [envelope.RedriveForHeader] header. The command goes to a topic that
	// every group of the topic reads; the workers of the other groups
	// skip it.
	Group string
}

// Redrive sends cmd again, from a dead letter, exactly as [Router.Send]
// does (same validation, partition, errors and metrics) with two more
// headers: [envelope.RedriveOfHeader] naming o.DeadLetter and
// [envelope.RedriveForHeader] naming o.Group. cmd keeps its ID (the dead
// letter's original command's): a worker that already applied that
// command skips the redrive as a duplicate; a cmd without an ID is given
// one, as Send gives it. cmd.RedriveFor (set when cmd was decoded from the
// dead letter of an earlier redrive) is replaced by o.Group. An empty
// o.DeadLetter fails with [ErrNoRedriveSource], an empty o.Group with
// [ErrNoRedriveGroup]; either sends nothing. Safe to call from any
// goroutine, but not from a SendAsync callback.
func (r *Router) Redrive(ctx context.Context, cmd Command, o RedriveOptions) (Result, error) {
	if o.DeadLetter == "" {
		return Result{}, ErrNoRedriveSource
	}
	if o.Group == "" {
		return Result{}, fmt.Errorf("%w: dead letter %s", ErrNoRedriveGroup, o.DeadLetter)
	}
	cmd.RedriveFor = ""
	return r.sendSync(ctx, cmd, []kgo.RecordHeader{
		{Key: envelope.RedriveOfHeader, Value: []byte(o.DeadLetter)},
		{Key: envelope.RedriveForHeader, Value: []byte(o.Group)},
	})
}
