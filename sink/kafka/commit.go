package kafka

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// metadataPrefix starts the offset commit metadata the sink writes: the
// committing tenure's token and the input log's topic ID, so that a claim
// reads the stored holder and the log identity with the checkpoint.
const metadataPrefix = "workrouter-kafka-sink/1 "

// commitMetadata encodes what a commit stores beside the offset.
func commitMetadata(tok epochs.Token, topicID string) (string, error) {
	b, err := tok.MarshalBinary()
	if err != nil {
		return "", err
	}
	return metadataPrefix + base64.RawURLEncoding.EncodeToString(b) + " " + topicID, nil
}

// parseMetadata decodes commitMetadata's text; ok is false for metadata
// another committer wrote (the consumer's own lag commits, an admin
// tool): the offset is then the checkpoint with no holder and no topic
// ID known.
func parseMetadata(md string) (tok epochs.Token, topicID string, ok bool) {
	rest, found := strings.CutPrefix(md, metadataPrefix)
	if !found {
		return epochs.Token{}, "", false
	}
	enc, topicID, _ := strings.Cut(rest, " ")
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || tok.UnmarshalBinary(b) != nil {
		return epochs.Token{}, "", false
	}
	return tok, topicID, true
}

// committed is a scope's committed offset as the group coordinator has it.
type committed struct {
	found   bool // false: no offset committed for the partition
	offset  int64
	holder  epochs.Token // zero unless the sink wrote the commit
	topicID string
}

// fetchCommitted reads group's committed offset of topic/partition with
// require_stable (KIP-447): while a transaction that commits an offset of
// the partition is open, the coordinator answers UNSTABLE_OFFSET_COMMIT and
// the fetch waits, so a claim never reads a checkpoint a pending
// transaction is about to move.
func fetchCommitted(ctx context.Context, cl *kgo.Client, group, topic string, partition int32) (committed, error) {
	backoff := 20 * time.Millisecond
	for {
		c, err := fetchOnce(ctx, cl, group, topic, partition)
		if !errors.Is(err, kerr.UnstableOffsetCommit) && !errors.Is(err, kerr.CoordinatorLoadInProgress) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return committed{}, fmt.Errorf("kafka sink: waiting for a pending transaction's offset commit of %s/%d in group %q: %w", topic, partition, group, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func fetchOnce(ctx context.Context, cl *kgo.Client, group, topic string, partition int32) (committed, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.RequireStable = true
	// v0-7 carry one group; v8+ a list of groups. Both are filled: kgo
	// picks the version, and each version encodes its own fields.
	req.Group = group
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic, t.Partitions = topic, []int32{partition}
	req.Topics = []kmsg.OffsetFetchRequestTopic{t}
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = group
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic, gt.Partitions = topic, []int32{partition}
	g.Topics = []kmsg.OffsetFetchRequestGroupTopic{gt}
	req.Groups = []kmsg.OffsetFetchRequestGroup{g}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return committed{}, fmt.Errorf("kafka sink: fetch the committed offset of %s/%d in group %q: %w", topic, partition, group, err)
	}
	type part struct {
		offset int64
		md     *string
		code   int16
	}
	var found *part
	if len(resp.Groups) > 0 {
		for _, rg := range resp.Groups {
			if err := kerr.ErrorForCode(rg.ErrorCode); errors.Is(err, kerr.GroupIDNotFound) {
				return committed{}, nil // a group that never committed
			} else if err != nil {
				return committed{}, fmt.Errorf("kafka sink: fetch the committed offset in group %q: %w", group, err)
			}
			for _, rt := range rg.Topics {
				for _, rp := range rt.Partitions {
					if rt.Topic == topic && rp.Partition == partition {
						found = &part{rp.Offset, rp.Metadata, rp.ErrorCode}
					}
				}
			}
		}
	} else {
		if err := kerr.ErrorForCode(resp.ErrorCode); errors.Is(err, kerr.GroupIDNotFound) {
			return committed{}, nil
		} else if err != nil {
			return committed{}, fmt.Errorf("kafka sink: fetch the committed offset in group %q: %w", group, err)
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == topic && rp.Partition == partition {
					found = &part{rp.Offset, rp.Metadata, rp.ErrorCode}
				}
			}
		}
	}
	if found == nil {
		return committed{}, nil
	}
	if err := kerr.ErrorForCode(found.code); err != nil {
		return committed{}, fmt.Errorf("kafka sink: fetch the committed offset of %s/%d in group %q: %w", topic, partition, group, err)
	}
	if found.offset < 0 {
		return committed{}, nil
	}
	c := committed{found: true, offset: found.offset}
	if found.md != nil {
		c.holder, c.topicID, _ = parseMetadata(*found.md)
	}
	return c, nil
}

// groupFencing reports whether err is the coordinator refusing a
// transactional offset commit because the committer is no longer the
// group's member (KIP-447): its member ID is unknown (it left, or its
// session expired), its static instance was replaced, or its KIP-848
// member epoch was fenced.
func groupFencing(err error) bool {
	for _, e := range []error{kerr.UnknownMemberID, kerr.FencedInstanceID, kerr.FencedMemberEpoch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// generationMoved reports whether err is the coordinator refusing a
// transactional offset commit of a known member for its generation or
// member epoch, or during a rebalance: the member's client has not caught
// up with the group yet.
func generationMoved(err error) bool {
	for _, e := range []error{kerr.IllegalGeneration, kerr.StaleMemberEpoch, kerr.RebalanceInProgress} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// offsetCommit is one partition's offset in a TxnOffsetCommit.
type offsetCommit struct {
	topic     string
	partition int32
	offset    int64
	metadata  string
}

// txnOffsetCommit adds the group's offsets to cl's open transaction (with
// AddOffsetsToTxn if addOffsets; under KIP-890 part 2 the commit adds
// them) and commits offs (each with its metadata) in it, in one request,
// as member at generation: the coordinator checks both against the group
// (KIP-447) and refuses the commit of a member that is not current (the
// error of the first partition refused).
func txnOffsetCommit(ctx context.Context, cl *kgo.Client, txnID string, addOffsets bool, group, member string, generation int32,
	offs []offsetCommit) error {
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("kafka sink: producer ID: %w", err)
	}
	if addOffsets {
		add := kmsg.NewPtrAddOffsetsToTxnRequest()
		add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, id, epoch, group
		aresp, err := add.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(aresp.ErrorCode)
		}
		if err != nil {
			return fmt.Errorf("kafka sink: add the offsets of group %q to the transaction: %w", group, err)
		}
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txnID, group, id, epoch
	req.Generation, req.MemberID = generation, member
	for _, o := range offs {
		i := slices.IndexFunc(req.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) bool { return t.Topic == o.topic })
		if i < 0 {
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic = o.topic
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
		}
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		md := o.metadata
		rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = o.partition, o.offset, -1, &md
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka sink: transactional offset commit: %w", err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("kafka sink: transactional offset commit of %s/%d in group %q as member %q at generation %d refused: %w",
					t.Topic, p.Partition, group, member, generation, err)
			}
		}
	}
	return nil
}

