package sink

import (
	"errors"
	"fmt"

	"github.com/workrouter/workrouter/epochs"
)

// ErrLogChanged is matched by every error reporting that the log under a
// scope's checkpoint is not the log the checkpoint was taken on
// (docs/design.md#log-identity). It never matches ErrFenced: the claimer
// is not a zombie, the log changed, and an operator must decide (see
// package admin). Each case also matches its own sentinel below.
var ErrLogChanged = errors.New("sink: the log under the checkpoint changed")

// The cases of a *LogChangedError, each matched by errors.Is.
var (
	// ErrTopicRecreated: the topic's ID is not the one the checkpoint was
	// taken on; the topic was deleted and created again.
	ErrTopicRecreated = errors.New("sink: the topic was recreated")
	// ErrLogTruncated: the checkpoint is past the log's end; the log was
	// truncated below it (a broker lost its data, an unclean leader
	// election).
	ErrLogTruncated = errors.New("sink: the log was truncated below the checkpoint")
	// ErrRetentionLoss: the log's start is past the checkpoint; records
	// were deleted (by retention or DeleteRecords) before they were
	// applied.
	ErrRetentionLoss = errors.New("sink: records were deleted before they were applied")
)

// LogChangedError reports a claim refused because the log under the
// scope's checkpoint changed. It matches ErrLogChanged and the sentinel
// of its case (Case).
type LogChangedError struct {
	Scope epochs.Scope
	// Case is ErrTopicRecreated, ErrLogTruncated or ErrRetentionLoss.
	Case error
	// StoredTopicID and NextOffset are the scope's stored log identity and
	// checkpoint; Observed is what the claimer saw at the broker.
	StoredTopicID string
	NextOffset    int64
	Observed      Observed
}

// Lost is how many records the case lost for good: records deleted before
// they were applied (ErrRetentionLoss); 0 for the other cases, where the
// records still exist or never did.
func (e *LogChangedError) Lost() int64 {
	if e.Case == ErrRetentionLoss {
		return e.Observed.LogStart - e.NextOffset
	}
	return 0
}

// Error names the case, the evidence and the way out.
func (e *LogChangedError) Error() string {
	what := e.What()
	switch e.Case {
	case ErrTopicRecreated:
		what = "the topic was recreated: " + what
	case ErrLogTruncated:
		what = "the log was truncated below the checkpoint: " + what
	}
	return fmt.Sprintf("sink: claim of %s refused: %s; nothing is applied on this partition until an operator decides with an admin reset (admin.Reset: keep the checkpoint or restart on the log; docs/design.md#admin-reset)",
		e.Scope, what)
}

// What gives the evidence of the case, without naming the case (Case
// does) or the refusal around it: for diagnoses that name the case
// themselves. It may be called from any goroutine.
func (e *LogChangedError) What() string {
	switch e.Case {
	case ErrTopicRecreated:
		return fmt.Sprintf("the checkpoint %d was taken on topic ID %s, the topic now has ID %s",
			e.NextOffset, e.StoredTopicID, e.Observed.TopicID)
	case ErrLogTruncated:
		return fmt.Sprintf("the sink has applied up to offset %d, the log now ends at %d (a broker lost its data, or an unclean leader election)",
			e.NextOffset, e.Observed.LogEnd)
	case ErrRetentionLoss:
		return fmt.Sprintf("%d records were deleted before they were applied: the checkpoint is %d, the log now starts at %d (retention or DeleteRecords)",
			e.Lost(), e.NextOffset, e.Observed.LogStart)
	}
	return fmt.Sprint(e.Case)
}

// Is reports whether target is ErrLogChanged or the error's case.
func (e *LogChangedError) Is(target error) bool { return target == ErrLogChanged || target == e.Case }

// checkLog applies the continuity rules of Claim to a scope's stored topic
// ID and NextOffset and what the claimer observed; found is false for a
// scope the sink has no row for. It returns the NextOffset the claim
// starts from (the log start for a new scope) and the topic ID to store,
// or a *LogChangedError.
func checkLog(scope epochs.Scope, found bool, storedTopicID string, next int64, obs Observed) (int64, string, error) {
	if obs.TopicID == "" {
		return next, storedTopicID, nil
	}
	if !found {
		return max(obs.LogStart, 0), obs.TopicID, nil
	}
	fail := func(c error) (int64, string, error) {
		return 0, "", &LogChangedError{Scope: scope, Case: c, StoredTopicID: storedTopicID, NextOffset: next, Observed: obs}
	}
	switch {
	case storedTopicID != "" && storedTopicID != obs.TopicID:
		return fail(ErrTopicRecreated)
	case next > obs.LogEnd:
		return fail(ErrLogTruncated)
	case obs.LogStart > next:
		return fail(ErrRetentionLoss)
	}
	return next, obs.TopicID, nil
}
