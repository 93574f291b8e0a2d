// Package kafkacluster runs a real Apache Kafka cluster on this machine for
// tests, the CLI's harness and CI: one node, or several, each a broker and a
// KRaft controller in one JVM process (kafka.Kafka), on free ports of
// 127.0.0.1, each with its own data directory and log file. No Docker and
// no network but Maven Central, once: the broker's classpath is copied by
// Maven into a cache outside the work tree (Fetch) and reused from there.
//
// Start formats every node's storage with Kafka's StorageTool (a
// single node as a standalone dynamic quorum, several as a static quorum of
// them all), starts the nodes and returns once the cluster is ready: every
// running node is in the metadata, and every partition of the offsets and
// transaction topics has a coordinator that answers (for groups: classic
// DescribeGroups and KIP-848 ConsumerGroupDescribe). A node can then be
// stopped, killed with SIGKILL, paused with SIGSTOP, resumed and restarted;
// Close stops them all.
//
// Without java, or without the cached classpath and mvn to fetch it, Start
// returns an error matching ErrUnavailable that says what to install: a
// test skips on it (Testing does that, and fails instead under CI=true).
//
// With Config.Links, every path to a node (its clients', and each other
// node's replication and controller connections, one listener per source
// node) goes through an address of the caller's, a proxy it controls, so
// that it can cut one node off from the others and from its clients.
//
// The nodes are tuned for tests on a small machine (DefaultProperties,
// DefaultJVMOptions). The command kafkacluster (cmd/kafkacluster) starts a
// cluster that outlives it, for scripts:
//
//	go run ./internal/kafkacluster/cmd/kafkacluster up --nodes 1 --dir D  # prints WORKROUTER_TEST_BROKERS=…
//	go run ./internal/kafkacluster/cmd/kafkacluster down --dir D
package kafkacluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// DefaultJVMOptions are the JVM options of each node unless
// Config.JVMOptions replaces them: a small heap, the serial collector
// (no collector threads competing for a small machine's cores), and the
// first JIT tier only, which starts a node sooner.
var DefaultJVMOptions = []string{
	"-Xms256m", "-Xmx512m",
	"-XX:+UseSerialGC",
	"-XX:TieredStopAtLevel=1",
	"-XX:+ExitOnOutOfMemoryError",
	"-XX:-UsePerfData",
	"-Djava.awt.headless=true",
}

// Config says what cluster Start runs.
type Config struct {
	// Nodes is how many nodes, each a broker and a controller; 1 if 0.
	Nodes int
	// Dir holds one directory per node (node-1, node-2, …: its
	// server.properties, data and server.log). If empty, Start makes a
	// temporary directory and Close removes it.
	Dir string
	// CacheDir is where the classpath is cached; DefaultCacheDir if empty.
	CacheDir string
	// Overrides are broker properties set over DefaultProperties on every
	// node, for example a short offsets.retention.minutes; an empty value
	// removes a default. Keys that Start sets per node (listeners, node
	// ID, quorum, directories) are refused.
	Overrides map[string]string
	// JVMOptions replaces DefaultJVMOptions when not nil.
	JVMOptions []string
	// GroupLogLevel is the Log4j level of the group coordinator's loggers
	// (DEBUG shows every heartbeat's outcome); INFO if empty.
	GroupLogLevel string
	// Logf, if set, is told what the package does: the Maven fetch, each
	// node started with its address and log file, a node stopped, killed,
	// paused or restarted. testing.T.Logf fits.
	Logf func(format string, args ...any)
	// Detached starts processes that do not die with this one (a session of
	// their own, no parent-death signal), for Detach. Otherwise Linux kills
	// the nodes if this process dies.
	Detached bool
	// Links, if set, puts an address of the caller's on every path to a
	// node, so that the caller can cut one node off from the others and
	// from clients (a network partition) with proxies of its own: it is
	// called once per Link while Start prepares the nodes, with the
	// listener the link reaches, and returns the address to dial instead
	// (the proxy's, which forwards to Upstream; Upstream itself leaves
	// the link direct). Each node's client link becomes its Addr, the
	// address the metadata advertises to clients. With several nodes,
	// node i also gets, for each source node j, a replication listener
	// REPLICATION_j and a controller listener CONTROLLER_j, advertised at
	// the addresses of Link{Replication, j, i} and Link{Controller, j,
	// i}; node j's inter.broker.listener.name is REPLICATION_j, its first
	// controller.listener.names entry CONTROLLER_j, and its
	// controller.quorum.voters names node i at Link{Controller, j, i}.
	// Kafka looks a peer's endpoint up by the name of the listener the
	// looking node uses, so every connection between two nodes (follower
	// fetches, the quorum's fetches and votes, broker heartbeats to the
	// active controller) goes through the link of its direction: a static
	// voters list alone is not enough, as the quorum leader's followers
	// reach it at the controller endpoints it advertises. The proxies must
	// outlive the cluster; Detached clusters outlive them, so do not use
	// both. Default nil: every listener is dialled directly.
	Links func(Link) (string, error)
}

// Cluster is a running cluster. Its methods may be called from any
// goroutine.
type Cluster struct {
	cfg     Config
	install Install
	dir     string
	tempDir bool
	nodes   []*Node

	closeOnce sync.Once
	closeErr  error
	detached  bool
}

