package consumer_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/memstore"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/memory"
)

// swapStore is a fencehttp.Store whose state an operator can replace: a
// stand-in for resetting a scope of the resource's store.
type swapStore struct {
	cur atomic.Pointer[memstore.Store]
}

func (s *swapStore) Begin(ctx context.Context, tok epochs.Token, key string) (fencehttp.Unit, *fencehttp.Result, error) {
	return s.cur.Load().Begin(ctx, tok, key)
}

// TestResourceRefusalBlocksAndResumes (issue 41): a resource the handler
// calls (a fencehttp.Guard) still holds a higher token of the group's
// previous incarnation, so it refuses every call with 409. The group did
// not move the partition, so the Worker must neither give it up in
// silence (it stopped it as a zombie before, and did nothing more) nor
// spin: the partition is blocked with ErrResourceFenced, for as long as
// the refusals last (its since kept across the re-claims), and claimed
// and tried again every ReclaimInterval; once the resource's fence is
// reset it resumes by itself and applies every command once.
func TestResourceRefusalBlocksAndResumes(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	store := &swapStore{}
	store.cur.Store(memstore.New())
	// The previous incarnation's token, at a higher epoch.
	old := epochs.Token{Group: c.group, Topic: c.topic, Partition: 0, Epoch: 50, Member: "previous-incarnation"}
	u, _, err := store.Begin(t.Context(), old, "seed")
	if err != nil {
		t.Fatal(err)
	}
	_ = u.Abort(t.Context())
	guard, err := fencehttp.New(fencehttp.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })))
	defer srv.Close()
	client := &http.Client{Transport: &fencehttp.Transport{}}
	handler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		req, err := http.NewRequestWithContext(fencehttp.WithFence(ctx, fencehttp.CommandFence(cmd)), http.MethodPost, srv.URL, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := fencehttp.CheckResponse(resp); err != nil {
			return err
		}
		return appendHandler(ctx, tx, cmd)
	}
	var mu sync.Mutex
	var fenced []error
	w := startWorker(t, c, s, workerOpts{name: "a", reclaimInterval: 50 * time.Millisecond,
		handlers: map[string]consumer.Handler[*memory.Tx]{"append": handler},
		observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			if f, ok := e.(consumer.Fenced); ok {
				mu.Lock()
				fenced = append(fenced, f.Err)
				mu.Unlock()
			}
		})}})
	keys := makeKeys(4)
	produce(t, c, 1, keys, 0, 2)
	var first time.Time
	testwait.For(t, 30*time.Second, "the partition blocked by the resource's refusal", func() bool {
		ps := w.Partitions()
		if len(ps) == 1 && ps[0].State == consumer.StateBlocked && errors.Is(ps[0].LastErr, consumer.ErrResourceFenced) {
			first = ps[0].Since
			return true
		}
		return false
	})
	testwait.For(t, 30*time.Second, "the partition tried again and refused again", func() bool { return w.Stats().ResourceRefusals >= 3 })
	ps := w.Partitions()
	if len(ps) != 1 || ps[0].State != consumer.StateBlocked || !ps[0].Since.Equal(first) || !errors.Is(ps[0].LastErr, fencehttp.ErrFenced) {
		t.Fatalf("partitions %+v: want still blocked since %v by the resource's refusal", ps, first)
	}
	if n := appliedCount(s, keys); n != 0 {
		t.Fatalf("%d commands applied while the resource refused them", n)
	}

	// The operator resets the resource's fence: the partition resumes.
	store.cur.Store(memstore.New())
	testwait.For(t, 30*time.Second, "every command applied after the reset", func() bool { return appliedCount(s, keys) == len(keys)*2 })
	testwait.For(t, 30*time.Second, "the partition running again", func() bool {
		ps := w.Partitions()
		return len(ps) == 1 && ps[0].State == consumer.StateRunning
	})
	checkInvariants(t, s, keys, 2)
	mu.Lock()
	defer mu.Unlock()
	if len(fenced) != 0 || w.Stats().FencedApplies != 0 {
		t.Fatalf("the resource's refusals were reported as the sink fencing the tenure: %v, %+v", fenced, w.Stats())
	}
}
