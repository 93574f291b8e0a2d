package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/netfault"
	"github.com/workrouter/workrouter/internal/kafkacluster"
)

// PartitionBrokerNode cuts one Kafka node off from the other nodes and
// from every client, both ways (black-holed), past its broker session,
// then heals. It runs only when named, and only on Kafka nodes the
// harness started (Config.KafkaNodes): with it the cluster is started
// with kafkacluster.Config.Links, every path to a node (its clients', and
// each other node's replication and controller connections) through a
// proxy of the harness's (package netfault).
const PartitionBrokerNode Kind = "partition-broker-node"

// allNodeKinds are the kinds that need Kafka nodes the harness started.
var allNodeKinds = append(slices.Clone(nodeKinds), PartitionBrokerNode)

// namedOnly reports whether kind k runs on c's cluster when named
// although it is not among the kinds that run by default there: the
// network kinds, and partition-broker-node on Kafka nodes.
func namedOnly(c Config, k Kind) bool {
	return slices.Contains(NetKinds(), k) || k == PartitionBrokerNode && c.KafkaNodes > 0
}

// linkKinds are the kinds of a node's links, as the fault reports the
// bytes each dropped.
var linkKinds = []string{"replication in", "replication out", "controller", "client"}

// isolatingPaths are what a partition-broker-node fault must have cut, each
// one kind of link or more: some link of each must have dropped bytes
// for the fault to count. Replication counts both ways together: a node
// that leads every partition has no follower fetches to send.
var isolatingPaths = map[string][]string{
	"replication": {"replication in", "replication out"},
	"controller":  {"controller"},
	"client":      {"client"},
}

// nodeLinks are the proxies on every path to a Kafka node
// (kafkacluster.Config.Links), by the node at either end.
type nodeLinks struct {
	net *netfault.Net
	// of[id][kind] are the links into or out of node id, by kind:
	// "replication in", "replication out", "controller", "client".
	of map[int32]map[string]netfault.Links
}

func newNodeLinks() *nodeLinks {
	return &nodeLinks{net: netfault.New(), of: map[int32]map[string]netfault.Links{}}
}

func (nl *nodeLinks) add(id int32, kind string, l *netfault.Link) {
	if nl.of[id] == nil {
		nl.of[id] = map[string]netfault.Links{}
	}
	nl.of[id][kind] = append(nl.of[id][kind], l)
}

// link is kafkacluster.Config.Links: a proxy on l.
func (nl *nodeLinks) link(l kafkacluster.Link) (string, error) {
	pl, err := nl.net.Link(l.String(), l.Upstream)
	if err != nil {
		return "", err
	}
	switch l.Kind {
	case kafkacluster.LinkReplication:
		nl.add(l.To, "replication in", pl)
		nl.add(l.From, "replication out", pl)
	case kafkacluster.LinkController:
		nl.add(l.To, "controller", pl)
		nl.add(l.From, "controller", pl)
	default:
		nl.add(l.To, "client", pl)
	}
	return pl.Addr(), nil
}

