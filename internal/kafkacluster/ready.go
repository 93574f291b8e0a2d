package kafkacluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// live returns the nodes whose process runs and is not paused.
func (c *Cluster) live() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n.Running() && !n.Paused() {
			out = append(out, n)
		}
	}
	return out
}

// Admin returns an admin client seeded with the nodes that run and are
// not paused (a paused node accepts connections and answers nothing).
// The caller closes it.
func (c *Cluster) Admin(opts ...kgo.Opt) (*kadm.Client, error) {
	var seeds []string
	for _, n := range c.live() {
		seeds = append(seeds, n.Addr)
	}
	if len(seeds) == 0 {
		return nil, errors.New("kafkacluster: no node is running")
	}
	return kadm.NewOptClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RequestTimeoutOverhead(2 * time.Second)}, opts...)...)
}

// WaitReady waits until every running, unpaused node is in the cluster's
// metadata and serves KIP-848 (ConsumerGroupHeartbeat in its ApiVersions),
// and a coordinator answers for every partition of the group offsets
// topic (DescribeGroups and ConsumerGroupDescribe) and of the transaction
// state topic (FindCoordinator), or until ctx is done, when it returns
// the last thing it was waiting for and the tail of any node that exited.
func (c *Cluster) WaitReady(ctx context.Context) error {
	var last error
	for {
		if err := c.exited(); err != nil {
			return err
		}
		last = c.ready(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkacluster: the cluster in %s is not ready: %w (%v)", c.dir, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// exited returns an error if a node that was started has exited without
// being stopped, with its log's tail.
func (c *Cluster) exited() error {
	for _, n := range c.nodes {
		n.mu.Lock()
		cmd, done := n.cmd, n.done
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		select {
		case <-done:
			n.forget(done)
			return fmt.Errorf("kafkacluster: node %d exited (%v); the end of %s:\n%s", n.ID, cmd.ProcessState, n.LogFile, n.Tail(30))
		default:
		}
	}
	return nil
}

// ready checks the cluster once.
func (c *Cluster) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	adm, err := c.Admin(kgo.RetryTimeout(4 * time.Second))
	if err != nil {
		return err
	}
	defer adm.Close()
	live := c.live()
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	for _, n := range live {
		if !slices.ContainsFunc(md.Brokers, func(b kadm.BrokerDetail) bool { return b.NodeID == n.ID }) {
			return fmt.Errorf("node %d is not in the metadata yet", n.ID)
		}
	}
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		return fmt.Errorf("ApiVersions: %w", err)
	}
	for _, n := range live {
		v, ok := versions[n.ID]
		if !ok || v.Err != nil {
			return fmt.Errorf("node %d answers no ApiVersions (%v)", n.ID, v.Err)
		}
		if _, ok := v.KeyMaxVersion(int16(kmsg.ConsumerGroupHeartbeat)); !ok {
			return fmt.Errorf("node %d does not serve ConsumerGroupHeartbeat", n.ID)
		}
	}
	n := len(c.nodes)
	groups := probeKeys("workrouter-ready-group-", atoiOr(property(c.cfg, n, "offsets.topic.num.partitions"), 50))
	found := adm.FindGroupCoordinators(ctx, groups...)
	for _, g := range groups {
		if err := found[g].Err; err != nil {
			return fmt.Errorf("group coordinator of %s: %w", g, err)
		}
	}
	described, err := adm.DescribeGroups(ctx, groups...)
	if err != nil {
		return fmt.Errorf("DescribeGroups: %w", err)
	}
	for _, g := range groups {
		if err := described[g].Err; err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return fmt.Errorf("DescribeGroups %s: %w", g, err)
		}
	}
	cdescribed, err := adm.DescribeConsumerGroups(ctx, groups...)
	if err != nil {
		return fmt.Errorf("ConsumerGroupDescribe: %w", err)
	}
	for _, g := range groups {
		if err := cdescribed[g].Err; err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return fmt.Errorf("ConsumerGroupDescribe %s: %w", g, err)
		}
	}
	txns := probeKeys("workrouter-ready-txn-", atoiOr(property(c.cfg, n, "transaction.state.log.num.partitions"), 50))
	tfound := adm.FindTxnCoordinators(ctx, txns...)
	for _, id := range txns {
		if err := tfound[id].Err; err != nil {
			return fmt.Errorf("transaction coordinator of %s: %w", id, err)
		}
	}
	return nil
}

