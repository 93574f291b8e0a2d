package kafkacluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LinkKind is the traffic a Link carries.
type LinkKind string

// The kinds of Link.
const (
	// LinkClient carries every client's connections to a node's broker
	// listener (the one the metadata advertises to clients).
	LinkClient LinkKind = "client"
	// LinkReplication carries one node's inter-broker connections to
	// another: follower fetches, transaction markers.
	LinkReplication LinkKind = "replication"
	// LinkController carries one node's connections to another's KRaft
	// controller listener: the quorum's fetches and votes, and the
	// broker's registration and heartbeats to the active controller.
	LinkController LinkKind = "controller"
)

// Link is one directed path to a node that Config.Links may put a proxy
// on: from a node (From, or 0 for every client) to node To's listener
// Upstream.
type Link struct {
	Kind     LinkKind
	From, To int32
	Upstream string
}

// String names the link: "client→2", "replication 1→2", "controller 3→1".
func (l Link) String() string {
	if l.Kind == LinkClient {
		return "client→" + strconv.Itoa(int(l.To))
	}
	return fmt.Sprintf("%s %d→%d", l.Kind, l.From, l.To)
}

// wireLinks asks cfg.Links for the address of every link and records
// them on the nodes: each node's client address (Addr), and, with
// several nodes, the addresses each node advertises to each peer for
// replication and for its controller. A node reaches itself directly.
func (c *Cluster) wireLinks() error {
	for _, to := range c.nodes {
		addr, err := c.cfg.Links(Link{Kind: LinkClient, To: to.ID, Upstream: to.Listener})
		if err != nil {
			return fmt.Errorf("kafkacluster: the client link to node %d: %w", to.ID, err)
		}
		to.Addr = addr
		if len(c.nodes) == 1 {
			continue
		}
		to.replAdv = slices.Clone(to.replListen)
		to.ctrlAdv = slices.Clone(to.ctrlListen)
		for j, from := range c.nodes {
			if from == to {
				continue
			}
			for _, l := range []Link{
				{Kind: LinkReplication, From: from.ID, To: to.ID, Upstream: to.replListen[j]},
				{Kind: LinkController, From: from.ID, To: to.ID, Upstream: to.ctrlListen[j]},
			} {
				addr, err := c.cfg.Links(l)
				if err != nil {
					return fmt.Errorf("kafkacluster: link %s: %w", l, err)
				}
				if l.Kind == LinkReplication {
					to.replAdv[j] = addr
				} else {
					to.ctrlAdv[j] = addr
				}
			}
		}
	}
	return nil
}

// replicationListener is the name of the listener node from's broker
// uses to reach every other node's (its inter.broker.listener.name).
func replicationListener(from int32) string { return "REPLICATION_" + strconv.Itoa(int(from)) }

// controllerListener is the name of the listener node from uses to
// reach every other node's controller (its first controller listener).
func controllerListener(from int32) string { return "CONTROLLER_" + strconv.Itoa(int(from)) }

// LeaderFrom returns the leader of partition of topic as node n alone
// reports it, asked directly at its Addr (not any node the metadata
// names): with a node cut off, the others' view.
func LeaderFrom(ctx context.Context, n *Node, topic string, partition int32) (int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr), kgo.RequestTimeoutOverhead(2*time.Second))
	if err != nil {
		return -1, err
	}
	defer cl.Close()
	seeds := cl.SeedBrokers()
	if len(seeds) != 1 {
		return -1, fmt.Errorf("kafkacluster: %d seed brokers for node %d, want 1", len(seeds), n.ID)
	}
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := seeds[0].Request(ctx, req)
	if err != nil {
		return -1, fmt.Errorf("kafkacluster: metadata from node %d: %w", n.ID, err)
	}
	for _, t := range resp.(*kmsg.MetadataResponse).Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return -1, fmt.Errorf("kafkacluster: topic %s from node %d: %w", topic, n.ID, err)
		}
		for _, p := range t.Partitions {
			if p.Partition == partition {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return -1, fmt.Errorf("kafkacluster: partition %s/%d from node %d: %w", topic, partition, n.ID, err)
				}
				return p.Leader, nil
			}
		}
	}
	return -1, fmt.Errorf("kafkacluster: node %d knows no partition %s/%d", n.ID, topic, partition)
}
