package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/internal/observe"
	"github.com/workrouter/workrouter/internal/topicid"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// StatusRequest says what Status describes.
type StatusRequest struct {
	Group, Topic string
	// Sink, if not nil, adds the sink's fences of Group and Topic, with
	// each partition's problems (Diagnose).
	Sink fenceadmin.Lister
	// DeadLetters, if not nil, adds each fenced partition's count of open
	// dead letters (nil: the sink stores none).
	DeadLetters dlq.Store
	// CheckKeys, if positive, reads the last CheckKeys records of every
	// partition and checks their keys against Partitioner, with a client
	// of its own built from ClientOpts (the routing check,
	// docs/design.md#hazard-11).
	CheckKeys   int
	Partitioner envelope.Partitioner
	ClientOpts  []kgo.Opt
}

// StatusReport is one consumer group on one topic, as Status describes
// it; its JSON is `workrouter status --json`'s.
type StatusReport struct {
	Group string `json:"group"`
	Topic string `json:"topic"`
	// TopicID is the topic's ID as Kafka's tools print it (empty for a
	// broker without topic IDs).
	TopicID string `json:"topic_id,omitempty"`
	// Protocol is "classic" or "consumer" (KIP-848).
	Protocol string `json:"protocol"`
	State    string `json:"state"`
	// Assignor is the classic protocol's balancer or the KIP-848 assignor.
	Assignor string `json:"assignor,omitempty"`
	// GroupEpoch is the KIP-848 group epoch (absent for classic groups).
	GroupEpoch *int32            `json:"group_epoch,omitempty"`
	Members    []StatusMember    `json:"members"`
	Partitions []StatusPartition `json:"partitions"`
	TotalLag   int64             `json:"total_lag"`
	// Sink names the sink whose fences are shown (no password); Status
	// leaves it empty for its caller to fill.
	Sink string `json:"sink,omitempty"`
	// Routing is the check of recent records' keys against the
	// partitioner; absent without StatusRequest.CheckKeys.
	Routing *RoutingReport `json:"routing,omitempty"`
}

// StatusMember is one member of the group.
type StatusMember struct {
	ClientID   string `json:"client_id"`
	MemberID   string `json:"member_id"`
	Host       string `json:"host"`
	InstanceID string `json:"instance_id,omitempty"`
	// MemberEpoch is the KIP-848 member epoch (absent for classic groups).
	MemberEpoch *int32 `json:"member_epoch,omitempty"`
	// Partitions are the partitions of the topic this member owns.
	Partitions []int32 `json:"partitions"`
}

// StatusPartition is one partition of the topic.
type StatusPartition struct {
	Partition int32 `json:"partition"`
	// Owner is the member id of the member that owns it; empty if none.
	Owner       string `json:"owner,omitempty"`
	StartOffset int64  `json:"start_offset"`
	EndOffset   int64  `json:"end_offset"`
	// Committed is the group's committed Kafka offset; null if none.
	Committed *int64 `json:"committed"`
	Lag       int64  `json:"lag"`
	// State is what the worker last reported in the committed offset's
	// metadata (consumer.ParseStateMetadata): "stalled" or "blocked"
	// (with since, attempts and the last error); else "blocked" when a
	// member owns the partition but the sink shows a problem that refuses
	// its claims, "running" when a member owns it, and "unowned" when
	// none does.
	State         string     `json:"state"`
	StateSince    *time.Time `json:"state_since,omitempty"`
	StateAttempts int        `json:"state_attempts,omitempty"`
	StateError    string     `json:"state_error,omitempty"`
	// Sink is the sink's fence for the partition; absent without
	// StatusRequest.Sink or when the sink has never seen the partition.
	Sink *StatusFence `json:"sink,omitempty"`
	// Problems are what is wrong with the partition's fence, the log and
	// the group, in words (Diagnose's, and "reset_pending"); empty when
	// nothing is.
	Problems []StatusProblem `json:"problems,omitempty"`
}

