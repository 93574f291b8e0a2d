// Package observe is the one place that reads, from the brokers, what a
// consumer group and a topic's log look like now: the consumer's claims
// and its diagnosis of refused claims, the operator's diagnosis
// (admin.Diagnose) and the operator's status (admin.Status) all read them
// here, so that they cannot disagree.
//
// ReadLog is the log observation: the topic's ID from the brokers
// (internal/topicid, never the client's metadata cache), read before and
// after the partitions' start and end offsets, again until both reads
// agree (docs/design.md#log-identity). DescribeGroup is the group
// description: the classic DescribeGroups and the KIP-848
// ConsumerGroupDescribe, with each member's assigned partitions of the
// topic matched by topic ID as well as by name (a broker may send only
// the ID).
//
// Every function may be called from any goroutine; none starts a
// goroutine that outlives its call.
package observe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/internal/topicid"
	"github.com/workrouter/workrouter/sink"
)

// Log is one look at a topic's log.
type Log struct {
	// ID is the topic's ID (zero for a broker without topic IDs).
	ID [16]byte
	// Partitions are the topic's partitions, ascending, from the same
	// metadata response as ID.
	Partitions []int32
	// Starts and Ends are the partitions' log start and end offsets.
	Starts, Ends kadm.ListedOffsets
}

// TopicID is l's ID as topicid.Format writes it ("" for the zero ID).
// It may be called from any goroutine.
func (l Log) TopicID() string {
	if l.ID == ([16]byte{}) {
		return ""
	}
	return topicid.Format(l.ID)
}

// Observed picks partition p's observation, as a claim gives it to the
// sink, out of l: the zero Observed for a broker without topic IDs (no
// continuity check), an error if the offsets of p were not listed. It may
// be called from any goroutine.
func (l Log) Observed(topic string, p int32) (sink.Observed, error) {
	id := l.TopicID()
	if id == "" {
		return sink.Observed{}, nil
	}
	s, ok1 := l.Starts.Lookup(topic, p)
	e, ok2 := l.Ends.Lookup(topic, p)
	switch {
	case !ok1 || !ok2:
		return sink.Observed{}, fmt.Errorf("no offsets listed for %s/%d", topic, p)
	case s.Err != nil:
		return sink.Observed{}, fmt.Errorf("listing %s/%d's start offset: %w", topic, p, s.Err)
	case e.Err != nil:
		return sink.Observed{}, fmt.Errorf("listing %s/%d's end offset: %w", topic, p, e.Err)
	}
	return sink.Observed{TopicID: id, LogStart: s.Offset, LogEnd: e.Offset}, nil
}

// ReadLog reads topic's log from the brokers through cl: the topic's ID
// and partitions (a metadata request of its own, never cl's cache), the
// partitions' start and end offsets, and the ID again; if the two IDs
// differ the topic was recreated in between and the offsets may be of
// either log, so it reads again. A topic that does not exist fails with
// an error matching kerr.UnknownTopicOrPartition. It may be called from
// any goroutine.
func ReadLog(ctx context.Context, cl *kgo.Client, topic string) (Log, error) {
	adm := kadm.NewClient(cl) // shares the client; never closed here
	for {
		id, parts, err := topicid.ReadPartitions(ctx, cl, topic)
		if err != nil {
			return Log{}, err
		}
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			return Log{}, fmt.Errorf("listing topic %s's start offsets: %w", topic, err)
		}
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return Log{}, fmt.Errorf("listing topic %s's end offsets: %w", topic, err)
		}
		again, err := topicid.Read(ctx, cl, topic)
		if err != nil {
			return Log{}, err
		}
		if again != id {
			continue
		}
		return Log{ID: id, Partitions: parts, Starts: starts, Ends: ends}, nil
	}
}

// Protocol selects which describe requests DescribeGroup sends.
type Protocol int

const (
	// Any asks with the classic DescribeGroups first, and with the
	// KIP-848 ConsumerGroupDescribe when the classic answer does not know
	// the group or shows no members (a KIP-848 group looks like that to
	// DescribeGroups).
	Any Protocol = iota
	// Classic asks with DescribeGroups only.
	Classic
	// Consumer asks with ConsumerGroupDescribe only.
	Consumer
)

// Group is one description of a consumer group.
type Group struct {
	// Protocol is "classic" or "consumer" (KIP-848).
	Protocol string
	State    string
	// Assignor is the classic protocol's balancer or the KIP-848
	// assignor.
	Assignor string
	// Epoch is a KIP-848 group's epoch; -1 for a classic group.
	Epoch   int32
	Members []Member
}

// Member is one member of a Group.
type Member struct {
	MemberID   string
	ClientID   string
	Host       string
	InstanceID string
	// MemberEpoch is a KIP-848 member's epoch; -1 in a classic group.
	MemberEpoch int32
	// Partitions are the partitions of the topic assigned to the member,
	// ascending and without duplicates.
	Partitions []int32
}

// MemberIDs returns the members' IDs. It may be called from any
// goroutine.
func (g Group) MemberIDs() []string {
	ids := make([]string, len(g.Members))
	for i, m := range g.Members {
		ids[i] = m.MemberID
	}
	return ids
}

// Owners returns the member each partition of the topic is assigned to.
// It may be called from any goroutine.
func (g Group) Owners() map[int32]string {
	owners := make(map[int32]string)
	for _, m := range g.Members {
		for _, p := range m.Partitions {
			owners[p] = m.MemberID
		}
	}
	return owners
}

