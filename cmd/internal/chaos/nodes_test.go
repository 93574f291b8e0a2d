package chaos

import (
	"context"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// fakeNodes is a cluster of three nodes whose leader (of every
// partition), controller and group coordinator move to moveTo when the
// node holding them is killed, paused or stopped, or stay (moveTo -1).
type fakeNodes struct {
	mu                              sync.Mutex
	leader, controller, coordinator int32
	epoch                           int32
	moveTo                          int32
	// sameEpoch: a moved controller is reported at the old epoch.
	sameEpoch bool
	// notInSync: InSync never succeeds.
	notInSync bool
	down      map[int32]string // node → "killed", "paused", "stopped"
	events    []string
}

func newFakeNodes(moveTo int32) *fakeNodes {
	return &fakeNodes{leader: 1, controller: 1, coordinator: 1, epoch: 5, moveTo: moveTo, down: map[int32]string{}}
}

func (f *fakeNodes) Leader(context.Context, string, int32) (int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leader, nil
}

func (f *fakeNodes) Controller(context.Context) (int32, int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.controller, f.epoch, nil
}

func (f *fakeNodes) Coordinator(context.Context, string) (int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.coordinator, nil
}

// fail takes node id down as how, moving what it held if moveTo says so.
func (f *fakeNodes) fail(id int32, how string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[id] != "" {
		return errors.New("node already down")
	}
	f.down[id] = how
	f.events = append(f.events, how)
	if f.moveTo < 0 {
		return nil
	}
	if f.leader == id {
		f.leader = f.moveTo
	}
	if f.controller == id {
		f.controller = f.moveTo
		if !f.sameEpoch {
			f.epoch++
		}
	}
	if f.coordinator == id {
		f.coordinator = f.moveTo
	}
	return nil
}

func (f *fakeNodes) back(id int32, how, from string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[id] != from {
		return errors.New("node " + how + " while " + f.down[id])
	}
	delete(f.down, id)
	f.events = append(f.events, how)
	return nil
}

func (f *fakeNodes) Kill(id int32) error                    { return f.fail(id, "killed") }
func (f *fakeNodes) Stop(_ context.Context, id int32) error { return f.fail(id, "stopped") }
func (f *fakeNodes) Pause(id int32) error                   { return f.fail(id, "paused") }
func (f *fakeNodes) Resume(id int32) error                  { return f.back(id, "resumed", "paused") }
func (f *fakeNodes) Ready(context.Context) error            { return nil }
func (f *fakeNodes) Start(_ context.Context, id int32) error {
	f.mu.Lock()
	how := f.down[id]
	f.mu.Unlock()
	if how != "killed" && how != "stopped" {
		return errors.New("node started while " + how)
	}
	return f.back(id, "started", how)
}

func (f *fakeNodes) InSync(context.Context, ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notInSync || len(f.down) > 0 {
		return errors.New("not in sync")
	}
	return nil
}

// nodeRun is a run with only what the node faults use.
func nodeRun(t *testing.T, f *fakeNodes) *run {
	t.Helper()
	return &run{ctx: t.Context(), tl: cluster.NewTimeline(io.Discard), rng: rand.New(rand.NewPCG(1, 2)),
		topic: "t", nodes: f,
		times:      nodeTimes{move: 300 * time.Millisecond, paused: 20 * time.Millisecond, back: 300 * time.Millisecond},
		applyingFn: func() (string, int32, bool) { return "w1", 2, true },
		res:        Result{Faults: map[Kind]int{}}}
}

// TestNodeFaultsCountedWhenMoved: each node fault is counted when the
// cluster reports that the leader, controller or coordinator moved, and
// leaves the node running again.
func TestNodeFaultsCountedWhenMoved(t *testing.T) {
	want := map[Kind][]string{
		LeaderKill:         {"killed", "started"},
		ControllerKill:     {"killed", "started"},
		BrokerPause:        {"paused", "resumed"},
		CoordinatorRestart: {"stopped", "started"},
	}
	for _, k := range nodeKinds {
		t.Run(string(k), func(t *testing.T) {
			f := newFakeNodes(2)
			r := nodeRun(t, f)
			fired, err := r.injectTraced(k)
			if err != nil || !fired {
				t.Fatalf("fired %v, err %v; want a fault that happened", fired, err)
			}
			if r.res.Faults[k] != 1 || len(r.res.Trace.Faults) != 1 || r.res.Trace.Faults[0].Victim != "node 1" {
				t.Fatalf("counted %v, spans %+v; want one %s on node 1", r.res.Faults, r.res.Trace.Faults, k)
			}
			nf := r.res.NodeFaults
			if len(nf) != 1 || nf[0].Kind != k || nf[0].From != 1 || nf[0].To != 2 || !nf[0].Happened() {
				t.Fatalf("node faults %+v; want one %s from node 1 to node 2", nf, k)
			}
			if !slices.Equal(f.events, want[k]) || len(f.down) != 0 {
				t.Fatalf("events %v, down %v; want %v and every node back", f.events, f.down, want[k])
			}
		})
	}
}

// TestNodeFaultsNotCountedUnlessMoved: a fault after which the cluster
// still reports the same leader, controller (or a new controller at the
// old quorum epoch) or coordinator did not happen: it is reported so and
// not counted, and the node is brought back all the same.
func TestNodeFaultsNotCountedUnlessMoved(t *testing.T) {
	for _, k := range nodeKinds {
		t.Run(string(k), func(t *testing.T) {
			f := newFakeNodes(-1)
			r := nodeRun(t, f)
			var out strings.Builder
			r.tl = cluster.NewTimeline(&out)
			fired, err := r.injectTraced(k)
			if err != nil || fired {
				t.Fatalf("fired %v, err %v; want a fault that did not happen, without error", fired, err)
			}
			if r.res.Faults[k] != 0 || len(r.res.Trace.Faults) != 0 {
				t.Fatalf("counted %v, spans %+v; want nothing counted", r.res.Faults, r.res.Trace.Faults)
			}
			if nf := r.res.NodeFaults; len(nf) != 1 || nf[0].Happened() || nf[0].To != -1 {
				t.Fatalf("node faults %+v; want one that did not happen", nf)
			}
			if !strings.Contains(out.String(), "did not move from node 1") || len(f.down) != 0 {
				t.Fatalf("down %v, timeline:\n%s", f.down, out.String())
			}
		})
	}
	t.Run("controller at the old epoch", func(t *testing.T) {
		f := newFakeNodes(3)
		f.sameEpoch = true
		r := nodeRun(t, f)
		if fired, err := r.injectTraced(ControllerKill); err != nil || fired || r.res.Faults[ControllerKill] != 0 {
			t.Fatalf("fired %v, err %v, counted %v; a controller reported at the old epoch is no new election", fired, err, r.res.Faults)
		}
	})
}

// TestNodeFaultFailsWhenReplicasStayOutOfSync: the run does not go on to
// the next fault while a replica is out of sync (a second node down could
// then lose acknowledged writes or stall the partition).
func TestNodeFaultFailsWhenReplicasStayOutOfSync(t *testing.T) {
	f := newFakeNodes(2)
	f.notInSync = true
	r := nodeRun(t, f)
	if _, err := r.injectTraced(LeaderKill); err == nil || !strings.Contains(err.Error(), "in sync") {
		t.Fatalf("err %v; want the wait for every replica in sync to fail", err)
	}
}

// TestNodeFaultSkippedWithoutAnApplyingWorker: leader-kill and
// broker-pause act on the leader of a partition a worker is applying; with
// none, nothing is done and nothing counted.
func TestNodeFaultSkippedWithoutAnApplyingWorker(t *testing.T) {
	for _, k := range []Kind{LeaderKill, BrokerPause} {
		f := newFakeNodes(2)
		r := nodeRun(t, f)
		r.applyingFn = func() (string, int32, bool) { return "", -1, false }
		if fired, err := r.injectTraced(k); fired || err != nil || len(f.events) != 0 || r.res.Faults[k] != 0 {
			t.Fatalf("%s: fired %v, err %v, events %v", k, fired, err, f.events)
		}
	}
}

// TestKindsWhereTheRunGoes: "all" is every kind that applies where the run
// goes, a kind that does not apply is refused with the reason, and the
// table names the excluded kinds with theirs.
func TestKindsWhereTheRunGoes(t *testing.T) {
	w := cluster.Binary{Argv: []string{"x"}}
	for _, tc := range []struct {
		cfg  Config
		want []Kind
	}{
		{Config{Worker: w}, EmbeddedKinds()},
		{Config{Worker: w, KafkaNodes: 3}, ClusterKinds()},
		{Config{Worker: w, Brokers: []string{"b:9092"}}, ExternalKinds()},
	} {
		c, err := tc.cfg.withDefaults()
		if err != nil || !slices.Equal(c.Kinds, tc.want) {
			t.Fatalf("kinds %v, err %v; want %v", c.Kinds, err, tc.want)
		}
		ex := Excluded(len(tc.cfg.Brokers) > 0, tc.cfg.KafkaNodes > 0)
		for _, k := range Kinds() {
			if slices.Contains(NetKinds(), k) || k == PartitionBrokerNode && tc.cfg.KafkaNodes > 0 {
				continue // asked for by name only
			}
			if _, out := ex[k]; out == slices.Contains(tc.want, k) {
				t.Errorf("%+v: kind %s applies %v and is excluded %v", tc.cfg, k, slices.Contains(tc.want, k), out)
			}
		}
	}
	if !slices.Contains(ClusterKinds(), Poison) || slices.Contains(ClusterKinds(), BrokerRestart) {
		t.Fatalf("cluster kinds %v", ClusterKinds())
	}
	for name, cfg := range map[string]Config{
		"heartbeat on Kafka nodes":       {Worker: w, KafkaNodes: 3, Kinds: []Kind{Heartbeat}},
		"leader-kill on kfake":           {Worker: w, Kinds: []Kind{LeaderKill}},
		"leader-kill on --brokers":       {Worker: w, Brokers: []string{"b:9092"}, Kinds: []Kind{LeaderKill}},
		"two nodes":                      {Worker: w, KafkaNodes: 2},
		"nodes and an external list":     {Worker: w, KafkaNodes: 3, Brokers: []string{"b:9092"}},
		"partition-broker-node on kfake": {Worker: w, Kinds: []Kind{PartitionBrokerNode}},
	} {
		if _, err := cfg.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", name, err)
		}
	}
	// The network kinds run on the Kafka sink: its clients reach the
	// brokers through links of their own (TestChaosPartitionKafka).
	if c, err := (Config{Worker: w, Kafka: true, Kinds: NetKinds()}).withDefaults(); err != nil || !slices.Equal(c.Kinds, NetKinds()) {
		t.Errorf("the network kinds on --sink kafka: kinds %v, err %v", c.Kinds, err)
	}
	res := Result{Requested: ClusterKinds(), Faults: map[Kind]int{}, Excluded: Excluded(false, true)}
	if tab := res.Table(); !regexp.MustCompile(`(?m)^broker-restart +- \(does not apply here: it kills and restarts the embedded broker's process`).MatchString(tab) {
		t.Fatalf("table:\n%s", tab)
	}
}