// NeedsAttention reports whether an operator should look at the
// partition: its worker reported it stalled or blocked, or the sink's
// fence, the log and the group show a problem (Problems). A running or
// unowned partition with no problem does not, whatever its lag.
func (p StatusPartition) NeedsAttention() bool {
	return p.State == "stalled" || p.State == "blocked" || len(p.Problems) > 0
}

// NeedsAttention returns the partitions of the report that need
// attention (StatusPartition.NeedsAttention), in the report's order.
func (r StatusReport) NeedsAttention() []int32 {
	var out []int32
	for _, p := range r.Partitions {
		if p.NeedsAttention() {
			out = append(out, p.Partition)
		}
	}
	return out
}

// StatusProblem is one thing wrong with a partition (a Problem, or
// "reset_pending").
type StatusProblem struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// StatusFence is the sink's fence of a partition.
type StatusFence struct {
	// HolderEpoch and HolderMember are the stored holder; null/empty after
	// an admin reset, until the next claim.
	HolderEpoch  *int32 `json:"holder_epoch"`
	HolderMember string `json:"holder_member"`
	// NextOffset is the sink's checkpoint: the first offset not applied.
	NextOffset int64 `json:"next_offset"`
	// TopicID is the log NextOffset refers to (Kafka's topic ID); empty
	// before the first claim that saw one.
	TopicID string `json:"topic_id"`
	// ProofRequired: the fence was reset at least once, and every claim
	// (but the holder's own re-claim) must prove its membership, for good
	// (sink.Fence.ProofRequired).
	ProofRequired bool `json:"proof_required,omitempty"`
	// Duplicates counts the records the sink skipped in the partition's
	// scope because their command ID was applied already
	// (sink.Fence.Duplicates): commands that entered the log twice.
	Duplicates int64 `json:"duplicates_skipped"`
	// Lag is end offset - NextOffset; null when NextOffset is not an
	// offset of the log as it is (the log changed under it).
	Lag *int64 `json:"lag"`
	// OpenDeadLetters counts the partition's dead letters still open;
	// null for a sink that stores none.
	OpenDeadLetters *int `json:"open_dead_letters"`
}

// RoutingReport is Status's check of recent records' keys against the
// partitioner the workers use (docs/design.md#hazard-11).
type RoutingReport struct {
	Partitioner string `json:"partitioner"`
	// Checked is how many keyed records were read.
	Checked int `json:"checked"`
	// Misrouted is how many of them sit on another partition than the one
	// the partitioner maps their key to.
	Misrouted int `json:"misrouted"`
	// ByPartition counts the misrouted records by the partition they are on.
	ByPartition map[int32]int `json:"misrouted_by_partition,omitempty"`
	// Example is the first misrouted record found.
	Example *MisroutedExample `json:"example,omitempty"`
	// Partial says the check ran out of time before reading every record
	// it meant to.
	Partial bool `json:"partial,omitempty"`
}

// MisroutedExample is a record whose key the partitioner maps to another
// partition than the one it is on.
type MisroutedExample struct {
	Key       string `json:"key"`
	Partition int32  `json:"partition"`
	Expected  int32  `json:"expected"`
}

// ErrTopicMissing is matched by Status's error when the topic does not
// exist.
var ErrTopicMissing = errors.New("admin: topic does not exist")

// ErrGroupNotFound is matched by Status's error when the group does not
// exist (no members and no committed offsets).
var ErrGroupNotFound = observe.ErrGroupNotFound

// UnreachableError is Status's error when its first request to the
// brokers fails.
type UnreachableError struct{ Err error }

// Error is the failed request's error.
func (e *UnreachableError) Error() string { return e.Err.Error() }

// Unwrap returns the failed request's error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// SinkError is Status's error when reading StatusRequest.Sink or
// StatusRequest.DeadLetters fails.
type SinkError struct{ Err error }

// Error is the sink's error.
func (e *SinkError) Error() string { return e.Err.Error() }

// Unwrap returns the sink's error.
func (e *SinkError) Unwrap() error { return e.Err }

