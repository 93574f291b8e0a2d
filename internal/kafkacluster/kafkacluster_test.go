package kafkacluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/internal/kafkacluster"
)

// waitFor polls cond until it holds or d passes (which fails t). The
// deadline bounds a failing test; it asserts nothing about speed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("gave up after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func createTopic(t *testing.T, c *kafkacluster.Cluster, topic string, partitions int32) {
	t.Helper()
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, -1, nil, topic); err != nil {
		t.Fatalf("creating %s: %v", topic, err)
	}
}

// produce writes n records value-0..value-(n-1) to partition 0 of topic
// with acks from every in-sync replica.
func produce(t *testing.T, c *kafkacluster.Cluster, topic string, from, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequestTimeoutOverhead(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var recs []*kgo.Record
	for i := from; i < from+n; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("value-" + strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing to %s: %v", topic, err)
	}
}

// consume reads partition 0 of topic from the start until it has n
// records, through group, committing what it read, and returns their
// values.
func consume(t *testing.T, c *kafkacluster.Cluster, topic, group string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consuming %s: %d of %d records: %v", topic, len(got), n, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("committing %s: %v", group, err)
	}
	return got
}

func wantValues(t *testing.T, got []string, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("read %d records, want %d", len(got), n)
	}
	for i, v := range got {
		if v != "value-"+strconv.Itoa(i) {
			t.Fatalf("record %d is %q, want value-%d", i, v, i)
		}
	}
}

// committed returns group's committed offset of partition 0 of topic.
func committed(c *kafkacluster.Cluster, topic, group string) (int64, error) {
	adm, err := c.Admin()
	if err != nil {
		return 0, err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, err
	}
	o, ok := offs.Lookup(topic, 0)
	if !ok {
		return 0, fmt.Errorf("group %s has no offset for %s/0", group, topic)
	}
	return o.At, o.Err
}

