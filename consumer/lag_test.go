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

// lagLog records a Worker's Lag events in order, and which came after the
// test called Close.
type lagLog struct {
	mu      sync.Mutex
	closing bool
	before  int
	after   []map[int32]int64
}

func (l *lagLog) Observe(e consumer.Event) {
	lag, ok := e.(consumer.Lag)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		l.after = append(l.after, lag.Lag)
	} else {
		l.before++
	}
}

func (l *lagLog) markClosing() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
}

func (l *lagLog) counts() (before int, after []map[int32]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.before, append([]map[int32]int64(nil), l.after...)
}

// TestClosingWorkerReportsNoLag: a Worker whose Close waits on its group
// leave (here its rejoin is held at the broker while Close runs, as when
// SIGTERM lands during a rebalance) reports no lag once Close has begun,
// although its partitions' end offsets move on and another member applies
// them: its positions are stale, and a report from them would draw lag
// that no partition has.
func TestClosingWorkerReportsNoLag(t *testing.T) {
	t.Parallel()
	const partitions = 2
	c := newFakeCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(10)
	produce(t, c, partitions, keys, 0, 5)
	l1 := &lagLog{}
	w1 := startWorker(t, c, s, workerOpts{name: "w1", lagInterval: 20 * time.Millisecond, observers: []consumer.Observer{l1}})
	testwait.For(t, 30*time.Second, "w1 to apply every command", func() bool { return appliedCount(s, keys) == len(keys)*5 })
	testwait.For(t, 30*time.Second, "w1 to report lag", func() bool { n, _ := l1.counts(); return n > 0 })

	// Hold w1's rejoins at the broker until released.
	member, _ := w1.Member()
	release := make(chan struct{})
	var held atomic.Int64
	c.kf.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.kf.KeepControl()
		if j, ok := req.(*kmsg.JoinGroupRequest); ok && j.MemberID == member {
			held.Add(1)
			c.kf.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	defer close(release)

	// A second worker joins: w1 rejoins, and its join is held.
	l2 := &lagLog{}
	startWorker(t, c, s, workerOpts{name: "w2", lagInterval: 20 * time.Millisecond, observers: []consumer.Observer{l2}})
	testwait.For(t, 30*time.Second, "w1's rejoin to be held at the broker", func() bool { return held.Load() > 0 })

	// Close w1 while its join is held: the leave waits on it.
	l1.markClosing()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		w1.Close()
	}()
	produce(t, c, partitions, keys, 5, 10)
	// The broker drops w1 after its session timeout; w2 takes every
	// partition and applies the new commands, then reports lag a few
	// times: w1's lag loop had as many ticks to report from its stale
	// positions.
	testwait.For(t, 30*time.Second, "w2 to apply the commands produced after w1's Close began", func() bool {
		return appliedCount(s, keys) == len(keys)*10
	})
	n2, _ := l2.counts()
	testwait.For(t, 30*time.Second, "w2 to report lag five more times", func() bool { n, _ := l2.counts(); return n >= n2+5 })
	select {
	case <-closed:
		t.Fatal("w1's Close returned while its join was held: the window under test did not happen")
	default:
	}
	_, after := l1.counts()
	// A report computed just before Close began may arrive after the
	// test marked it: one is allowed, none with the records produced
	// since.
	if len(after) > 1 {
		t.Errorf("w1 reported lag %d times after its Close began, from stale positions: %v", len(after), after)
	}
	release <- struct{}{}
	<-closed
}
