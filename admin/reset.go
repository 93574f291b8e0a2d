package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/observe"
	"github.com/workrouter/workrouter/internal/topicid"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// ProblemKind names what is wrong with a scope.
type ProblemKind string

// The problems Diagnose names.
const (
	// TopicRecreated: the topic's ID is not the one the checkpoint was
	// taken on.
	TopicRecreated ProblemKind = "topic_recreated"
	// LogTruncated: the checkpoint is past the log's end.
	LogTruncated ProblemKind = "log_truncated"
	// RetentionLoss: the log starts past the checkpoint: records were
	// deleted before they were applied.
	RetentionLoss ProblemKind = "retention_loss"
	// EpochRegressed: the group's epoch is below the stored holder's
	// (KIP-848 groups, whose epoch the broker reports).
	EpochRegressed ProblemKind = "epoch_regressed"
	// HolderGone: the stored holder is not a member of the group while
	// another member is assigned the partition, and the log shows nothing
	// wrong: the owner's claim did not replace the holder, so it was
	// refused (for a classic group, whose epochs the broker does not
	// report, the sign that its generations went backwards).
	HolderGone ProblemKind = "holder_gone"
)

// Problem is one thing wrong with a scope.
type Problem struct {
	Kind   ProblemKind
	Detail string
}

// Report is one scope's fence next to what the broker says.
type Report struct {
	Fence sink.Fence
	// Log is the partition's log as the broker shows it (TopicID empty if
	// the broker has no topic IDs or the topic does not exist).
	Log sink.Observed
	// TopicExists is false when the broker does not know the topic.
	TopicExists bool
	// Committed is Kafka's committed offset of the group (-1 if none).
	Committed int64
	// Owner is the member assigned the partition now ("" if none), and
	// Members the group's member count.
	Owner   string
	Members int
	// HolderIsMember reports whether the stored holder is a member now.
	HolderIsMember bool
	// GroupEpoch is a KIP-848 group's epoch (-1 for a classic group or
	// none).
	GroupEpoch int32
	Problems   []Problem
}

// Lost is how many records the report's retention loss lost (0 if none).
func (r Report) Lost() int64 {
	if r.TopicExists && r.Log.TopicID != "" && r.Log.LogStart > r.Fence.NextOffset {
		return r.Log.LogStart - r.Fence.NextOffset
	}
	return 0
}

// ExpectToken is a short, stable digest of the fence as it is now (holder,
// checkpoint, topic ID): an operator copies it from a dry run and gives it
// back, and the reset proceeds only if the fence did not move meanwhile.
func ExpectToken(f sink.Fence) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%d\x00%s\x00%d\x00%s", f.Holder.Epoch, f.Holder.Member, f.NextOffset, f.TopicID)))
	return hex.EncodeToString(h[:4])
}

// Diagnose reads every fence of group and topic from l and what the
// brokers (through cl) say of the topic's log and of the group, and names
// each scope's problems. The topic's ID is read from the brokers, never
// from cl's metadata cache. It may be called from any goroutine.
func Diagnose(ctx context.Context, cl *kgo.Client, l fenceadmin.Lister, group, topic string) ([]Report, error) {
	all, err := l.Fences(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: reading the sink's fences: %w", err)
	}
	var reports []Report
	for _, f := range all {
		if f.Scope.Group == group && f.Scope.Topic == topic {
			reports = append(reports, Report{Fence: f, Committed: -1, GroupEpoch: -1})
		}
	}
	if len(reports) == 0 {
		return nil, nil
	}
	look, err := observe.ReadLog(ctx, cl, topic)
	exists := err == nil
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, fmt.Errorf("admin: %w", err)
	}
	committed, _ := kadm.NewClient(cl).FetchOffsets(ctx, group) // a group with no commits: nothing committed
	owners, members, groupEpoch := groupView(ctx, cl, group, topic, look.ID)
	id := look.ID
	starts, ends := look.Starts, look.Ends
	for i := range reports {
		r := &reports[i]
		p := r.Fence.Scope.Partition
		r.TopicExists, r.Members, r.GroupEpoch = exists, len(members), groupEpoch
		r.Owner = owners[p]
		r.HolderIsMember = !r.Fence.Holder.IsZero() && slices.Contains(members, r.Fence.Holder.Member)
		if c, ok := committed.Lookup(topic, p); ok && c.Err == nil {
			r.Committed = c.At
		}
		if exists && id != ([16]byte{}) {
			r.Log.TopicID = topicid.Format(id)
			if s, ok := starts.Lookup(topic, p); ok && s.Err == nil {
				r.Log.LogStart = s.Offset
			}
			if e, ok := ends.Lookup(topic, p); ok && e.Err == nil {
				r.Log.LogEnd = e.Offset
			}
			if _, _, err := sink.CheckLog(r.Fence.Scope, true, r.Fence.TopicID, sink.Checkpoint{NextOffset: r.Fence.NextOffset, Done: r.Fence.Done}, r.Log); err != nil {
				var lc *sink.LogChangedError
				if errors.As(err, &lc) {
					r.Problems = append(r.Problems, Problem{Kind: logKind(lc), Detail: lc.What()})
				}
			}
		}
		h := r.Fence.Holder
		if !h.IsZero() && groupEpoch >= 0 && groupEpoch < h.Epoch {
			r.Problems = append(r.Problems, Problem{Kind: EpochRegressed,
				Detail: fmt.Sprintf("the group's epoch is %d, below the stored holder's %d: the group was deleted and recreated, or its coordinator lost its state", groupEpoch, h.Epoch)})
		}
		if !h.IsZero() && !r.HolderIsMember && r.Owner != "" && r.Owner != h.Member && len(r.Problems) == 0 {
			r.Problems = append(r.Problems, Problem{Kind: HolderGone,
				Detail: fmt.Sprintf("the stored holder %s (epoch %d) is not a member of the group, and %s, which is assigned the partition, has not replaced it: its claims are refused, so the group's epochs went backwards", h.Member, h.Epoch, r.Owner)})
		}
	}
	return reports, nil
}