// TestPartitionBrokerNodeCountedOnlyIsolated: a partition-broker-node
// fault counts when the leader moved and the node's replication (either
// way: a node leading every partition sends no fetches), controller and
// client links each dropped bytes while cut; one whose replication links
// dropped nothing (replication that does not go through the links: the
// node still reached its peers) is not counted, even though the leader
// moved (the controller fenced it).
func TestPartitionBrokerNodeCountedOnlyIsolated(t *testing.T) {
	cut := map[string]int64{"replication in": 42, "replication out": 1820, "controller": 954, "client": 7539}
	f := NodeFault{Kind: PartitionBrokerNode, Node: 2, From: 2, To: 3, Cut: cut}
	if !f.Happened() {
		t.Fatalf("%+v not counted", f)
	}
	for _, zero := range [][]string{{"replication in"}, {"replication out"}} {
		f.Cut = maps.Clone(cut)
		f.Cut[zero[0]] = 0
		if !f.Happened() {
			t.Errorf("not counted with only %s quiet: %+v", zero, f)
		}
	}
	for _, zero := range [][]string{{"replication in", "replication out"}, {"controller"}, {"client"}} {
		f.Cut = maps.Clone(cut)
		for _, k := range zero {
			f.Cut[k] = 0
		}
		if f.Happened() {
			t.Errorf("counted although the %v links dropped nothing: %+v", zero, f)
		}
	}
	f.Cut, f.To = cut, -1
	if f.Happened() {
		t.Errorf("counted although the leader never moved: %+v", f)
	}
}
