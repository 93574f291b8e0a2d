package router

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
)

// ErrNoRedriveSource is matched by the error [Router.Redrive] returns
// when it is not told which dead letter the command comes from.
var ErrNoRedriveSource = errors.New("router: a redrive needs the dead letter it comes from")

// Redrive sends cmd as a new command, exactly as [Router.Send] does (same
// validation, partition, errors and metrics), with one more header,
// [envelope.RedriveOfHeader], whose value is of: the ID of the dead letter cmd was
// re-produced from (`workrouter dlq redrive`). An empty of fails with
// [ErrNoRedriveSource] and sends nothing. Safe to call from any goroutine,
// but not from a SendAsync callback.
func (r *Router) Redrive(ctx context.Context, cmd Command, of string) (Result, error) {
	if of == "" {
		return Result{}, ErrNoRedriveSource
	}
	return r.sendSync(ctx, cmd, &kgo.RecordHeader{Key: envelope.RedriveOfHeader, Value: []byte(of)})
}