func logKind(lc *sink.LogChangedError) ProblemKind {
	switch lc.Case {
	case sink.ErrTopicRecreated:
		return TopicRecreated
	case sink.ErrLogTruncated:
		return LogTruncated
	}
	return RetentionLoss
}

// groupView returns who is assigned each partition of topic (matched by
// topicID or name), the members, and a KIP-848 group's epoch (-1
// otherwise), from observe.DescribeGroup; a group it cannot describe has
// no members.
func groupView(ctx context.Context, cl *kgo.Client, group, topic string, topicID [16]byte) (map[int32]string, []string, int32) {
	g, err := observe.DescribeGroup(ctx, cl, group, topic, topicID, observe.Any)
	if err != nil {
		return map[int32]string{}, nil, -1
	}
	return g.Owners(), g.MemberIDs(), g.Epoch
}

// Checkpoint says what a reset does to the scope's checkpoint.
type Checkpoint struct {
	// Keep keeps NextOffset (and the log identity): the epochs went
	// backwards, the log is intact.
	Keep bool
	// RestartAt, if Keep is false, is where the scope restarts on the log
	// as it is now: "earliest" (the log start), "latest" (its end), or an
	// offset between them, as text.
	RestartAt string
}

// ParseCheckpoint reads a Checkpoint's RestartAt: earliest, latest or an
// offset. It may be called from any goroutine.
func ParseCheckpoint(restartAt string) (Checkpoint, error) {
	switch restartAt {
	case "earliest", "latest":
		return Checkpoint{RestartAt: restartAt}, nil
	}
	if n, err := strconv.ParseInt(restartAt, 10, 64); err != nil || n < 0 {
		return Checkpoint{}, fmt.Errorf("%w: Checkpoint.RestartAt %q: want earliest, latest or an offset", ErrBadRequest, restartAt)
	}
	return Checkpoint{RestartAt: restartAt}, nil
}

// Request is one guarded reset.
type Request struct {
	Scope epochs.Scope
	// Expect is ExpectToken of the fence the operator inspected: the
	// reset proceeds only if the fence is still that one.
	Expect     string
	Checkpoint Checkpoint
	Reason     string
	// Force resets although the diagnosis names no problem.
	Force bool
}

// Errors of Reset, each matched by errors.Is.
var (
	// ErrBadRequest: the request itself is wrong (no reason, a checkpoint
	// that does not fit the problem, an offset outside the log).
	ErrBadRequest = errors.New("admin: bad reset request")
	// ErrNoCause: the live group and the log show no reason for a reset;
	// Force overrides.
	ErrNoCause = errors.New("admin: the group and the log show no reason to reset this fence")
	// ErrMoved: the fence is not the one the operator inspected (its
	// ExpectToken differs).
	ErrMoved = errors.New("admin: the fence changed since it was inspected")
)

// Result is what a reset did.
type Result struct {
	Before, After sink.Fence
	Report        Report
	// Resumes says whether a running worker will pick the reset up by
	// itself (a member is assigned the partition: it claims again, with a
	// proof of membership, within its ReclaimInterval) or needs to start.
	Resumes bool
}