// GroupFencedError reports an Apply or DeadLetter refused because its
// tenure is no longer the group's: by the group coordinator, which
// refused the transaction's offset commit for the member itself (Err is
// the Kafka error: kerr.UnknownMemberID, kerr.FencedInstanceID or
// kerr.FencedMemberEpoch; a refused generation is ErrRebalancing),
// or by the sink's client-side check before the commit (Err is
// ErrMemberChanged). The transaction was aborted: none of its records is
// visible to a read_committed consumer. It matches sink.ErrFenced.
type GroupFencedError struct {
	Op      sink.Op
	Offered epochs.Token
	// Member and Generation are the group metadata the commit carried (or
	// would have): the member's current ID and generation or member
	// epoch.
	Member     string
	Generation int32
	Err        error
}

// Error describes the refusal.
func (e *GroupFencedError) Error() string {
	return fmt.Sprintf("sink: %s fenced for %s: the transaction of %s (as member %q at generation %d) was aborted: %v",
		e.Op, e.Offered.Scope(), e.Offered, e.Member, e.Generation, e.Err)
}

// Is reports whether target is sink.ErrFenced.
func (e *GroupFencedError) Is(target error) bool { return target == sink.ErrFenced }

// Unwrap returns the refusal's cause.
func (e *GroupFencedError) Unwrap() error { return e.Err }

// ErrMemberChanged is matched by a GroupFencedError of the client-side
// check: the consumer's current group metadata is not the tenure's (its
// member ID changed, or its generation is below the token's epoch, or it
// has none), so the tenure ended, whatever the coordinator would say.
var ErrMemberChanged = errors.New("kafka sink: the group member that holds the tenure is gone")
