package chaos

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/kafkacluster"
)

// The fault kinds of a cluster of Apache Kafka nodes the harness started
// (Config.KafkaNodes); see the package documentation.
const (
	LeaderKill         Kind = "leader-kill"
	ControllerKill     Kind = "controller-kill"
	BrokerPause        Kind = "broker-pause"
	CoordinatorRestart Kind = "coordinator-restart"
)

// nodeKinds are the kinds that act on the nodes of a Kafka cluster.
var nodeKinds = []Kind{LeaderKill, ControllerKill, BrokerPause, CoordinatorRestart}

// NodeFault is the outcome of one fault of a Kafka node, as read from the
// cluster (metadata, FindCoordinator, DescribeQuorum), not assumed.
type NodeFault struct {
	Kind Kind `json:"kind"`
	// Node is the node the fault hit; Partition the partition whose
	// leader it was (leader-kill and broker-pause), or -1.
	Node      int32 `json:"node"`
	Partition int32 `json:"partition"`
	// From and To are the leader, controller or coordinator before the
	// fault and the one the cluster reported after it (To is -1 if it
	// never moved: the fault did not happen and is not counted).
	From int32 `json:"from"`
	To   int32 `json:"to"`
	// Moved is the time from the fault until the cluster reported To;
	// Back the time from the fault until the node ran again and every
	// replica of the run's topic and of the group offsets was in sync.
	Moved time.Duration `json:"moved_ns"`
	Back  time.Duration `json:"back_ns"`
	// Cut is, for partition-broker-node, the bytes each kind of the
	// node's links dropped while cut (linkKinds).
	Cut map[string]int64 `json:"cut_bytes,omitempty"`
}

// Happened reports whether the fault moved what it had to move, and, for
// partition-broker-node, whether the node's replication, controller and
// client links each dropped bytes while cut (isolated: the node was cut
// off from its peers, from the quorum and from its clients).
func (f NodeFault) Happened() bool {
	if f.Kind == PartitionBrokerNode {
		if ok, _ := isolated(f.Cut); !ok {
			return false
		}
	}
	return f.To >= 0 && f.To != f.From
}

// nodeControl is what the node faults need of a cluster: where things are
// (read from the cluster each call) and the nodes' processes. kafkaNodes
// is the real one; tests use a fake.
type nodeControl interface {
	// Leader returns the node leading partition p of topic.
	Leader(ctx context.Context, topic string, p int32) (int32, error)
	// Controller returns the active controller and its epoch.
	Controller(ctx context.Context) (id, epoch int32, err error)
	// Coordinator returns the node coordinating group.
	Coordinator(ctx context.Context, group string) (int32, error)
	Kill(id int32) error
	Stop(ctx context.Context, id int32) error
	Pause(id int32) error
	Resume(id int32) error
	// Start starts a stopped or killed node and waits until the cluster
	// is ready; Ready only waits.
	Start(ctx context.Context, id int32) error
	Ready(ctx context.Context) error
	// InSync returns nil once every partition of topics has its whole
	// replica set in sync and a leader.
	InSync(ctx context.Context, topics ...string) error
}

// kafkaNodes is nodeControl over a cluster of package kafkacluster.
type kafkaNodes struct{ c *kafkacluster.Cluster }

func (k kafkaNodes) node(id int32) (*kafkacluster.Node, error) {
	if n := k.c.Node(id); n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("chaos: no Kafka node %d", id)
}

func (k kafkaNodes) Leader(ctx context.Context, topic string, p int32) (int32, error) {
	n, err := k.c.Leader(ctx, topic, p)
	if err != nil {
		return -1, err
	}
	return n.ID, nil
}

func (k kafkaNodes) Controller(ctx context.Context) (int32, int32, error) {
	n, epoch, err := k.c.Controller(ctx)
	if err != nil {
		return -1, 0, err
	}
	return n.ID, epoch, nil
}

