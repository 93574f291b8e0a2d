package kafkacluster

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// DefaultProperties returns the broker properties every node of a cluster
// of n nodes gets before Config.Overrides: settings for tests on a small
// machine. Group timings are short (classic sessions down to 100 ms;
// KIP-848 sessions of 2 s with heartbeats every 200 ms, the broker's to
// decide under that protocol; no initial rebalance delay; KIP-848
// assignments computed at once rather than batched), internal topics are
// replicated min(n, 3) times with three partitions each, topics are never
// created by a request for them, and the thread pools are small. The
// listeners, node IDs, quorum and directories are not among them: Start
// sets those per node, and they cannot be overridden.
func DefaultProperties(n int) map[string]string {
	rf := strconv.Itoa(min(n, 3))
	return map[string]string{
		"auto.create.topics.enable":  "false",
		"num.partitions":             "1",
		"default.replication.factor": rf,
		"min.insync.replicas":        "1",

		"offsets.topic.replication.factor":                 rf,
		"offsets.topic.num.partitions":                     "3",
		"transaction.state.log.replication.factor":         rf,
		"transaction.state.log.min.isr":                    "1",
		"transaction.state.log.num.partitions":             "3",
		"share.coordinator.state.topic.replication.factor": rf,
		"share.coordinator.state.topic.min.isr":            "1",
		"share.coordinator.state.topic.num.partitions":     "3",
		"group.initial.rebalance.delay.ms":                 "0",
		"group.min.session.timeout.ms":                     "100",
		"group.consumer.min.session.timeout.ms":            "1000",
		"group.consumer.session.timeout.ms":                "2000",
		"group.consumer.min.heartbeat.interval.ms":         "100",
		"group.consumer.heartbeat.interval.ms":             "200",
		"group.consumer.assignment.interval.ms":            "0",
		"broker.session.timeout.ms":                        "4000",
		"broker.heartbeat.interval.ms":                     "500",
		"num.network.threads":                              "2",
		"num.io.threads":                                   "2",
		"background.threads":                               "2",
		"num.recovery.threads.per.data.dir":                "1",
		"group.coordinator.threads":                        "2",
		"log.cleaner.dedupe.buffer.size":                   "16777216",
	}
}

// fixedProperties are the keys Start sets per node; Overrides may not
// name them.
var fixedProperties = []string{
	"process.roles", "node.id", "listeners", "advertised.listeners",
	"controller.listener.names", "inter.broker.listener.name", "listener.security.protocol.map",
	"controller.quorum.voters", "controller.quorum.bootstrap.servers", "log.dirs", "metadata.log.dir",
}

// nodeProperties returns the properties file of node id.
func nodeProperties(cfg Config, nd *Node, nodes []*Node) (string, error) {
	p := DefaultProperties(len(nodes))
	for k, v := range cfg.Overrides {
		if slices.Contains(fixedProperties, k) {
			return "", fmt.Errorf("kafkacluster: Overrides may not set %s: the package sets it per node", k)
		}
		if v == "" {
			delete(p, k)
		} else {
			p[k] = v
		}
	}
	p["process.roles"] = "broker,controller"
	p["node.id"] = strconv.Itoa(int(nd.ID))
	p["listeners"] = "PLAINTEXT://" + nd.Listener + ",CONTROLLER://" + nd.ControllerAddr
	p["advertised.listeners"] = "PLAINTEXT://" + nd.Addr
	p["controller.listener.names"] = "CONTROLLER"
	p["inter.broker.listener.name"] = "PLAINTEXT"
	p["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
	p["log.dirs"] = nd.dataDir()
	if nd.replAdv != nil {
		// Config.Links: a replication and a controller listener per
		// source node, each advertised at that node's link to this one.
		var listeners, advertised, protos, ctrls []string
		listeners = append(listeners, "PLAINTEXT://"+nd.Listener)
		advertised = append(advertised, "PLAINTEXT://"+nd.Addr)
		protos = append(protos, "PLAINTEXT:PLAINTEXT")
		ctrls = append(ctrls, controllerListener(nd.ID))
		for j, o := range nodes {
			repl, ctrl := replicationListener(o.ID), controllerListener(o.ID)
			listeners = append(listeners, repl+"://"+nd.replListen[j], ctrl+"://"+nd.ctrlListen[j])
			advertised = append(advertised, repl+"://"+nd.replAdv[j], ctrl+"://"+nd.ctrlAdv[j])
			protos = append(protos, repl+":PLAINTEXT", ctrl+":PLAINTEXT")
			if o != nd {
				ctrls = append(ctrls, ctrl)
			}
		}
		p["listeners"] = strings.Join(listeners, ",")
		p["advertised.listeners"] = strings.Join(advertised, ",")
		p["listener.security.protocol.map"] = strings.Join(protos, ",")
		p["inter.broker.listener.name"] = replicationListener(nd.ID)
		p["controller.listener.names"] = strings.Join(ctrls, ",")
	}
	if len(nodes) == 1 {
		// A single-node dynamic quorum (KIP-853), formatted --standalone.
		p["controller.quorum.bootstrap.servers"] = nd.ControllerAddr
	} else {
		// A static quorum: every node votes, formatted with no quorum
		// flag; with Config.Links each node reaches the others'
		// controllers through its links.
		var voters []string
		for _, o := range nodes {
			addr := o.ControllerAddr
			if o.ctrlAdv != nil {
				addr = o.ctrlAdv[nd.ID-1]
			}
			voters = append(voters, fmt.Sprintf("%d@%s", o.ID, addr))
		}
		p["controller.quorum.voters"] = strings.Join(voters, ",")
	}
	var b strings.Builder
	b.WriteString("# Written by internal/kafkacluster.\n")
	for _, k := range slices.Sorted(maps.Keys(p)) {
		fmt.Fprintf(&b, "%s=%s\n", k, p[k])
	}
	return b.String(), nil
}

// property returns the effective value of key for a cluster of n nodes
// under cfg's overrides.
func property(cfg Config, n int, key string) string {
	if v, ok := cfg.Overrides[key]; ok {
		return v
	}
	return DefaultProperties(n)[key]
}
