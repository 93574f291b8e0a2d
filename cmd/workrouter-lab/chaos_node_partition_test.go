package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestChaosPartitionBrokerNode runs partition-broker-node on three Apache
// Kafka nodes: each fault cuts one node off from its peers (replication
// and controller links, both ways) and from its clients, the other nodes
// must name another leader of the partition it led, and every kind of its
// links must have dropped bytes while cut, or the fault is not counted
// (and the run fails: a requested kind that never fired). F, L, O, X, V
// and D hold. It needs Java: without it the test skips, unless CI=true.
func TestChaosPartitionBrokerNode(t *testing.T) {
	if _, err := exec.LookPath("java"); err != nil && os.Getenv("CI") != "true" {
		t.Skip("partition-broker-node runs Apache Kafka nodes, which need java on PATH (CI=true fails instead)")
	}
	code, out := runChaos(t, 8*time.Minute, "--kafka-nodes", "3", "--faults", "partition-broker-node", "--duration", "40s", "--seed", "1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if code != 0 || !regexp.MustCompile(`^chaos: faults=[1-9][0-9]* kinds=1 .* violations=0$`).MatchString(last) {
		t.Fatalf("exit %d, final line %q\n%s", code, last, out)
	}
	if !regexp.MustCompile(`(?m)^partition-broker-node +[1-9][0-9]*$`).MatchString(out) {
		t.Errorf("table lacks a fired partition-broker-node row:\n%s", out)
	}
	for _, inv := range []string{"F", "L", "O", "X", "V", "D"} {
		if !regexp.MustCompile(`(?m)^violations ` + inv + ` \([^)]*\) +0$`).MatchString(out) {
			t.Errorf("table lacks a zero %s row:\n%s", inv, out)
		}
	}
	// Each counted fault: the leader moved off the cut node, and every
	// kind of its links dropped bytes while cut.
	if !regexp.MustCompile(`PARTITION-BROKER-NODE: the leader of partition [0-9]+ moved from node [1-3] to node [1-3]`).MatchString(out) {
		t.Errorf("no leader moved off a cut node:\n%s", out)
	}
	if !regexp.MustCompile(`bytes dropped while cut: replication in ([1-9][0-9]*, replication out [0-9]+|[0-9]+, replication out [1-9][0-9]*), controller [1-9][0-9]*, client [1-9][0-9]*`).MatchString(out) {
		t.Errorf("no cut dropped bytes on every kind of a node's links:\n%s", out)
	}
}
