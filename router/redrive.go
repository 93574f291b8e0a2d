package router

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// RedriveOfHeader is the reserved record header that marks a command
// re-produced from a dead letter (docs/design.md#dead-letters): its value
// names the dead letter it came from. Only [Router.Redrive] writes it;
// user headers cannot (they must not start with [ReservedHeaderPrefix]),
// and [Decode] leaves it out of Command.Headers like every reserved
// header.
const RedriveOfHeader = ReservedHeaderPrefix + "redrive-of"

// ErrNoRedriveSource is matched by the error [Router.Redrive] returns
// when it is not told which dead letter the command comes from.
var ErrNoRedriveSource = errors.New("router: a redrive needs the dead letter it comes from")

// Redrive sends cmd as a new command, exactly as [Router.Send] does (same
// validation, partition, errors and metrics), with one more header,
// [RedriveOfHeader], whose value is of: the ID of the dead letter cmd was
// re-produced from (`workrouter dlq redrive`). An empty of fails with
// [ErrNoRedriveSource] and sends nothing. Safe to call from any goroutine,
// but not from a SendAsync callback.
func (r *Router) Redrive(ctx context.Context, cmd Command, of string) (Result, error) {
	if of == "" {
		return Result{}, ErrNoRedriveSource
	}
	return r.sendSync(ctx, cmd, &kgo.RecordHeader{Key: RedriveOfHeader, Value: []byte(of)})
}
