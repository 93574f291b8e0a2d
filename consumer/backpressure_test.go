package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestSlowPartitionDoesNotStallOthers blocks the handler of one partition
// and checks that the other partitions' commands are all applied meanwhile
// (each partition has its own queue, paused when full, instead of one poll
// loop that blocks on the slowest), then that nothing is lost or reordered
// once the blocked partition resumes.
func TestSlowPartitionDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	const partitions = 3
	c := newCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(60)
	const perKey = 50 // 3,000 commands
	blocked := envelope.Partition([]byte(keys[0]), partitions)
	var slowKeys, fastKeys []string
	for _, k := range keys {
		if envelope.Partition([]byte(k), partitions) == blocked {
			slowKeys = append(slowKeys, k)
		} else {
			fastKeys = append(fastKeys, k)
		}
	}
	g := newGate()
	defer g.open()
	w := startWorker(t, c, s, workerOpts{name: "a", maxBatch: 8, queueSize: 16,
		handler: func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
			if cmd.Token.Partition == blocked {
				g.wait()
			}
			return appendHandler(ctx, tx, cmd)
		}})
	produce(t, c, partitions, keys, 0, perKey)

	testwait.For(t, 30*time.Second, "the blocked partition's handler to be entered", func() bool {
		select {
		case <-g.entered:
			return true
		default:
			return false
		}
	})
	testwait.For(t, 60*time.Second, "every command of the other partitions to be applied", func() bool {
		return appliedCount(s, fastKeys) == len(fastKeys)*perKey
	})
	if n := appliedCount(s, slowKeys); n != 0 {
		t.Fatalf("%d commands of the blocked partition applied while its handler was blocked", n)
	}
	if st := w.Stats(); st.Pauses == 0 {
		t.Errorf("no partition was paused with a queue of 16 and %d commands per partition: %+v", len(slowKeys)*perKey, st)
	}
	g.open()
	testwait.For(t, 60*time.Second, "every command to be applied", func() bool {
		return appliedCount(s, keys) == len(keys)*perKey
	})
	checkInvariants(t, s, keys, perKey)
}