func (k kafkaNodes) Coordinator(ctx context.Context, group string) (int32, error) {
	n, err := k.c.Coordinator(ctx, group)
	if err != nil {
		return -1, err
	}
	return n.ID, nil
}

func (k kafkaNodes) Kill(id int32) error {
	n, err := k.node(id)
	if err != nil {
		return err
	}
	return n.Kill()
}

func (k kafkaNodes) Stop(ctx context.Context, id int32) error {
	n, err := k.node(id)
	if err != nil {
		return err
	}
	return n.Stop(ctx)
}

func (k kafkaNodes) Pause(id int32) error {
	n, err := k.node(id)
	if err != nil {
		return err
	}
	return n.Pause()
}

func (k kafkaNodes) Resume(id int32) error {
	n, err := k.node(id)
	if err != nil {
		return err
	}
	return n.Resume()
}

func (k kafkaNodes) Start(ctx context.Context, id int32) error {
	n, err := k.node(id)
	if err != nil {
		return err
	}
	return n.Start(ctx)
}

func (k kafkaNodes) Ready(ctx context.Context) error { return k.c.WaitReady(ctx) }

func (k kafkaNodes) InSync(ctx context.Context, topics ...string) error {
	return k.c.InSync(ctx, topics...)
}

// nodeTimes bounds the node faults' waits.
type nodeTimes struct {
	// move bounds the wait for the leader, controller or coordinator to
	// move after the fault.
	move time.Duration
	// paused is how long a broker-pause keeps the node stopped at least:
	// past the broker's session (broker.session.timeout.ms), after which
	// the controller fences it.
	paused time.Duration
	// back bounds the wait for the node to run again and every replica
	// to be in sync.
	back time.Duration
}

// defaultNodeTimes are the waits on a real cluster.
func defaultNodeTimes() nodeTimes {
	return nodeTimes{move: 60 * time.Second, paused: 6 * time.Second, back: 3 * time.Minute}
}

// clusterOverrides are the broker properties of the cluster the harness
// starts, over kafkacluster's defaults: KIP-848 groups take their session
// timeout from the broker, so it is the workers'.
func (c Config) clusterOverrides() map[string]string {
	return map[string]string{
		"group.consumer.session.timeout.ms": strconv.FormatInt(c.SessionTimeout.Milliseconds(), 10),
		"group.consumer.min.session.timeout.ms": strconv.FormatInt(min(c.SessionTimeout.Milliseconds(),
			1000), 10),
	}
}

// topicConfigs are the run's topic's configs on a cluster of Kafka nodes:
// a write is acknowledged (acks=all, the router's and the poison
// producer's default, both idempotent) once two of the three replicas
// have it.
func topicConfigs() map[string]*string {
	two := "2"
	return map[string]*string{"min.insync.replicas": &two}
}

// replicationFactor of the run's topic on a cluster of Kafka nodes.
const replicationFactor = 3