// ResetSink is what Reset needs from a sink: its fences (to diagnose the
// scope) and the audited compare-and-set reset.
type ResetSink interface {
	fenceadmin.Lister
	fenceadmin.Resetter
}

// Refusal names why a planned reset would be refused ("" if it would
// proceed).
type Refusal string

// The refusals of a plan.
const (
	// RefusedNoCause: the group and the log show no reason to reset the
	// fence, and the request does not force it (ErrNoCause).
	RefusedNoCause Refusal = "no_cause"
	// RefusedKeepOnChangedLog: the checkpoint is to be kept, but the log
	// changed under it, so it would never resume (ErrBadRequest).
	RefusedKeepOnChangedLog Refusal = "keep_on_changed_log"
	// RefusedNoLog: a restart on the log, but the brokers show none for
	// the topic (ErrBadRequest).
	RefusedNoLog Refusal = "no_log"
	// RefusedOffsetOutsideLog: a restart at an offset outside the log as
	// it is now (ErrBadRequest).
	RefusedOffsetOutsideLog Refusal = "offset_outside_log"
	// RefusedBadCheckpoint: the Checkpoint neither keeps nor names a
	// restart (ErrBadRequest).
	RefusedBadCheckpoint Refusal = "bad_checkpoint"
)

// PlanRequest is a dry run of resets: which scopes, and what the resets
// would do to them.
type PlanRequest struct {
	Group, Topic string
	// Partitions are the partitions to plan; nil plans every partition of
	// Group and Topic that the sink has a fence for.
	Partitions []int32
	Checkpoint Checkpoint
	// Force plans the reset of a fence the diagnosis names no problem of.
	Force bool
}

// ResetPlan is one scope's diagnosis and what a reset of it would do.
type ResetPlan struct {
	Report Report
	// Expect is the ExpectToken of the fence as diagnosed: a Request
	// carrying it proceeds only if the fence did not move meanwhile.
	Expect string
	// Checkpoint is the scope's NextOffset after the reset (-1 if the
	// reset would be refused).
	Checkpoint int64
	// TopicID is the log Checkpoint refers to after the reset.
	TopicID string
	// Forced says the reset proceeds only because the request forces it.
	Forced bool
	// Refused says why the reset would be refused ("" if it would
	// proceed), and Err is the error Reset would return then (matching
	// ErrNoCause or ErrBadRequest).
	Refused Refusal
	Err     error
	// Resumes says whether a running worker would pick the reset up by
	// itself (a member is assigned the partition).
	Resumes bool
}

// Plan is the dry run of resets (docs/design.md#admin-reset): it
// diagnoses the scopes of req (Diagnose) and says, for each, what a reset
// with req's checkpoint would change, its expect token, and whether it
// would be refused and why — the rules Reset applies, which Reset takes
// from here. It changes nothing. The plans are in the sink's order of the
// fences; a partition the sink has no fence for is left out. It may be
// called from any goroutine.
func Plan(ctx context.Context, cl *kgo.Client, l fenceadmin.Lister, req PlanRequest) ([]ResetPlan, error) {
	reports, err := Diagnose(ctx, cl, l, req.Group, req.Topic)
	if err != nil {
		return nil, err
	}
	var plans []ResetPlan
	for _, r := range reports {
		if req.Partitions == nil || slices.Contains(req.Partitions, r.Fence.Scope.Partition) {
			plans = append(plans, plan(r, req.Checkpoint, req.Force))
		}
	}
	return plans, nil
}

