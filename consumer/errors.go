package consumer

import (
	"errors"
	"fmt"

	"github.com/workrouter/workrouter/sink"
)

// ErrEpochRegressed is matched by the error reported when a claim is fenced
// because the group's epochs went backwards (DESIGN.md hazard 3): the sink
// has seen a higher epoch for the scope than the group coordinator can now
// hand out, so every claim fails until an operator resets the fence.
var ErrEpochRegressed = errors.New("consumer: group epoch went backwards")

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
		"the group's generation went backwards: it was most likely deleted and recreated, or the broker lost its group state (no persistence); "+
		"every claim will fail until an operator resets the fence for this scope with the sink's audited admin reset (sink.Resetter)",
		e.Fenced.Offered.Scope(), e.Fenced.Stored.Epoch, e.Fenced.Stored.Member, e.GroupEpoch, e.Evidence)
}

// Is reports whether target is ErrEpochRegressed.
func (e *EpochRegressedError) Is(target error) bool { return target == ErrEpochRegressed }

// Unwrap returns the sink's fenced error.
func (e *EpochRegressedError) Unwrap() error { return e.Fenced }