// Coordinator returns the node coordinating group.
func (c *Cluster) Coordinator(ctx context.Context, group string) (*Node, error) {
	adm, err := c.Admin()
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	r := adm.FindGroupCoordinators(ctx, group)[group]
	if r.Err != nil {
		return nil, fmt.Errorf("kafkacluster: coordinator of group %s: %w", group, r.Err)
	}
	return c.nodeOr(r.NodeID)
}

// Leader returns the node leading partition of topic.
func (c *Cluster) Leader(ctx context.Context, topic string, partition int32) (*Node, error) {
	adm, err := c.Admin()
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("kafkacluster: topic %s: %v", topic, td.Err)
	}
	p, ok := td.Partitions[partition]
	if !ok || p.Err != nil {
		return nil, fmt.Errorf("kafkacluster: partition %s/%d: %v", topic, partition, p.Err)
	}
	return c.nodeOr(p.Leader)
}

// Controller returns the active KRaft controller: the leader of the
// metadata quorum (__cluster_metadata partition 0) as DescribeQuorum,
// sent to a running broker and forwarded by it to the quorum, reports it,
// with the leader's epoch. It is an error while the quorum has no leader
// (an election in progress).
func (c *Cluster) Controller(ctx context.Context) (*Node, int32, error) {
	var seeds []string
	for _, n := range c.live() {
		seeds = append(seeds, n.Addr)
	}
	if len(seeds) == 0 {
		return nil, 0, errors.New("kafkacluster: no node is running")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequestTimeoutOverhead(2*time.Second), kgo.RetryTimeout(4*time.Second))
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeQuorumRequest()
	t := kmsg.NewDescribeQuorumRequestTopic()
	t.Topic = "__cluster_metadata"
	p := kmsg.NewDescribeQuorumRequestTopicPartition()
	p.Partition = 0
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, 0, fmt.Errorf("kafkacluster: describing the metadata quorum: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, 0, fmt.Errorf("kafkacluster: describing the metadata quorum: %w", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, 0, fmt.Errorf("kafkacluster: describing the metadata quorum: %d topics in the answer, want 1 with 1 partition", len(resp.Topics))
	}
	qp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(qp.ErrorCode); err != nil {
		return nil, 0, fmt.Errorf("kafkacluster: describing the metadata quorum: %w", err)
	}
	if qp.LeaderID < 0 {
		return nil, 0, fmt.Errorf("kafkacluster: the metadata quorum has no leader (epoch %d)", qp.LeaderEpoch)
	}
	n, err := c.nodeOr(qp.LeaderID)
	return n, qp.LeaderEpoch, err
}

// InSync reports whether every partition of topics has its whole replica
// set in sync (ISR = replicas) and a leader; if not, the error names the
// first partition that does not.
func (c *Cluster) InSync(ctx context.Context, topics ...string) error {
	adm, err := c.Admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	md, err := adm.Metadata(ctx, topics...)
	if err != nil {
		return err
	}
	for _, topic := range topics {
		td, ok := md.Topics[topic]
		if !ok || td.Err != nil {
			return fmt.Errorf("kafkacluster: topic %s: %v", topic, td.Err)
		}
		for _, p := range td.Partitions.Sorted() {
			if p.Err != nil || p.Leader < 0 || len(p.ISR) < len(p.Replicas) {
				return fmt.Errorf("kafkacluster: partition %s/%d: leader %d, replicas %v, in sync %v (%v)", topic, p.Partition, p.Leader, p.Replicas, p.ISR, p.Err)
			}
		}
	}
	return nil
}

func (c *Cluster) nodeOr(id int32) (*Node, error) {
	if n := c.Node(id); n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("kafkacluster: no node %d in this cluster", id)
}

// probeKeys returns keys, prefix followed by a number, one for each of the
// partitions 0..n-1 of an internal topic as the broker maps a group or
// transactional ID to one: abs(Java's String.hashCode) mod n.
func probeKeys(prefix string, n int) []string {
	keys := make([]string, n)
	left := n
	for i := 0; left > 0; i++ {
		k := prefix + strconv.Itoa(i)
		p := javaAbs(javaHash(k)) % int32(n)
		if keys[p] == "" {
			keys[p] = k
			left--
		}
	}
	return keys
}

// javaHash is java.lang.String.hashCode of an ASCII string.
func javaHash(s string) int32 {
	var h int32
	for i := 0; i < len(s); i++ {
		h = 31*h + int32(s[i])
	}
	return h
}

// javaAbs is Kafka's Utils.abs: the minimum int maps to 0.
func javaAbs(n int32) int32 {
	switch {
	case n == -1<<31:
		return 0
	case n < 0:
		return -n
	}
	return n
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return def
	}
	return n
}