// plan holds the reset rules: what a reset of r with cp (forced or not)
// does, or why it is refused.
func plan(r Report, cp Checkpoint, force bool) ResetPlan {
	p := ResetPlan{Report: r, Expect: ExpectToken(r.Fence), Checkpoint: -1, Resumes: r.Owner != ""}
	scope := r.Fence.Scope
	refuse := func(why Refusal, err error) ResetPlan {
		p.Refused, p.Err = why, err
		return p
	}
	if len(r.Problems) == 0 {
		if !force {
			return refuse(RefusedNoCause, fmt.Errorf("%w: %s: holder %s, checkpoint %d, the log and the group agree; Request.Force resets anyway (the live owner is fenced until it claims again; docs/design.md#admin-reset)",
				ErrNoCause, scope, holder(r.Fence.Holder), r.Fence.NextOffset))
		}
		p.Forced = true
	}
	if cp.Keep {
		for _, pr := range r.Problems {
			if pr.Kind == TopicRecreated || pr.Kind == LogTruncated || pr.Kind == RetentionLoss {
				return refuse(RefusedKeepOnChangedLog, fmt.Errorf("%w: %s: %s; keeping the checkpoint would not resume the scope: Checkpoint.RestartAt restarts it on the log (earliest, latest or an offset; docs/design.md#admin-reset)",
					ErrBadRequest, scope, pr.Detail))
			}
		}
		p.Checkpoint, p.TopicID = r.Fence.NextOffset, r.Fence.TopicID
		return p
	}
	if cp.RestartAt == "" {
		return refuse(RefusedBadCheckpoint, fmt.Errorf("%w: %s: the Checkpoint neither keeps the checkpoint (Keep) nor says where to restart (RestartAt)", ErrBadRequest, scope))
	}
	if r.Log.TopicID == "" {
		return refuse(RefusedNoLog, fmt.Errorf("%w: %s: the broker shows no log for %s (does the topic exist?); a restart needs the log", ErrBadRequest, scope, scope.Topic))
	}
	switch cp.RestartAt {
	case "earliest":
		p.Checkpoint = r.Log.LogStart
	case "latest":
		p.Checkpoint = r.Log.LogEnd
	default:
		n, err := strconv.ParseInt(cp.RestartAt, 10, 64)
		if err != nil || n < r.Log.LogStart || n > r.Log.LogEnd {
			return refuse(RefusedOffsetOutsideLog, fmt.Errorf("%w: %s: Checkpoint.RestartAt %q is not an offset of the log [%d, %d]", ErrBadRequest, scope, cp.RestartAt, r.Log.LogStart, r.Log.LogEnd))
		}
		p.Checkpoint = n
	}
	p.TopicID = r.Log.TopicID
	return p
}

// Reset performs req on s (docs/design.md#admin-reset): it plans the reset
// of req.Scope (Plan), checks that the fence is the one the operator
// inspected (ErrMoved), is refused as the plan says (ErrNoCause when
// nothing is wrong unless req.Force; ErrBadRequest for a checkpoint that
// does not fit), and resets the fence in the sink — a compare-and-set
// there too — with the diagnosis, the old and the new state in the audit
// row. It may be called from any goroutine.
func Reset(ctx context.Context, cl *kgo.Client, s ResetSink, req Request) (Result, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return Result{}, fmt.Errorf("%w: Request.Reason is empty: a reset needs a reason (it is recorded)", ErrBadRequest)
	}
	plans, err := Plan(ctx, cl, s, PlanRequest{Group: req.Scope.Group, Topic: req.Scope.Topic,
		Partitions: []int32{req.Scope.Partition}, Checkpoint: req.Checkpoint, Force: req.Force})
	if err != nil {
		return Result{}, err
	}
	if len(plans) == 0 {
		return Result{}, fmt.Errorf("admin: %s: %w", req.Scope, sink.ErrNotFound)
	}
	pl := plans[0]
	r := pl.Report
	res := Result{Before: r.Fence, Report: r, Resumes: pl.Resumes}
	if req.Expect != pl.Expect {
		return res, fmt.Errorf("%w: %s is now %s (expect %s), not %s: inspect it again", ErrMoved, req.Scope, describe(r.Fence), pl.Expect, req.Expect)
	}
	if pl.Err != nil {
		return res, pl.Err
	}
	sreq := fenceadmin.ResetRequest{Scope: req.Scope, Expect: r.Fence, Reason: req.Reason}
	if !req.Checkpoint.Keep {
		next := pl.Checkpoint
		sreq.NextOffset, sreq.TopicID = &next, pl.TopicID
	}
	detail, _ := json.Marshal(map[string]any{
		"observed": map[string]any{"topic_id": r.Log.TopicID, "log_start": r.Log.LogStart, "log_end": r.Log.LogEnd,
			"committed": r.Committed, "owner": r.Owner, "members": r.Members, "group_epoch": r.GroupEpoch, "problems": r.Problems},
		"before":     map[string]any{"holder": r.Fence.Holder.String(), "next_offset": r.Fence.NextOffset, "topic_id": r.Fence.TopicID},
		"checkpoint": req.Checkpoint, "forced": req.Force,
	})
	sreq.Detail = string(detail)
	before, err := s.ResetFence(ctx, sreq)
	if err != nil {
		return res, fmt.Errorf("admin: resetting %s: %w", req.Scope, err)
	}
	res.Before = before
	res.After = fenceadmin.AfterReset(before, sreq)
	return res, nil
}

func holder(t epochs.Token) string {
	if t.IsZero() {
		return "none"
	}
	return fmt.Sprintf("epoch %d member %s", t.Epoch, t.Member)
}

func describe(f sink.Fence) string {
	return fmt.Sprintf("holder %s, checkpoint %d, topic ID %q", holder(f.Holder), f.NextOffset, f.TopicID)
}