// startKafka starts a cluster of cfg.KafkaNodes Apache Kafka nodes with
// package kafkacluster in dir and creates the run's topic on it; the
// returned function stops every node.
func (r *run) startKafka(dir string) (func(), error) {
	t0 := time.Now()
	r.logf("starting %d Apache Kafka %s nodes (broker and KRaft controller each) in %s", r.cfg.KafkaNodes, kafkacluster.Version, dir)
	kcfg := kafkacluster.Config{Nodes: r.cfg.KafkaNodes, Dir: dir, Overrides: r.cfg.clusterOverrides(),
		Logf: func(format string, args ...any) { r.logf("  "+format, args...) }}
	closeLinks := func() {}
	if slices.Contains(r.cfg.Kinds, PartitionBrokerNode) {
		// Every path to a node through a proxy of the harness's.
		r.nodeNet = newNodeLinks()
		kcfg.Links = r.nodeNet.link
		closeLinks = func() {
			r.nodeNet.net.Close()
			r.reportRefused("the Kafka nodes' links", r.nodeNet.net)
		}
	}
	c, err := kafkacluster.Start(r.ctx, kcfg)
	if err != nil {
		closeLinks()
		return nil, fmt.Errorf("chaos: starting the Kafka cluster: %w", err)
	}
	if r.nodeNet != nil {
		n := 0
		for _, n1 := range c.Nodes() {
			n += len(r.nodeNet.of[n1.ID]["client"]) + len(r.nodeNet.of[n1.ID]["replication in"]) + len(r.nodeNet.of[n1.ID]["controller"])/2
		}
		r.logf("node links: every client, replication and controller path to each node through a proxy of the harness's (%d links)", n)
	}
	r.kc, r.nodes = c, kafkaNodes{c}
	r.brokers = c.Brokers()
	var pids []string
	for _, n := range c.Nodes() {
		pids = append(pids, strconv.Itoa(n.PID()))
	}
	r.startup = time.Since(t0)
	r.logf("Kafka cluster ready in %s: %v (pids %s); the run's duration counts from now", r.startup.Round(time.Millisecond), r.brokers, strings.Join(pids, ", "))
	stop := func() {
		if err := c.Close(); err != nil {
			r.logf("stopping the Kafka cluster: %v", err)
		}
		closeLinks()
	}
	r.topic = fmt.Sprintf("%s-chaos-%d", ledger.Topic, time.Now().UnixNano())
	adm, err := c.Admin()
	if err != nil {
		stop()
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, r.cfg.Partitions, replicationFactor, topicConfigs(), r.topic); err != nil {
		stop()
		return nil, fmt.Errorf("chaos: creating topic %s: %w", r.topic, err)
	}
	if err := r.waitInSync(); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// syncTopics are the topics whose replicas must all be in sync before the
// next node fault: the run's and the group offsets.
func (r *run) syncTopics() []string { return []string{r.topic, "__consumer_offsets"} }

// waitInSync waits until every replica of syncTopics is in sync.
func (r *run) waitInSync() error {
	var last error
	err := r.waitUntil(r.times.back, "every replica of "+strings.Join(r.syncTopics(), " and ")+" in sync", func() bool {
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		defer cancel()
		last = r.nodes.InSync(ctx, r.syncTopics()...)
		return last == nil
	})
	if err != nil {
		return fmt.Errorf("%w (%v)", err, last)
	}
	return nil
}

// applying returns a worker that holds a partition and one of its
// partitions (seeded), or ok false.
func (r *run) applying() (name string, p int32, ok bool) {
	if r.applyingFn != nil {
		return r.applyingFn()
	}
	w := r.pick(false)
	if w == nil {
		return "", -1, false
	}
	ps := make([]int32, 0, len(w.Owned()))
	for q := range w.Owned() {
		ps = append(ps, q)
	}
	if len(ps) == 0 {
		return "", -1, false
	}
	slices.Sort(ps)
	return w.Name(), ps[r.rng.IntN(len(ps))], true
}

// readCtx is a context for one reading of the cluster.
func (r *run) readCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.ctx, 5*time.Second)
}

// waitMoved reads where something is until it is no longer from (and
// cond, if set, holds for the reading), or the wait is over; it returns
// the new place, or -1.
func (r *run) waitMoved(from int32, read func(context.Context) (int32, error)) int32 {
	to := int32(-1)
	_ = r.waitUntil(r.times.move, "", func() bool {
		ctx, cancel := r.readCtx()
		defer cancel()
		id, err := read(ctx)
		if err == nil && id >= 0 && id != from {
			to = id
			return true
		}
		return false
	})
	return to
}

