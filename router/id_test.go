package router_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/router"
)

// idsAt decodes recs and returns their IDs by partition and offset.
func idsAt(t *testing.T, recs []*kgo.Record) map[[2]int64]string {
	t.Helper()
	at := map[[2]int64]string{}
	for _, rec := range recs {
		cmd, err := envelope.Decode(rec)
		if err != nil {
			t.Fatalf("decoding %d@%d: %v", rec.Partition, rec.Offset, err)
		}
		at[[2]int64{int64(rec.Partition), rec.Offset}] = cmd.ID
	}
	return at
}

// TestGeneratedIDsAreUnique: two Routers, sending 10,000 commands without
// IDs from several goroutines, give every command a different valid ID;
// each Result carries its command's ID, and each record carries the ID its
// Result names.
func TestGeneratedIDsAreUnique(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	routers := []*router.Router{
		newRouter(t, router.Config{Brokers: addrs, Topic: topic}),
		newRouter(t, router.Config{Brokers: addrs, Topic: topic}),
	}
	ctx := testContext(t)
	const goroutines, perG = 4, 2500 // 10,000 sends, half through each Router
	results := make([]router.Result, goroutines*perG)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := routers[g%len(routers)]
			for i := range perG {
				n := g*perG + i
				r.SendAsync(ctx, router.Command{Key: fmt.Appendf(nil, "k%d", n%37), Type: "t"}, func(res router.Result, err error) {
					if err != nil {
						t.Errorf("send %d: %v", n, err)
					}
					results[n] = res
				})
			}
		})
	}
	wg.Wait()
	for _, r := range routers {
		if err := r.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	at := idsAt(t, consume(t, addrs, topic, len(results)))
	seen := make(map[string]int, len(results))
	for n, res := range results {
		if res.ID == "" {
			t.Fatalf("send %d: Result.ID is empty", n)
		}
		if err := (router.Command{Key: []byte("k"), Type: "t", ID: res.ID}).Validate(); err != nil {
			t.Fatalf("send %d: generated ID %q is not a valid ID: %v", n, res.ID, err)
		}
		if m, dup := seen[res.ID]; dup {
			t.Fatalf("sends %d and %d were both given ID %q", m, n, res.ID)
		}
		seen[res.ID] = n
		if got := at[[2]int64{int64(res.Partition), res.Offset}]; got != res.ID {
			t.Fatalf("send %d: the record at %d@%d has ID %q, its Result says %q", n, res.Partition, res.Offset, got, res.ID)
		}
	}
}

// TestCallerIDIsKept: a command's own ID is sent as is, short or as long
// as an ID may be, and returned in its Result; an invalid one is refused
// with nothing sent.
func TestCallerIDIsKept(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	ctx := testContext(t)
	ids := []string{"order-42", "7b0c2c9e-3a1f-4c8e-9d55-0b6f1f2a9e41", strings.Repeat("é", envelope.MaxIDLen/2)}
	var results []router.Result
	for i, id := range ids {
		cmd := router.Command{Key: []byte("acct-7"), Type: "deposit", ID: id}
		if i == 1 {
			cmd.Headers = []envelope.Header{{Key: "trace", Value: []byte("abc")}}
		}
		res, err := r.Send(ctx, cmd)
		if err != nil {
			t.Fatalf("Send with ID %q: %v", id, err)
		}
		if res.ID != id {
			t.Errorf("Send with ID %q returned ID %q", id, res.ID)
		}
		results = append(results, res)
	}
	res, err := r.Send(ctx, router.Command{Key: []byte("acct-7"), Type: "deposit", ID: "bad\nid"})
	if !errors.Is(err, envelope.ErrInvalidID) || res.ID != "" {
		t.Fatalf("Send with an invalid ID = %+v, %v; want ErrInvalidID and no ID", res, err)
	}
	at := idsAt(t, consume(t, addrs, topic, len(ids)))
	if len(at) != len(ids) {
		t.Fatalf("the topic holds %d records, want %d", len(at), len(ids))
	}
	for i, res := range results {
		if got := at[[2]int64{int64(res.Partition), res.Offset}]; got != ids[i] {
			t.Errorf("the record of send %d carries ID %q, want %q", i, got, ids[i])
		}
	}
}

// TestRetryWithTheResultID: a send that fails once its record was built
// (here: its ctx was cancelled) still returns the command's ID, and a
// retry with cmd.ID set to it sends a record with that same ID.
func TestRetryWithTheResultID(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	cancelled, cancel := context.WithCancel(testContext(t))
	cancel()
	cmd := router.Command{Key: []byte("acct-7"), Type: "deposit"}
	first, err := r.Send(cancelled, cmd)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with a cancelled ctx: %+v, %v; want context.Canceled", first, err)
	}
	if first.ID == "" || !strings.Contains(err.Error(), first.ID) {
		t.Fatalf("a failed send returned ID %q and error %v; want its ID in both", first.ID, err)
	}
	cmd.ID = first.ID
	again, err := r.Send(testContext(t), cmd)
	if err != nil || again.ID != first.ID {
		t.Fatalf("the retry returned %+v, %v; want ID %q", again, err, first.ID)
	}
	at := idsAt(t, consume(t, addrs, topic, 1))
	if got := at[[2]int64{int64(again.Partition), again.Offset}]; len(at) != 1 || got != first.ID {
		t.Fatalf("the topic holds %v, want one record with ID %q", at, first.ID)
	}
}