// Status describes req.Group on req.Topic: the log (observe.ReadLog: the
// topic's ID and partitions from the brokers, never the metadata cache),
// the group and its members' assignments (observe.DescribeGroup), the
// committed offsets and lag, the state each worker reported in its
// commits' metadata, then the routing check and the sink's fences with
// their problems and open dead letters, as req asks. A topic that does not
// exist fails with ErrTopicMissing, a group that does not exist with an
// error matching ErrGroupNotFound, a first request to the brokers that
// fails with an *UnreachableError, and a failed read of req.Sink or
// req.DeadLetters with a *SinkError. It may be called from any goroutine.
func Status(ctx context.Context, cl *kgo.Client, req StatusRequest) (StatusReport, error) {
	rep, err := describeStatus(ctx, cl, req.Group, req.Topic)
	if err != nil {
		return rep, err
	}
	if req.CheckKeys > 0 {
		if err := checkRouting(ctx, req.ClientOpts, &rep, req.Partitioner, req.CheckKeys); err != nil {
			return rep, err
		}
	}
	if req.Sink != nil {
		if err := addSinkFences(ctx, cl, &rep, req.Sink, req.DeadLetters); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// describeStatus reads the group and the topic's offsets from Kafka.
func describeStatus(ctx context.Context, cl *kgo.Client, group, topic string) (StatusReport, error) {
	rep := StatusReport{Group: group, Topic: topic, Members: []StatusMember{}, Partitions: []StatusPartition{}}
	look, err := observe.ReadLog(ctx, cl, topic)
	var md *topicid.Error
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return rep, ErrTopicMissing
	case errors.As(err, &md) && errors.As(md.Err, new(*kerr.Error)):
		return rep, fmt.Errorf("reading topic %q: %w", topic, md.Err)
	case errors.As(err, &md):
		// The first request to the brokers failed.
		return rep, &UnreachableError{fmt.Errorf("reading topic %q: %w", topic, md.Err)}
	case err != nil:
		return rep, err
	}
	rep.TopicID = look.TopicID()
	g, err := observe.DescribeGroup(ctx, cl, group, topic, look.ID, observe.Any)
	if err != nil {
		return rep, err
	}
	rep.Protocol, rep.State, rep.Assignor = g.Protocol, g.State, g.Assignor
	kip848 := g.Protocol == "consumer"
	if kip848 {
		epoch := g.Epoch
		rep.GroupEpoch = &epoch
	}
	for _, m := range g.Members {
		sm := StatusMember{ClientID: m.ClientID, MemberID: m.MemberID, Host: m.Host, InstanceID: m.InstanceID, Partitions: m.Partitions}
		if kip848 {
			me := m.MemberEpoch
			sm.MemberEpoch = &me
		}
		rep.Members = append(rep.Members, sm)
	}
	if err := look.Ends.Error(); err != nil {
		return rep, fmt.Errorf("listing end offsets of %q: %w", topic, err)
	}
	if err := look.Starts.Error(); err != nil {
		return rep, fmt.Errorf("listing start offsets of %q: %w", topic, err)
	}
	committed, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		return rep, fmt.Errorf("fetching the committed offsets of group %q: %w", group, err)
	}
	owners := g.Owners()
	for _, p := range look.Partitions {
		sp := StatusPartition{Partition: p, Owner: owners[p]}
		if o, ok := look.Ends.Lookup(topic, p); ok {
			sp.EndOffset = o.Offset
		}
		if o, ok := look.Starts.Lookup(topic, p); ok {
			sp.StartOffset = o.Offset
		}
		sp.Lag = sp.EndOffset - sp.StartOffset
		sp.State = "unowned"
		if sp.Owner != "" {
			sp.State = "running"
		}
		if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
			at := c.At
			sp.Committed = &at
			sp.Lag = max(sp.EndOffset-at, 0)
			if st, since, attempts, lastErr, ok := consumer.ParseStateMetadata(c.Metadata); ok && sp.Owner != "" {
				sp.State, sp.StateSince, sp.StateAttempts, sp.StateError = string(st), &since, attempts, lastErr
			}
		}
		rep.TotalLag += sp.Lag
		rep.Partitions = append(rep.Partitions, sp)
	}
	return rep, nil
}