// ErrGroupNotFound is matched by DescribeGroup's error for a group that
// does not exist (no members and no committed offsets). Package admin
// exports it as admin.ErrGroupNotFound, hence its message's prefix.
var ErrGroupNotFound = errors.New("admin: group does not exist")

// groupNotFound is DescribeGroup's error for a group that does not exist.
type groupNotFound struct{ group string }

func (e groupNotFound) Error() string {
	return fmt.Sprintf("group %q does not exist (no members and no committed offsets)", e.group)
}

func (e groupNotFound) Is(target error) bool { return target == ErrGroupNotFound }

// DescribeGroup describes group, with each member's assigned partitions of
// topic, matched by topicID (if not zero) as well as by name. which says
// which describe requests it sends. A group that does not exist fails
// with an error matching ErrGroupNotFound. It may be called from any
// goroutine.
func DescribeGroup(ctx context.Context, cl *kgo.Client, group, topic string, topicID [16]byte, which Protocol) (Group, error) {
	switch which {
	case Consumer:
		g, found, err := describeConsumer(ctx, cl, group, topic, topicID)
		switch {
		case err != nil:
			return Group{}, fmt.Errorf("describing group %q: %w", group, err)
		case !found:
			return Group{}, groupNotFound{group}
		}
		return g, nil
	case Classic:
		cg, err := describeClassic(ctx, cl, group)
		if err == nil {
			err = cg.Err
		}
		if err != nil {
			if errors.Is(err, kerr.GroupIDNotFound) {
				return Group{}, groupNotFound{group}
			}
			return Group{}, fmt.Errorf("describing group %q: %w", group, err)
		}
		return classicGroup(cg, topic), nil
	}
	cg, cerr := describeClassic(ctx, cl, group)
	var cgKnown bool
	if cerr == nil {
		cgKnown = cg.Err == nil && cg.State != "Dead" && cg.State != ""
		if cg.Err != nil && !errors.Is(cg.Err, kerr.GroupIDNotFound) {
			cerr = cg.Err
		}
	}
	if cerr != nil && ctx.Err() != nil {
		return Group{}, fmt.Errorf("describing group %q: %w", group, cerr)
	}
	if !cgKnown || len(cg.Members) == 0 {
		g, found, err := describeConsumer(ctx, cl, group, topic, topicID)
		if err != nil && ctx.Err() != nil {
			return Group{}, fmt.Errorf("describing group %q: %w", group, err)
		}
		if found {
			return g, nil
		}
	}
	if cerr != nil {
		return Group{}, fmt.Errorf("describing group %q: %w", group, cerr)
	}
	if !cgKnown {
		return Group{}, groupNotFound{group}
	}
	return classicGroup(cg, topic), nil
}

// describeClassic describes group with the classic DescribeGroups.
func describeClassic(ctx context.Context, cl *kgo.Client, group string) (kadm.DescribedGroup, error) {
	gs, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		return kadm.DescribedGroup{}, err
	}
	g, ok := gs[group]
	if !ok {
		return kadm.DescribedGroup{}, fmt.Errorf("no answer for group %q: %w", group, kerr.GroupIDNotFound)
	}
	return g, nil
}

// classicGroup is the description of a classic group g.
func classicGroup(g kadm.DescribedGroup, topic string) Group {
	out := Group{Protocol: "classic", State: g.State, Assignor: g.Protocol, Epoch: -1}
	for _, m := range g.Members {
		om := Member{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, MemberEpoch: -1, Partitions: []int32{}}
		if m.InstanceID != nil {
			om.InstanceID = *m.InstanceID
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				if t.Topic == topic {
					om.Partitions = append(om.Partitions, t.Partitions...)
				}
			}
			slices.Sort(om.Partitions)
		}
		out.Members = append(out.Members, om)
	}
	return out
}

// describeConsumer describes a KIP-848 consumer group with
// ConsumerGroupDescribe, matching assignments by topic ID as well as by
// name (kadm's helper matches by name only). It reports false if the
// group is not a KIP-848 group or does not exist.
func describeConsumer(ctx context.Context, cl *kgo.Client, group, topic string, topicID [16]byte) (Group, bool, error) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return Group{}, false, err
	}
	var g *kmsg.ConsumerGroupDescribeResponseGroup
	for i := range resp.Groups {
		if resp.Groups[i].Group == group {
			g = &resp.Groups[i]
		}
	}
	if g == nil || g.ErrorCode != 0 || g.State == "Dead" {
		return Group{}, false, nil
	}
	out := Group{Protocol: "consumer", State: g.State, Assignor: g.AssignorName, Epoch: g.Epoch}
	for _, m := range g.Members {
		om := Member{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, MemberEpoch: m.MemberEpoch, Partitions: []int32{}}
		if m.InstanceID != nil {
			om.InstanceID = *m.InstanceID
		}
		for _, tp := range m.Assignment.TopicPartitions {
			if tp.Topic == topic || (topicID != ([16]byte{}) && tp.TopicID == topicID) {
				om.Partitions = append(om.Partitions, tp.Partitions...)
			}
		}
		slices.Sort(om.Partitions)
		om.Partitions = slices.Compact(om.Partitions)
		out.Members = append(out.Members, om)
	}
	slices.SortFunc(out.Members, func(a, b Member) int { return strings.Compare(a.MemberID, b.MemberID) })
	return out, true, nil
}
