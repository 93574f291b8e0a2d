package consumer

import (
	"errors"
	"fmt"

	"github.com/workrouter/workrouter/sink"
)

// ErrEpochRegressed is matched by the error reported when a claim is fenced
// because the group's epochs went backwards (docs/design.md#hazard-3): the sink
// has seen a higher epoch for the scope than the group coordinator can now
// hand out, so every claim fails until an operator resets the fence.
var ErrEpochRegressed = errors.New("consumer: group epoch went backwards")

// ErrFenceReset is matched by the error a partition is blocked with when an
// operator reset its fence while this member held it (a forced `workrouter
// fences reset` of a live scope, docs/design.md#admin-reset): the tenure's
// next write was refused, and the Worker claims the partition again —
// proving its membership — and resumes where the sink now says.
var ErrFenceReset = errors.New("consumer: the fence was reset while this member held it")

// ErrResourceFenced is matched by the error a partition is blocked with
// when a resource its handler called refused the tenure's token (a
// fencehttp.Guard's 409, or any handler error matching sink.ErrFenced
// that the sink itself did not return): the group did not move the
// partition, so the Worker does not give it up; it waits, blocked, and
// claims and applies it again every Config.ReclaimInterval, resuming by
// itself once the resource's fence is reset (docs/fenced-resources.md).
var ErrResourceFenced = errors.New("consumer: a resource the handler called refused this tenure's token")

// ErrMemberRejoined is matched by the error a partition is blocked with
// (cause BlockMemberChanged) when the sink refused its tenure's token
// because the token names a member ID this client no longer has: the
// coordinator forgot the member (a broker that lost its group state, a
// member expired while it rejoined) and the client rejoined under a new
// member ID, keeping the partition without a new assignment. The Worker
// ends the tenure and claims the partition again with its current token.
var ErrMemberRejoined = errors.New("consumer: this client rejoined the group under a new member ID and kept the partition")

// ErrOlderEpochProofRefused is matched by the error of a KIP-848 proof of
// membership (docs/design.md#admin-reset) that the coordinator refused
// with STALE_MEMBER_EPOCH at the token's epoch while the member had moved
// to a later one. Apache Kafka accepts an offset commit at an epoch below
// the member's current one only from 4.3 on (KIP-1251), and only for a
// partition the member still holds from that epoch; before 4.3 every
// membership change moves every member's epoch, and a partition kept
// through a rebalance cannot be proven until the member is assigned it
// again (docs/kafka.md). The error also matches kerr.StaleMemberEpoch.
var ErrOlderEpochProofRefused = errors.New("consumer: the coordinator refused the proof of membership at the token's epoch, below the member's current epoch")

// EpochRegressedError reports a fenced claim diagnosed as a generation that
// went backwards. It matches ErrEpochRegressed and, through Unwrap, the
// underlying *sink.FencedError and sink.ErrFenced.
type EpochRegressedError struct {
	Fenced *sink.FencedError
	// GroupEpoch is the coordinator's current group epoch when known
	// (KIP-848), or the epoch this member was assigned at (classic).
	GroupEpoch int32
	// Evidence says how the regression was detected.
	Evidence string
}

// Error names the likely causes and the remedy.
func (e *EpochRegressedError) Error() string {
	return fmt.Sprintf("consumer: claim of %s refused: the sink has seen epoch %d (member %q) but the group now hands out epoch %d (%s); "+
		"the group's epochs went backwards or started over: it was most likely deleted and recreated, or the broker lost its state; "+
		"every claim will fail until an operator resets the fence for this scope (admin.Reset, docs/design.md#admin-reset; "+
		"keep the checkpoint if the log is intact, restart on the log if the topic was recreated too)",
		e.Fenced.Offered.Scope(), e.Fenced.Stored.Epoch, e.Fenced.Stored.Member, e.GroupEpoch, e.Evidence)
}

// Is reports whether target is ErrEpochRegressed.
func (e *EpochRegressedError) Is(target error) bool { return target == ErrEpochRegressed }

// Unwrap returns the sink's fenced error.
func (e *EpochRegressedError) Unwrap() error { return e.Fenced }

// FatalError is what Worker.Err returns when the Worker stopped by itself:
// the group refused this member for a reason no retry can fix (a missing
// authorization, an invalid session timeout, an unsupported protocol…).
// Unwrap gives the client's error, so errors.Is matches the kerr code.
type FatalError struct {
	Err error
}

// Error describes why the Worker stopped.
func (e *FatalError) Error() string {
	return "consumer: worker stopped: the group refused this member and a retry cannot fix it: " + e.Err.Error()
}

// Unwrap returns the client's error.
func (e *FatalError) Unwrap() error { return e.Err }

// ErrNoHandler is matched by the error a batch fails with when a record's
// command Type has no registered handler. The batch is retried, never skipped.
var ErrNoHandler = errors.New("consumer: no handler for command type")

// ErrUndecodable is matched by the error a batch fails with when a record
// is not a workrouter command. The batch is retried, never skipped.
var ErrUndecodable = errors.New("consumer: record is not a workrouter command")
