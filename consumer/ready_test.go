package consumer_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestNotReadyBeforeTheAssignment: a Worker that has a member ID but has not
// yet been told its partitions is not Ready, on either protocol. The broker
// holds the request that carries the assignment (SyncGroup for the
// cooperative protocol, the first ConsumerGroupHeartbeat for KIP-848) until
// the test has looked; a probe that answered ready in that window would
// flip to not ready a moment later, when the partitions arrive and are
// claimed.
func TestNotReadyBeforeTheAssignment(t *testing.T) {
	for _, tc := range []struct {
		protocol consumer.Protocol
		key      kmsg.Key
	}{
		{consumer.Cooperative, kmsg.SyncGroup},
		{consumer.KIP848, kmsg.ConsumerGroupHeartbeat},
	} {
		t.Run(tc.protocol.String(), func(t *testing.T) {
			c := newFakeCluster(t, 2)
			held := make(chan struct{})
			release := make(chan struct{})
			var once atomic.Bool
			c.kf.ControlKey(int16(tc.key), func(kmsg.Request) (kmsg.Response, error, bool) {
				if !once.CompareAndSwap(false, true) {
					return nil, nil, false
				}
				close(held)
				c.kf.SleepControl(func() { <-release })
				return nil, nil, false // the broker answers it as usual
			})
			releaseOnce := sync.OnceFunc(func() { close(release) })
			defer releaseOnce()
			w := startWorker(t, c, memory.New(), workerOpts{name: "w", protocol: tc.protocol})
			select {
			case <-held:
			case <-time.After(30 * time.Second):
				t.Fatalf("the worker sent no %s", tc.key.Name())
			}
			member, gen := w.Member()
			if member == "" || gen < 0 {
				t.Fatalf("the held %s came before a member ID (%q, %d): the window under test is not open", tc.key.Name(), member, gen)
			}
			if n := len(w.Owned()); n != 0 {
				t.Fatalf("%d partitions owned before the assignment", n)
			}
			// Look several times while the request is held: no answer
			// has come, so nothing can make the worker ready.
			for range 10 {
				if w.Ready() {
					t.Fatalf("Ready with member %q (epoch %d) before its assignment arrived", member, gen)
				}
				time.Sleep(20 * time.Millisecond)
			}
			releaseOnce()
			testwait.For(t, 30*time.Second, "the worker to be ready with both partitions", func() bool {
				return w.Ready() && len(w.Owned()) == 2
			})
		})
	}
}