// TestSingleNode starts one node and produces and consumes through it,
// then checks the properties it was told to override.
func TestSingleNode(t *testing.T) {
	c := kafkacluster.Testing(t, kafkacluster.Config{Overrides: map[string]string{"offsets.retention.minutes": "7"}})
	if len(c.Brokers()) != 1 {
		t.Fatalf("brokers %v, want one", c.Brokers())
	}
	createTopic(t, c, "single", 1)
	produce(t, c, "single", 0, 100)
	wantValues(t, consume(t, c, "single", "single-group", 100), 100)
	if at, err := committed(c, "single", "single-group"); err != nil || at != 100 {
		t.Fatalf("committed offset %d (%v), want 100", at, err)
	}

	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	cfgs, err := adm.DescribeBrokerConfigs(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, rc := range cfgs {
		for _, cf := range rc.Configs {
			got[cf.Key] = cf.MaybeValue()
		}
	}
	for k, want := range map[string]string{
		"offsets.retention.minutes":             "7",
		"group.consumer.assignment.interval.ms": "0",
		"offsets.topic.replication.factor":      "1",
		"auto.create.topics.enable":             "false",
	} {
		if got[k] != want {
			t.Errorf("broker config %s = %q, want %q", k, got[k], want)
		}
	}
	if _, err := os.Stat(c.Nodes()[0].LogFile); err != nil {
		t.Errorf("node log: %v", err)
	}
}

// TestOverridesRefuseNodeSettings: the keys Start sets per node cannot be
// overridden (checked before any JVM starts).
func TestOverridesRefuseNodeSettings(t *testing.T) {
	if _, err := kafkacluster.Fetch(t.Context(), "", nil); errors.Is(err, kafkacluster.ErrUnavailable) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	_, err := kafkacluster.Start(t.Context(), kafkacluster.Config{Dir: t.TempDir(), Overrides: map[string]string{"node.id": "7"}})
	if err == nil {
		t.Fatal("Start accepted an override of node.id")
	}
}

// TestThreeNodes runs the faults on one three-node cluster, each leaving it
// whole for the next: a partition leader killed with SIGKILL (leadership
// moves, the records stay readable), a node paused with SIGSTOP and
// resumed (its leaderships move while it is stopped, it rejoins), and the
// group coordinator's node restarted (the group's committed offset
// survives it).
func TestThreeNodes(t *testing.T) {
	c := kafkacluster.Testing(t, kafkacluster.Config{Nodes: 3})
	if len(c.Brokers()) != 3 {
		t.Fatalf("brokers %v, want three", c.Brokers())
	}
	ctx := t.Context()

	t.Run("KillLeader", func(t *testing.T) {
		createTopic(t, c, "kill", 1)
		produce(t, c, "kill", 0, 50)
		leader, err := c.Leader(ctx, "kill", 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := leader.Kill(); err != nil {
			t.Fatal(err)
		}
		if leader.Running() {
			t.Fatalf("node %d still runs after Kill", leader.ID)
		}
		waitFor(t, time.Minute, "a new leader of kill/0", func() error {
			n, err := c.Leader(ctx, "kill", 0)
			if err != nil {
				return err
			}
			if n.ID == leader.ID {
				return fmt.Errorf("node %d still leads", n.ID)
			}
			return nil
		})
		produce(t, c, "kill", 50, 50)
		wantValues(t, consume(t, c, "kill", "kill-group", 100), 100)
		if err := leader.Start(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("PauseResume", func(t *testing.T) {
		createTopic(t, c, "pause", 1)
		produce(t, c, "pause", 0, 20)
		leader, err := c.Leader(ctx, "pause", 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := leader.Pause(); err != nil {
			t.Fatal(err)
		}
		if !leader.Paused() || !leader.Running() {
			t.Fatalf("node %d: paused %v, running %v after Pause", leader.ID, leader.Paused(), leader.Running())
		}
		// The controller fences the silent broker and moves its
		// leaderships to the others.
		waitFor(t, time.Minute, "the paused node's leadership to move", func() error {
			n, err := c.Leader(ctx, "pause", 0)
			if err != nil {
				return err
			}
			if n.ID == leader.ID {
				return fmt.Errorf("paused node %d still leads", n.ID)
			}
			return nil
		})
		produce(t, c, "pause", 20, 20)
		if err := leader.Resume(); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the resumed node back in the metadata", func() error {
			adm, err := c.Admin()
			if err != nil {
				return err
			}
			defer adm.Close()
			md, err := adm.BrokerMetadata(ctx)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(md.Brokers, func(b kadm.BrokerDetail) bool { return b.NodeID == leader.ID }) {
				return fmt.Errorf("node %d missing from %v", leader.ID, md.Brokers)
			}
			return nil
		})
		wantValues(t, consume(t, c, "pause", "pause-group", 40), 40)
	})

	t.Run("KillController", func(t *testing.T) {
		ctrl, epoch, err := c.Controller(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ctrl.Kill(); err != nil {
			t.Fatal(err)
		}
		// The other two voters elect a new leader of the metadata
		// quorum, at a newer epoch.
		waitFor(t, time.Minute, "a new active controller", func() error {
			n, e, err := c.Controller(ctx)
			if err != nil {
				return err
			}
			if n.ID == ctrl.ID || e <= epoch {
				return fmt.Errorf("node %d at epoch %d, was node %d at epoch %d", n.ID, e, ctrl.ID, epoch)
			}
			return nil
		})
		if err := ctrl.Start(ctx); err != nil {
			t.Fatal(err)
		}
		createTopic(t, c, "after-controller", 1)
		waitFor(t, time.Minute, "every replica in sync", func() error { return c.InSync(ctx, "after-controller") })
	})

	t.Run("RestartCoordinator", func(t *testing.T) {
		createTopic(t, c, "coord", 1)
		produce(t, c, "coord", 0, 30)
		wantValues(t, consume(t, c, "coord", "coord-group", 30), 30)
		coord, err := c.Coordinator(ctx, "coord-group")
		if err != nil {
			t.Fatal(err)
		}
		pid := coord.PID()
		if err := coord.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if coord.PID() == pid || !coord.Running() {
			t.Fatalf("node %d: pid %d before the restart, %d after, running %v", coord.ID, pid, coord.PID(), coord.Running())
		}
		waitFor(t, time.Minute, "the committed offset after the restart", func() error {
			at, err := committed(c, "coord", "coord-group")
			if err != nil {
				return err
			}
			if at != 30 {
				return fmt.Errorf("committed offset %d, want 30", at)
			}
			return nil
		})
	})
}

// TestDetachAndDown starts a detached node as the command's up does, finds
// it healthy from its record, and stops it with Down.
func TestDetachAndDown(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { kafkacluster.Down(dir, 5*time.Second) }) // if the test fails between Detach and Down
	c := kafkacluster.Testing(t, kafkacluster.Config{Dir: dir, Detached: true})
	pid := c.Nodes()[0].PID()
	if err := c.Detach(); err != nil {
		t.Fatal(err)
	}
	st, ok := kafkacluster.Healthy(t.Context(), dir)
	if !ok || st.Brokers != c.BrokersEnv() || len(st.Nodes) != 1 || st.Nodes[0].PID != pid {
		t.Fatalf("Healthy(%s) = %+v, %v; want the detached node %d", dir, st, ok, pid)
	}
	pids, err := kafkacluster.Down(dir, 30*time.Second)
	if err != nil || !slices.Equal(pids, []int{pid}) {
		t.Fatalf("Down = %v, %v; want [%d]", pids, err, pid)
	}
	waitFor(t, 10*time.Second, "the node to exit", func() error {
		if c.Nodes()[0].Running() {
			return errors.New("still running")
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(dir, "cluster.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the record is still there: %v", err)
	}
	if pids, err := kafkacluster.Down(dir, time.Second); err != nil || len(pids) != 0 {
		t.Fatalf("a second Down = %v, %v; want nothing done", pids, err)
	}
}
