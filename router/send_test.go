package router_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"

	"github.com/workrouter/workrouter/router"
)

// TestSendAsyncResultsBelongToTheirCommands: every callback gets the
// partition and offset of its own command, whatever the command carries
// (a type longer than the router keeps inline, user headers or none),
// from many goroutines at once. SendAsync shares one promise among all
// sends and finds each callback from its record, so a mix-up would show
// here as a record at a callback's offset that is not that callback's.
func TestSendAsyncResultsBelongToTheirCommands(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	ctx := testContext(t)

	longType := strings.Repeat("a-long-command-type-", 3) // longer than kept inline
	command := func(n int) router.Command {
		cmd := router.Command{Key: fmt.Appendf(nil, "k%d", n%29), Type: "t", Payload: fmt.Appendf(nil, "%d", n)}
		if n%3 == 1 {
			cmd.Type = longType
		}
		if n%4 == 2 {
			cmd.Headers = []envelope.Header{{Key: "n", Value: fmt.Appendf(nil, "%d", n)}, {Key: "x", Value: []byte("y")}}
		}
		return cmd
	}
	const goroutines, perG = 6, 300
	results := make([]router.Result, goroutines*perG)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				n := g*perG + i
				r.SendAsync(ctx, command(n), func(res router.Result, err error) {
					if err != nil {
						t.Errorf("send %d: %v", n, err)
					}
					results[n] = res
				})
			}
		})
	}
	wg.Wait()
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	at := map[[2]int64]router.Command{}
	for _, rec := range consume(t, addrs, topic, len(results)) {
		cmd, err := envelope.Decode(rec)
		if err != nil {
			t.Fatalf("decoding %d@%d: %v", rec.Partition, rec.Offset, err)
		}
		at[[2]int64{int64(rec.Partition), rec.Offset}] = cmd
	}
	for n, res := range results {
		want := command(n)
		got, ok := at[[2]int64{int64(res.Partition), res.Offset}]
		switch {
		case !ok:
			t.Errorf("send %d: no record at its result %d@%d", n, res.Partition, res.Offset)
		case string(got.Payload) != string(want.Payload) || got.Type != want.Type || string(got.Key) != string(want.Key):
			t.Errorf("send %d: the record at its result %d@%d is %q/%s/%s, want %q/%s/%s", n, res.Partition, res.Offset,
				got.Key, got.Type, got.Payload, want.Key, want.Type, want.Payload)
		case len(got.Headers) != len(want.Headers):
			t.Errorf("send %d: %d user headers, want %d", n, len(got.Headers), len(want.Headers))
		case res.Partition != envelope.Partition(want.Key, 4):
			t.Errorf("send %d: partition %d, want %d", n, res.Partition, envelope.Partition(want.Key, 4))
		}
	}
}

// ctxKey is the test's context key.
type ctxKey struct{}

// enrichingHook is a producer hook that does what kgo allows hooks to do
// (and tracing plugins do): it wraps each record's Context in a context of
// its own, after checking that the caller's values are visible there.
type enrichingHook struct {
	mu      sync.Mutex
	wrapped int
	missing int // records whose Context lacked the caller's value
}

func (h *enrichingHook) OnProduceRecordBuffered(rec *kgo.Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rec.Context.Value(ctxKey{}) != "caller" {
		h.missing++
	}
	rec.Context = context.WithValue(rec.Context, struct{ hook int }{1}, "span")
	h.wrapped++
}

// TestSendWithAHookThatWrapsTheContext: a hook sees the caller's context
// values on the record, and a hook that wraps the record's Context does
// not lose any send's callback.
func TestSendWithAHookThatWrapsTheContext(t *testing.T) {
	addrs := newCluster(t, topic, 2)
	hook := &enrichingHook{}
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic, ClientOpts: []kgo.Opt{kgo.WithHooks(hook)}})
	ctx := context.WithValue(testContext(t), ctxKey{}, "caller")
	const sends = 50
	for n := range sends {
		if _, err := r.Send(ctx, router.Command{Key: fmt.Appendf(nil, "k%d", n), Type: "t"}); err != nil {
			t.Fatalf("send %d: %v", n, err)
		}
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if hook.wrapped != sends || hook.missing != 0 {
		t.Fatalf("the hook wrapped %d records (want %d), %d without the caller's value", hook.wrapped, sends, hook.missing)
	}
}