// Start fetches the classpath if needed, formats and starts cfg.Nodes
// nodes, and waits until the cluster is ready (see the package doc) or ctx
// is done. On error nothing it started is left running.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 1
	}
	if cfg.Links != nil && cfg.Detached {
		return nil, errors.New("kafkacluster: Links and Detached: the caller's proxies would not outlive it")
	}
	in, err := Fetch(ctx, cfg.CacheDir, cfg.Logf)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, install: in, dir: cfg.Dir}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "kafkacluster-"); err != nil {
			return nil, err
		}
		c.tempDir = true
	} else if c.dir, err = filepath.Abs(c.dir); err != nil {
		return nil, err
	}
	fail := func(err error) (*Cluster, error) {
		c.Close()
		return nil, err
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(c.log4jFile(), log4j2, 0o644); err != nil {
		return fail(err)
	}
	ports, err := freePorts(portsPerNode(cfg) * cfg.Nodes)
	if err != nil {
		return fail(err)
	}
	if err := c.layOut(ports); err != nil {
		return fail(err)
	}
	clusterID, err := newClusterID()
	if err != nil {
		return fail(err)
	}
	// Format every node's storage, concurrently: each is a JVM start.
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		props, err := nodeProperties(cfg, n, c.nodes)
		if err != nil {
			return fail(err)
		}
		if err := os.RemoveAll(n.Dir); err != nil {
			return fail(err)
		}
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			return fail(err)
		}
		if err := os.WriteFile(n.propsFile(), []byte(props), 0o644); err != nil {
			return fail(err)
		}
		wg.Go(func() { errs[i] = n.format(ctx, clusterID, len(c.nodes) == 1) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	for _, n := range c.nodes {
		if err := n.start(); err != nil {
			return fail(err)
		}
	}
	if err := c.WaitReady(ctx); err != nil {
		return fail(err)
	}
	return c, nil
}

// portsPerNode is how many listeners each node has: two (broker and
// controller), and with Links on several nodes a broker listener and one
// replication and one controller listener per source node.
func portsPerNode(cfg Config) int {
	if cfg.Links != nil && cfg.Nodes > 1 {
		return 1 + 2*cfg.Nodes
	}
	return 2
}

// layOut makes the nodes, on ports (portsPerNode each), and wires the
// links if c.cfg.Links is set.
func (c *Cluster) layOut(ports []int) error {
	per := portsPerNode(c.cfg)
	local := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	for i := range c.cfg.Nodes {
		id := int32(i + 1)
		np := ports[per*i : per*(i+1)]
		n := &Node{
			ID:             id,
			Addr:           local(np[0]),
			Listener:       local(np[0]),
			ControllerAddr: local(np[1]),
			Dir:            filepath.Join(c.dir, fmt.Sprintf("node-%d", id)),
			c:              c,
		}
		if per > 2 {
			for j := range c.cfg.Nodes {
				n.replListen = append(n.replListen, local(np[1+j]))
				n.ctrlListen = append(n.ctrlListen, local(np[1+c.cfg.Nodes+j]))
			}
			n.ControllerAddr = n.ctrlListen[i]
		}
		n.LogFile = filepath.Join(n.Dir, "server.log")
		c.nodes = append(c.nodes, n)
	}
	if c.cfg.Links != nil {
		return c.wireLinks()
	}
	return nil
}

func (c *Cluster) logf(format string, args ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, args...)
	}
}

func (c *Cluster) log4jFile() string { return filepath.Join(c.dir, "log4j2.xml") }

// Dir returns the directory holding the nodes' directories.
func (c *Cluster) Dir() string { return c.dir }

// Nodes returns the nodes, in node ID order (IDs 1 to n).
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node returns the node of id, or nil.
func (c *Cluster) Node(id int32) *Node {
	for _, n := range c.nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Brokers returns every node's broker address (host:port), running or
// not: a client's seed brokers.
func (c *Cluster) Brokers() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr
	}
	return out
}

// BrokersEnv returns Brokers as WORKROUTER_TEST_BROKERS takes them:
// comma-separated.
func (c *Cluster) BrokersEnv() string { return strings.Join(c.Brokers(), ",") }

// Close kills every node still running (SIGKILL: the data of a test cluster
// is scratch; Node.Stop is the graceful stop) and waits for it to exit, and
// removes the directory if Start made it. It is idempotent. After Detach it
// does nothing.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		if c.detached {
			return
		}
		var errs []error
		for _, n := range c.nodes {
			if err := n.Kill(); err != nil && !errors.Is(err, ErrNotRunning) {
				errs = append(errs, err)
			}
		}
		if c.tempDir {
			errs = append(errs, os.RemoveAll(c.dir))
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// freePorts returns n distinct ports free on 127.0.0.1 now.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Testing starts a cluster for a test and stops it when the test ends.
// cfg.Logf defaults to t.Logf. If this machine cannot run a broker
// (ErrUnavailable), the test is skipped with one line saying why, or, under
// CI=true, fails. If the test fails, the tail of every node's log is
// logged.
func Testing(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Start(ctx, cfg)
	if errors.Is(err, ErrUnavailable) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: failing instead of skipping)", err)
		}
		t.Skip(strings.ReplaceAll(err.Error(), "\n", " "))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.nodes {
				t.Logf("last lines of node %d's log %s:\n%s", n.ID, n.LogFile, n.Tail(40))
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("closing the Kafka cluster: %v", err)
		}
	})
	return c
}