// all returns every link into or out of node id.
func (nl *nodeLinks) all(id int32) netfault.Links {
	var out netfault.Links
	for _, k := range slices.Sorted(maps.Keys(nl.of[id])) {
		for _, l := range nl.of[id][k] {
			if !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	return out
}

// dropped returns the bytes the links of node id dropped so far, by kind.
func (nl *nodeLinks) dropped(id int32) map[string]int64 {
	out := map[string]int64{}
	for k, ls := range nl.of[id] {
		out[k] = ls.Dropped()
	}
	return out
}

// isolated reports whether, while a node was cut (cut: the bytes its
// links dropped, by kind), each of isolatingPaths dropped bytes: its
// peers' replication traffic, the quorum's and its clients' (a path
// that does not go through the links drops nothing). It names the paths
// that did not.
func isolated(cut map[string]int64) (bool, []string) {
	var quiet []string
	for _, path := range slices.Sorted(maps.Keys(isolatingPaths)) {
		var n int64
		for _, k := range isolatingPaths[path] {
			n += cut[k]
		}
		if n <= 0 {
			quiet = append(quiet, path)
		}
	}
	return len(quiet) == 0, quiet
}

// otherLeader reads the leader of partition p of the run's topic from the
// nodes other than id, each asked directly (node id, cut off, answers
// nothing, and would name itself if it did).
func (r *run) otherLeader(ctx context.Context, id int32, p int32) (int32, error) {
	var last error
	for _, n := range r.kc.Nodes() {
		if n.ID == id {
			continue
		}
		lead, err := kafkacluster.LeaderFrom(ctx, n, r.topic, p)
		if err == nil {
			return lead, nil
		}
		last = err
	}
	return -1, last
}

// partitionBrokerNode cuts the leader of a partition a worker is applying
// off from the other nodes and from every client (each link into and out
// of it, replication, controller and client, black-holed), waits until
// the other nodes name another leader of that partition (the controller
// fenced the node: it misses its broker heartbeats), keeps the cut at
// least nodeTimes.paused, heals, and waits until every replica is in sync
// again. It happened when the leader moved and every kind of link of the
// node dropped bytes while cut (isolated): a node that still reached its
// peers or its clients some way was not cut off.
func (r *run) partitionBrokerNode() (bool, error) {
	if r.nodeNet == nil {
		return false, fmt.Errorf("%w: partition-broker-node needs the cluster started with links", ErrConfig)
	}
	name, p, ok := r.applying()
	if !ok {
		r.logf("partition-broker-node: no worker holds a partition; skipped")
		return false, nil
	}
	ctx, cancel := r.readCtx()
	old, err := r.nodes.Leader(ctx, r.topic, p)
	cancel()
	if err != nil {
		r.logf("partition-broker-node: the leader of partition %d: %v; skipped", p, err)
		return false, nil
	}
	ls := r.nodeNet.all(old)
	d0 := r.nodeNet.dropped(old)
	start := time.Now()
	if err := ls.Cut(); err != nil {
		return false, fmt.Errorf("chaos: partition-broker-node: cutting node %d: %w", old, err)
	}
	r.logf("PARTITION-BROKER-NODE node %d, the leader of partition %d, which %s is applying: its %d links (replication and controller to and from its peers, clients') cut both ways (black-holed)",
		old, p, name, len(ls))
	f := NodeFault{Kind: PartitionBrokerNode, Node: old, Partition: p, From: old}
	f.To = r.waitMoved(old, func(ctx context.Context) (int32, error) { return r.otherLeader(ctx, old, p) })
	f.Moved = time.Since(start)
	err = r.sleep(r.times.paused - time.Since(start))
	d1 := r.nodeNet.dropped(old)
	if herr := ls.Heal(); herr != nil {
		return false, fmt.Errorf("chaos: partition-broker-node: healing node %d: %w", old, herr)
	}
	f.Cut = map[string]int64{}
	var parts []string
	for _, k := range linkKinds {
		f.Cut[k] = d1[k] - d0[k]
		parts = append(parts, fmt.Sprintf("%s %d", k, f.Cut[k]))
	}
	r.logf("  HEAL node %d's links after %s; bytes dropped while cut: %s", old, time.Since(start).Round(time.Millisecond), strings.Join(parts, ", "))
	if ok, quiet := isolated(f.Cut); !ok {
		r.logf("  node %d's %s links dropped no bytes while cut: the cut did not isolate it, not counted", old, strings.Join(quiet, " and "))
	}
	if err == nil {
		err = r.bringBack(old, r.nodes.Ready)
	}
	f.Back = time.Since(start)
	r.setDetail(fmt.Sprintf("node %d cut off for %s; leader of partition %d moved to %d; bytes dropped: %s", old, r.times.paused, p, f.To, strings.Join(parts, ", ")))
	return r.nodeFault(f, "the leader of partition "+strconv.Itoa(int(p))), err
}