// addSinkFences adds the sink's fences of the group and topic to rep, with
// each partition's problems (Diagnose) and, if ds is not nil, its open
// dead letters.
func addSinkFences(ctx context.Context, cl *kgo.Client, rep *StatusReport, l fenceadmin.Lister, ds dlq.Store) error {
	reports, err := Diagnose(ctx, cl, l, rep.Group, rep.Topic)
	if err != nil {
		return &SinkError{err}
	}
	byPart := make(map[int32]Report)
	for _, r := range reports {
		byPart[r.Fence.Scope.Partition] = r
	}
	var open map[int32]int
	if ds != nil {
		dls, err := ds.DeadLetters(ctx, dlq.Filter{Group: rep.Group, Topic: rep.Topic, States: []dlq.State{dlq.Open}})
		if err != nil {
			return &SinkError{fmt.Errorf("reading dead letters: %w", err)}
		}
		open = make(map[int32]int)
		for _, d := range dls {
			open[d.Scope.Partition]++
		}
	}
	for i := range rep.Partitions {
		p := &rep.Partitions[i]
		r, ok := byPart[p.Partition]
		if !ok {
			continue
		}
		f := r.Fence
		sf := &StatusFence{HolderMember: f.Holder.Member, NextOffset: f.NextOffset, TopicID: f.TopicID, ProofRequired: f.ProofRequired,
			Duplicates: f.Duplicates}
		if !f.Holder.IsZero() {
			e := f.Holder.Epoch
			sf.HolderEpoch = &e
		}
		if open != nil {
			n := open[p.Partition]
			sf.OpenDeadLetters = &n
		}
		logChanged := false
		for _, pr := range r.Problems {
			p.Problems = append(p.Problems, StatusProblem{Kind: string(pr.Kind), Detail: pr.Detail})
			logChanged = logChanged || pr.Kind == TopicRecreated || pr.Kind == LogTruncated || pr.Kind == RetentionLoss
		}
		if !logChanged {
			lag := max(p.EndOffset-f.NextOffset, 0)
			sf.Lag = &lag
		}
		if len(r.Problems) > 0 && p.State == "running" {
			p.State = "blocked" // its owner's claims are refused: see the problems
		}
		if f.ProofRequired && f.Holder.IsZero() {
			p.Problems = append(p.Problems, StatusProblem{Kind: "reset_pending",
				Detail: "the fence was reset; the next claim must prove its membership (a running worker claims again within its reclaim interval)"})
		}
		p.Sink = sf
	}
	return nil
}

// checkRouting reads the last n records of every partition of rep's topic
// (with a client built from opts) and checks their keys against p. It
// gives up reading, and marks the report partial, after a few seconds or
// when ctx ends.
func checkRouting(ctx context.Context, opts []kgo.Opt, rep *StatusReport, p envelope.Partitioner, n int) error {
	count := int32(len(rep.Partitions))
	r := &RoutingReport{Partitioner: p.String(), ByPartition: map[int32]int{}}
	rep.Routing = r
	from := map[int32]kgo.Offset{}
	want := map[int32]int64{} // partition → end offset still to reach
	for _, sp := range rep.Partitions {
		if sp.EndOffset <= sp.StartOffset {
			continue
		}
		start := max(sp.StartOffset, sp.EndOffset-int64(n))
		from[sp.Partition] = kgo.NewOffset().At(start)
		want[sp.Partition] = sp.EndOffset
	}
	if len(from) == 0 || count == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{rep.Topic: from}))...)
	if err != nil {
		return fmt.Errorf("checking keys: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for len(want) > 0 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(rec *kgo.Record) {
			if end, ok := want[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(want, rec.Partition)
			}
			if len(rec.Key) == 0 {
				return
			}
			r.Checked++
			if e := p.Partition(rec.Key, count); e != rec.Partition {
				r.Misrouted++
				r.ByPartition[rec.Partition]++
				if r.Example == nil {
					r.Example = &MisroutedExample{Key: string(rec.Key), Partition: rec.Partition, Expected: e}
				}
			}
		})
	}
	r.Partial = len(want) > 0
	if len(r.ByPartition) == 0 {
		r.ByPartition = nil
	}
	return nil
}