// nodeFault records one node fault's outcome, logs it, and reports
// whether it happened.
func (r *run) nodeFault(f NodeFault, what string) bool {
	r.mu.Lock()
	r.victim = "node " + strconv.Itoa(int(f.Node))
	r.res.NodeFaults = append(r.res.NodeFaults, f)
	r.mu.Unlock()
	switch {
	case f.Happened():
		r.logf("  %s: %s moved from node %d to node %d %s after the fault; node %d back and every replica in sync after %s",
			strings.ToUpper(string(f.Kind)), what, f.From, f.To, f.Moved.Round(time.Millisecond), f.Node, f.Back.Round(time.Millisecond))
	case f.To >= 0 && f.To != f.From:
		r.logf("  %s: %s moved from node %d to node %d, but the cut did not isolate the node: not counted", strings.ToUpper(string(f.Kind)), what, f.From, f.To)
	default:
		r.logf("  %s: %s did not move from node %d within %s: not counted", strings.ToUpper(string(f.Kind)), what, f.From, r.times.move)
	}
	return f.Happened()
}

// bringBack runs back (start or resume node id), then waits until every
// replica is in sync.
func (r *run) bringBack(id int32, back func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.times.back)
	defer cancel()
	if err := back(ctx); err != nil {
		return fmt.Errorf("chaos: bringing Kafka node %d back: %w", id, err)
	}
	return r.waitInSync()
}

// leaderKill kills (SIGKILL) the leader of a partition a worker is
// applying, waits until the cluster reports another leader of it, and
// starts the node again. It happened when the leader moved.
func (r *run) leaderKill() (bool, error) {
	name, p, ok := r.applying()
	if !ok {
		r.logf("leader-kill: no worker holds a partition; skipped")
		return false, nil
	}
	ctx, cancel := r.readCtx()
	old, err := r.nodes.Leader(ctx, r.topic, p)
	cancel()
	if err != nil {
		r.logf("leader-kill: the leader of partition %d: %v; skipped", p, err)
		return false, nil
	}
	start := time.Now()
	if err := r.nodes.Kill(old); err != nil {
		return false, fmt.Errorf("chaos: killing Kafka node %d: %w", old, err)
	}
	r.logf("LEADER-KILL node %d (SIGKILL), the leader of partition %d, which %s is applying", old, p, name)
	f := NodeFault{Kind: LeaderKill, Node: old, Partition: p, From: old}
	f.To = r.waitMoved(old, func(ctx context.Context) (int32, error) { return r.nodes.Leader(ctx, r.topic, p) })
	f.Moved = time.Since(start)
	err = r.bringBack(old, func(ctx context.Context) error { return r.nodes.Start(ctx, old) })
	f.Back = time.Since(start)
	return r.nodeFault(f, "the leader of partition "+strconv.Itoa(int(p))), err
}

// controllerKill kills (SIGKILL) the active KRaft controller, waits until
// the metadata quorum reports another leader at a newer epoch, and starts
// the node again. It happened when the controller changed.
func (r *run) controllerKill() (bool, error) {
	ctx, cancel := r.readCtx()
	old, epoch, err := r.nodes.Controller(ctx)
	cancel()
	if err != nil {
		r.logf("controller-kill: the active controller: %v; skipped", err)
		return false, nil
	}
	start := time.Now()
	if err := r.nodes.Kill(old); err != nil {
		return false, fmt.Errorf("chaos: killing Kafka node %d: %w", old, err)
	}
	r.logf("CONTROLLER-KILL node %d (SIGKILL), the active controller at epoch %d", old, epoch)
	f := NodeFault{Kind: ControllerKill, Node: old, Partition: -1, From: old}
	f.To = r.waitMoved(old, func(ctx context.Context) (int32, error) {
		id, e, err := r.nodes.Controller(ctx)
		if err == nil && e <= epoch {
			return -1, nil // the same quorum epoch: no new election yet
		}
		return id, err
	})
	f.Moved = time.Since(start)
	err = r.bringBack(old, func(ctx context.Context) error { return r.nodes.Start(ctx, old) })
	f.Back = time.Since(start)
	return r.nodeFault(f, "the active controller"), err
}

