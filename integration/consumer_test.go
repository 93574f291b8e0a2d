package integration

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// appendHandler appends the command's payload to the key's log in the sink.
func appendHandler(_ context.Context, tx *memory.Tx, cmd consumer.Command) error {
	k := "log/" + string(cmd.Key)
	cur, _ := tx.Get(k)
	next := append([]byte(nil), cur...)
	if len(cur) > 0 {
		next = append(next, ',')
	}
	tx.Put(k, append(next, cmd.Payload...))
	return nil
}

// logOf returns the sequence numbers applied for key, in order.
func logOf(s *memory.Sink, key string) []int {
	v, ok := s.Get("log/" + key)
	if !ok {
		return nil
	}
	var out []int
	for _, f := range strings.Split(string(v), ",") {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// checkExactlyOnceInOrder asserts that every key's log is 0..perKey-1
// and that the sink's history passes the project's checker.
func checkExactlyOnceInOrder(t *testing.T, s *memory.Sink, keys []string, perKey int) {
	t.Helper()
	for _, k := range keys {
		got := logOf(s, k)
		if len(got) != perKey {
			t.Errorf("key %s: %d effects, want %d", k, len(got), perKey)
			continue
		}
		for i, v := range got {
			if v != i {
				t.Errorf("key %s: effect %d is seq %d: %v", k, i, v, got)
				break
			}
		}
	}
	if err := s.Verify(); err != nil {
		t.Errorf("sink history: %v", err)
	}
}

type workerOpts struct {
	tg       target
	topic    string
	group    string
	protocol consumer.Protocol
	handler  consumer.Handler[*memory.Tx]
	opts     []kgo.Opt
	observer consumer.Observer
}

func startWorker(t *testing.T, s *memory.Sink, o workerOpts) *consumer.Worker[*memory.Tx] {
	t.Helper()
	if o.handler == nil {
		o.handler = appendHandler
	}
	var observers []consumer.Observer
	if o.observer != nil {
		observers = append(observers, o.observer)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := consumer.New(ctx, consumer.Config[*memory.Tx]{
		Brokers: o.tg.brokers, Group: o.group, Topic: o.topic, Sink: s, Protocol: o.protocol,
		Handlers:          map[string]consumer.Handler[*memory.Tx]{"append": o.handler},
		SessionTimeout:    o.tg.session,
		HeartbeatInterval: o.tg.session / 10,
		RebalanceTimeout:  5 * o.tg.session,
		MaxBatch:          64,
		ClientOpts:        o.opts,
		Observers:         observers,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// send produces perKey commands for each key through the router, with
// payloads from..to-1.
func send(t *testing.T, tg target, topic string, keys []string, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := router.New(ctx, router.Config{Brokers: tg.brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	var failed atomic.Value
	for seq := from; seq < to; seq++ {
		for _, k := range keys {
			rt.SendAsync(ctx, router.Command{Key: []byte(k), Type: "append", Payload: []byte(strconv.Itoa(seq))}, func(_ router.Result, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, err)
				}
			})
		}
	}
	if err := rt.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
}

func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	return keys
}

// TestEndToEnd runs 3 workers over 12,000 commands while members join and
// leave, and checks that every command was applied exactly once, in
// per-key order, with no stale write accepted.
func TestEndToEnd(t *testing.T) {
	for _, tg := range targets(t) {
		for _, p := range tg.protocols() {
			t.Run(tg.protocolName(p), func(t *testing.T) {
				const partitions, perKey = 6, 120
				topic := newTopic(t, tg, partitions)
				group := topic + "-workers"
				keys := makeKeys(100)
				s := memory.New()
				o := workerOpts{tg: tg, topic: topic, group: group, protocol: p}
				startWorker(t, s, o)
				w2 := startWorker(t, s, o)
				send(t, tg, topic, keys, 0, perKey/2)
				startWorker(t, s, o)
				testwait.For(t, 2*time.Minute, "some commands applied", func() bool { return len(logOf(s, keys[0])) > 0 })
				w2.Close() // leaves: its partitions move to the others
				send(t, tg, topic, keys, perKey/2, perKey)
				testwait.For(t, 3*time.Minute, "every command applied", func() bool {
					n := 0
					for _, k := range keys {
						n += len(logOf(s, k))
					}
					return n >= len(keys)*perKey
				})
				checkExactlyOnceInOrder(t, s, keys, perKey)
			})
		}
	}
}

// stallDialer dials TCP connections whose writes (and new dials) block
// while it is stalled: a client whose heartbeats stop reaching the broker
// while its process keeps running, as behind a network partition.
type stallDialer struct {
	mu   sync.Mutex
	open chan struct{} // closed while not stalled
}

func newStallDialer() *stallDialer {
	d := &stallDialer{open: make(chan struct{})}
	close(d.open)
	return d
}

func (d *stallDialer) gate() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.open
}

func (d *stallDialer) stall() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.open = make(chan struct{})
}

func (d *stallDialer) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.open:
	default:
		close(d.open)
	}
}

func (d *stallDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	select {
	case <-d.gate():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, d: d}, nil
}

type stallConn struct {
	net.Conn
	d *stallDialer
}

func (c *stallConn) Write(b []byte) (int, error) {
	<-c.d.gate()
	return c.Conn.Write(b)
}

// TestZombie: worker A is inside a batch when its connections to the
// broker stall, so its session expires and B takes the partition over at a
// higher epoch. A then finishes the batch: the sink rejects it, and B
// applies everything exactly once. The test asserts that the fault
// happened: B claimed while A was stalled and A's Apply was fenced.
func TestZombie(t *testing.T) {
	for _, tg := range targets(t) {
		for _, p := range tg.protocols() {
			t.Run(tg.protocolName(p), func(t *testing.T) {
				topic := newTopic(t, tg, 1)
				group := topic + "-workers"
				keys := makeKeys(5)
				const perKey = 20
				s := memory.New()

				entered := make(chan struct{})
				gate := make(chan struct{})
				var blocked atomic.Bool
				aHandler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
					if blocked.CompareAndSwap(false, true) {
						close(entered)
						select {
						case <-gate:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					return appendHandler(ctx, tx, cmd)
				}
				aFenced := make(chan error, 4)
				var aEpoch atomic.Int32
				dialer := newStallDialer()
				t.Cleanup(dialer.release)
				startWorker(t, s, workerOpts{tg: tg, topic: topic, group: group, protocol: p, handler: aHandler,
					opts: []kgo.Opt{kgo.Dialer(dialer.DialContext)},
					observer: consumer.ObserverFunc(func(e consumer.Event) {
						switch e := e.(type) {
						case consumer.Claimed:
							aEpoch.Store(e.Token.Epoch)
						case consumer.Fenced:
							select {
							case aFenced <- e.Err:
							default:
							}
						}
					})})
				send(t, tg, topic, keys, 0, perKey)
				select {
				case <-entered:
				case <-time.After(2 * time.Minute):
					t.Fatal("worker A never started a batch")
				}

				dialer.stall()
				bClaimed := make(chan int32, 4)
				startWorker(t, s, workerOpts{tg: tg, topic: topic, group: group, protocol: p,
					observer: consumer.ObserverFunc(func(e consumer.Event) {
						if c, ok := e.(consumer.Claimed); ok {
							bClaimed <- c.Token.Epoch
						}
					})})
				var bEpoch int32
				select {
				case bEpoch = <-bClaimed:
				case <-time.After(3 * time.Minute):
					t.Fatal("B never claimed the partition while A was stalled")
				}
				if bEpoch <= aEpoch.Load() {
					t.Fatalf("B claimed at epoch %d, not above A's %d", bEpoch, aEpoch.Load())
				}

				close(gate) // A's batch goes on, as a zombie
				select {
				case err := <-aFenced:
					if !errors.Is(err, sink.ErrFenced) {
						t.Fatalf("A's fenced event carries %v", err)
					}
				case <-time.After(2 * time.Minute):
					t.Fatal("A's late Apply was not fenced")
				}
				dialer.release()
				if s.Rejected() == 0 {
					t.Fatal("the sink rejected no write")
				}
				testwait.For(t, 2*time.Minute, "B applied everything", func() bool {
					n := 0
					for _, k := range keys {
						n += len(logOf(s, k))
					}
					return n >= len(keys)*perKey
				})
				checkExactlyOnceInOrder(t, s, keys, perKey)
			})
		}
	}
}
