package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// PartitionsRequest is a guarded reset of several partitions of one
// group and topic, each guarded by its own expect token.
type PartitionsRequest struct {
	Group, Topic string
	// Expect maps each partition to reset to the ExpectToken of the fence
	// the operator inspected (ResetPlan.Expect): a partition proceeds only
	// if its fence is still that one.
	Expect     map[int32]string
	Checkpoint Checkpoint
	Reason     string
	// Force resets fences the diagnosis names no problem of.
	Force bool
}

// PartitionError is why one partition of a ResetPartitions was not reset.
type PartitionError struct {
	Partition int32
	// Refused is the plan's refusal ("" when the fence moved, is missing
	// or the sink failed).
	Refused Refusal
	// Err matches ErrMoved, ErrNoCause, ErrBadRequest, sink.ErrNotFound or
	// the sink's error.
	Err error
}

// PartitionsError is the error of a ResetPartitions: every partition that
// was not reset, and why. Done lists the partitions reset before a
// failure (empty when the plans refused, so nothing changed). errors.Is
// and errors.As see each partition's error.
type PartitionsError struct {
	Partitions []PartitionError
	Done       []int32
}

// Error lists each partition's error and whether anything changed.
func (e *PartitionsError) Error() string {
	msgs := make([]string, len(e.Partitions))
	for i, p := range e.Partitions {
		msgs[i] = fmt.Sprintf("partition %d: %v", p.Partition, p.Err)
	}
	tail := "nothing changed"
	if len(e.Done) > 0 {
		tail = fmt.Sprintf("partitions %v were reset before it", e.Done)
	}
	return fmt.Sprintf("admin: %s (%s)", strings.Join(msgs, "; "), tail)
}

// Unwrap returns each partition's error.
func (e *PartitionsError) Unwrap() []error {
	out := make([]error, len(e.Partitions))
	for i, p := range e.Partitions {
		out[i] = p.Err
	}
	return out
}

// ResetPartitions resets the partitions of req.Expect (docs/design.md#admin-reset),
// each as Reset does, in partition order. It first plans them all and
// changes nothing unless every plan proceeds: every fence is still the one
// its token names (ErrMoved), and none is refused (ErrNoCause,
// ErrBadRequest) or missing (sink.ErrNotFound); the error is then a
// *PartitionsError listing each partition that would not proceed. Each
// reset is its own compare-and-set in the sink, so a fence that moves
// between the plan and its reset stops the resets there: the
// *PartitionsError names it and Done the partitions already reset. The
// results are those of the partitions reset. It may be called from any
// goroutine.
func ResetPartitions(ctx context.Context, cl *kgo.Client, s ResetSink, req PartitionsRequest) ([]Result, error) {
	switch {
	case strings.TrimSpace(req.Reason) == "":
		return nil, fmt.Errorf("%w: Reason is empty: a reset needs a reason (it is recorded)", ErrBadRequest)
	case len(req.Expect) == 0:
		return nil, fmt.Errorf("%w: no partition to reset (Expect is empty)", ErrBadRequest)
	}
	parts := slices.Sorted(maps.Keys(req.Expect))
	plans, err := Plan(ctx, cl, s, PlanRequest{Group: req.Group, Topic: req.Topic, Partitions: parts, Checkpoint: req.Checkpoint, Force: req.Force})
	if err != nil {
		return nil, err
	}
	byPart := make(map[int32]ResetPlan, len(plans))
	for _, p := range plans {
		byPart[p.Report.Fence.Scope.Partition] = p
	}
	var refused []PartitionError
	for _, p := range parts {
		pl, ok := byPart[p]
		scope := epochs.Scope{Group: req.Group, Topic: req.Topic, Partition: p}
		switch {
		case !ok:
			refused = append(refused, PartitionError{Partition: p, Err: fmt.Errorf("%s: %w", scope, sink.ErrNotFound)})
		case req.Expect[p] != pl.Expect:
			refused = append(refused, PartitionError{Partition: p, Err: fmt.Errorf("%w: %s is now %s (expect %s), not %s: inspect it again",
				ErrMoved, scope, describe(pl.Report.Fence), pl.Expect, req.Expect[p])})
		case pl.Err != nil:
			refused = append(refused, PartitionError{Partition: p, Refused: pl.Refused, Err: pl.Err})
		}
	}
	if len(refused) > 0 {
		return nil, &PartitionsError{Partitions: refused}
	}
	results := make([]Result, 0, len(parts))
	var done []int32
	for _, p := range parts {
		res, err := Reset(ctx, cl, s, Request{Scope: epochs.Scope{Group: req.Group, Topic: req.Topic, Partition: p},
			Expect: req.Expect[p], Checkpoint: req.Checkpoint, Reason: req.Reason, Force: req.Force})
		if err != nil {
			var refusal Refusal
			if errors.Is(err, ErrNoCause) || errors.Is(err, ErrBadRequest) {
				refusal = byPart[p].Refused
			}
			return results, &PartitionsError{Partitions: []PartitionError{{Partition: p, Refused: refusal, Err: err}}, Done: done}
		}
		results = append(results, res)
		done = append(done, p)
	}
	slices.SortFunc(results, func(a, b Result) int { return cmp.Compare(a.Before.Scope.Partition, b.Before.Scope.Partition) })
	return results, nil
}