// brokerPause stops (SIGSTOP) the leader of a partition a worker is
// applying past the broker's session, waits until the controller fenced
// it (another node leads the partition), keeps it stopped at least
// nodeTimes.paused, and continues it (SIGCONT). It happened when the
// leader moved while the node was stopped.
func (r *run) brokerPause() (bool, error) {
	name, p, ok := r.applying()
	if !ok {
		r.logf("broker-pause: no worker holds a partition; skipped")
		return false, nil
	}
	ctx, cancel := r.readCtx()
	old, err := r.nodes.Leader(ctx, r.topic, p)
	cancel()
	if err != nil {
		r.logf("broker-pause: the leader of partition %d: %v; skipped", p, err)
		return false, nil
	}
	start := time.Now()
	if err := r.nodes.Pause(old); err != nil {
		return false, fmt.Errorf("chaos: pausing Kafka node %d: %w", old, err)
	}
	r.logf("BROKER-PAUSE node %d (SIGSTOP), the leader of partition %d, which %s is applying, past its broker session", old, p, name)
	f := NodeFault{Kind: BrokerPause, Node: old, Partition: p, From: old}
	f.To = r.waitMoved(old, func(ctx context.Context) (int32, error) { return r.nodes.Leader(ctx, r.topic, p) })
	f.Moved = time.Since(start)
	err = r.sleep(r.times.paused - time.Since(start))
	if resumeErr := r.nodes.Resume(old); resumeErr != nil {
		return false, fmt.Errorf("chaos: resuming Kafka node %d: %w", old, resumeErr)
	}
	r.logf("  node %d resumed (SIGCONT) after %s", old, time.Since(start).Round(time.Millisecond))
	if err == nil {
		err = r.bringBack(old, r.nodes.Ready)
	}
	f.Back = time.Since(start)
	return r.nodeFault(f, "the leader of partition "+strconv.Itoa(int(p))), err
}

// coordinatorRestart stops the node coordinating the workers' group (a
// controlled shutdown, SIGTERM), waits until another node coordinates the
// group, and starts it again. It happened when the coordinator moved.
func (r *run) coordinatorRestart() (bool, error) {
	ctx, cancel := r.readCtx()
	old, err := r.nodes.Coordinator(ctx, group)
	cancel()
	if err != nil {
		r.logf("coordinator-restart: the coordinator of group %s: %v; skipped", group, err)
		return false, nil
	}
	start := time.Now()
	stopCtx, cancel := context.WithTimeout(r.ctx, 30*time.Second) // then SIGKILL
	err = r.nodes.Stop(stopCtx, old)
	cancel()
	if err != nil {
		return false, fmt.Errorf("chaos: stopping Kafka node %d: %w", old, err)
	}
	r.logf("COORDINATOR-RESTART node %d, the coordinator of group %s: stopped (SIGTERM, controlled shutdown) in %s", old, group, time.Since(start).Round(time.Millisecond))
	f := NodeFault{Kind: CoordinatorRestart, Node: old, Partition: -1, From: old}
	f.To = r.waitMoved(old, func(ctx context.Context) (int32, error) { return r.nodes.Coordinator(ctx, group) })
	f.Moved = time.Since(start)
	err = r.bringBack(old, func(ctx context.Context) error { return r.nodes.Start(ctx, old) })
	f.Back = time.Since(start)
	return r.nodeFault(f, "the coordinator of group "+group), err
}

// nodeSummary formats, for the node faults that happened, one duration
// as "p50 / max (n of m)".
func nodeSummary(fs []NodeFault, of func(NodeFault) time.Duration) string {
	var ds []time.Duration
	for _, f := range fs {
		if f.Happened() {
			ds = append(ds, of(f))
		}
	}
	if len(ds) == 0 {
		return fmt.Sprintf("- (0 of %d)", len(fs))
	}
	slices.Sort(ds)
	return fmt.Sprintf("%s / %s (%d of %d)", ds[(len(ds)-1)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds), len(fs))
}
