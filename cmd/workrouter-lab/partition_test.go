package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/internal/testredis"
)

// partitionLine is the final line of a passing network-fault run: at
// least one stale write refused, no violation.
var partitionLine = regexp.MustCompile(`^chaos: faults=[1-9][0-9]* kinds=([1-4]) commands=[1-9][0-9]* stale_rejected=[1-9][0-9]* .* violations=0$`)

// checkPartition asserts a passing network-fault run: exit 0, the final
// line, each kind fired, F/L/O/X/V/D zero, and for partition-broker a
// held write refused after a takeover while the worker's broker links
// were cut.
func checkPartition(t *testing.T, code int, out string, kinds ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if m := partitionLine.FindStringSubmatch(last); code != 0 || m == nil || m[1] != string(rune('0'+len(kinds))) {
		t.Fatalf("exit %d, final line %q\n%s", code, last, out)
	}
	for _, k := range kinds {
		if !regexp.MustCompile(`(?m)^` + k + ` +[1-9][0-9]*$`).MatchString(out) {
			t.Errorf("table lacks a fired %s row:\n%s", k, out)
		}
	}
	for _, inv := range []string{"F", "L", "O", "X", "V", "D"} {
		if !regexp.MustCompile(`(?m)^violations ` + inv + ` \([^)]*\) +0$`).MatchString(out) {
			t.Errorf("table lacks a zero %s row:\n%s", inv, out)
		}
	}
	if !strings.Contains(out, "network fault layer: each of 3 workers reaches the brokers") {
		t.Errorf("the workers were not routed through the network fault layer:\n%s", out)
	}
	for _, k := range kinds {
		switch k {
		case "partition-broker":
			if !regexp.MustCompile(`HEAL w[0-9]'s broker links after [^:]*: [1-9][0-9]* bytes dropped; its write after the takeover refused by the sink: true`).MatchString(out) {
				t.Errorf("no partition-broker fault saw its held write refused after the takeover:\n%s", out)
			}
		case "partition-sink":
			if !regexp.MustCompile(`HEAL w[0-9]'s sink link: [1-9][0-9]* bytes dropped while cut; [1-9][0-9]* sink operations failed and retried; applied a batch again after the heal: true`).MatchString(out) {
				t.Errorf("no partition-sink fault dropped bytes, failed a sink operation and saw its worker apply again after the heal:\n%s", out)
			}
		case "one-way":
			if !regexp.MustCompile(`HEAL w[0-9]'s sink link: [1-9][0-9]* reply bytes dropped; [1-9][0-9]* sink operations failed and retried`).MatchString(out) {
				t.Errorf("no one-way fault dropped replies and saw its worker retry:\n%s", out)
			}
		case "slow-link":
			if !regexp.MustCompile(`HEAL w[0-9]'s broker links: [1-9][0-9]* bytes delayed`).MatchString(out) {
				t.Errorf("no slow-link fault delayed bytes:\n%s", out)
			}
		}
	}
}

// TestChaosPartitionBroker: on kfake and SQLite, a worker cut off from
// its broker while it holds a batch loses its partitions, and its write
// after the takeover is refused by the sink; nothing is violated.
func TestChaosPartitionBroker(t *testing.T) {
	code, out := runChaos(t, 4*time.Minute, "--faults", "partition-broker", "--duration", "20s", "--seed", "1")
	checkPartition(t, code, out, "partition-broker")
}

// TestChaosPartitionPostgres: the four network kinds on PostgreSQL.
func TestChaosPartitionPostgres(t *testing.T) {
	dsn := testpg.DSN(t)
	code, out := runChaos(t, 4*time.Minute, "--faults", "partition-broker,partition-sink,one-way,slow-link", "--duration", "40s", "--seed", "4", "--sink", dsn)
	checkPartition(t, code, out, "partition-broker", "partition-sink", "one-way", "slow-link")
}

// TestChaosPartitionRedis: the four network kinds on Redis.
func TestChaosPartitionRedis(t *testing.T) {
	u := testredis.URL(t)
	code, out := runChaos(t, 4*time.Minute, "--faults", "partition-broker,partition-sink,one-way,slow-link", "--duration", "40s", "--seed", "5", "--sink", u)
	checkPartition(t, code, out, "partition-broker", "partition-sink", "one-way", "slow-link")
}
