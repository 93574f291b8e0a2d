package admin_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/memstore"
	"github.com/workrouter/workrouter/fencehttp/sqlstore"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestResetResourceUnblocksTheWorker (issue 41): the group was recreated,
// and both the worker's sink and the service it calls (a fencehttp.Guard
// over sqlstore on SQLite) hold the previous incarnation's token at epoch
// 50. The worker takes the sink's fence over by itself (a proven claim,
// audited as a reset), but the service refuses its low epoch: the
// partition is blocked with ErrResourceFenced and the refusals counted.
// ResetResource pins the service's scope to the sink's holder below the
// floor 50; the worker resumes by itself, every command is applied once
// in the service's database, and a call of the previous incarnation is
// refused with a pinned 409.
func TestResetResourceUnblocksTheWorker(t *testing.T) {
	const (
		rtopic = "charges"
		rgroup = "billing"
		n      = 6
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, rtopic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()

	// The service: one row per charge, written through the request's
	// transaction.
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "service.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE charges (id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.New(ctx, sqlstore.Config{DB: db, Dialect: sqlstore.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := fencehttp.New(fencehttp.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, _ := fencehttp.FenceFrom(r.Context())
		if _, err := sqlstore.TxFrom(r.Context()).ExecContext(r.Context(), `INSERT INTO charges (id) VALUES (?)`, f.Key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	client := &http.Client{Transport: &fencehttp.Transport{}}
	call := func(ctx context.Context, f fencehttp.Fence) error {
		req, err := http.NewRequestWithContext(fencehttp.WithFence(ctx, f), http.MethodPost, srv.URL+"/charges", nil)
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
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("service answered %d", resp.StatusCode)
		}
		return nil
	}
	charges := func() (rows, distinct int) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT id) FROM charges`).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		return rows, distinct
	}

	// The previous incarnation of the group: epoch 50, in the sink and in
	// the service's store (a call it made).
	prev := epochs.Token{Group: rgroup, Topic: rtopic, Partition: 0, Epoch: 50, Member: "previous-incarnation"}
	s := memory.New()
	if _, err := s.Claim(ctx, prev, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if err := call(ctx, fencehttp.Fence{Token: prev, Key: "previous-1"}); err != nil {
		t.Fatal(err)
	}

	w, err := consumer.New(context.Background(), consumer.Config[*memory.Tx]{
		Brokers: kf.ListenAddrs(), Group: rgroup, Topic: rtopic, Sink: s,
		Handlers: map[string]consumer.Handler[*memory.Tx]{"charge": func(ctx context.Context, _ *memory.Tx, cmd consumer.Command) error {
			return call(ctx, fencehttp.CommandFence(cmd))
		}},
		SessionTimeout: time.Second, RebalanceTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
		RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond, ReclaimInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range n {
		r, err := envelope.Encode(rtopic, 0, envelope.Command{Key: []byte("acct"), Type: "charge", ID: fmt.Sprintf("c-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// The fault shows: the sink was taken over, the service refuses.
	scope := prev.Scope()
	waitUntil(t, ctx, "the partition blocked by the service's refusal, twice", func() bool {
		ps := w.Partitions()
		return len(ps) == 1 && ps[0].State == consumer.StateBlocked && errors.Is(ps[0].LastErr, consumer.ErrResourceFenced) && w.Stats().ResourceRefusals >= 2
	})
	hs, err := s.History(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(hs, func(h fenceadmin.Entry) bool {
		return h.Kind == fenceadmin.KindReset && h.Reason == fenceadmin.TakeoverReason
	}) {
		t.Fatalf("the sink's history %+v has no takeover", hs)
	}
	if rows, _ := charges(); rows != 1 {
		t.Fatalf("%d charges while the service refused the worker, want the previous incarnation's 1", rows)
	}
	// What an operator reads: status says blocked, and needs attention
	// (the CLI's exit code 2).
	status := func(want string) {
		t.Helper()
		waitUntil(t, ctx, "status reporting the partition "+want, func() bool {
			rep, err := admin.Status(ctx, prod, admin.StatusRequest{Group: rgroup, Topic: rtopic, Sink: s})
			if err != nil || len(rep.Partitions) != 1 {
				return false
			}
			blocked := want == "blocked"
			return rep.Partitions[0].State == want && (len(rep.NeedsAttention()) == 1) == blocked
		})
	}
	status("blocked")
	// And a readiness probe (the worker's /readyz) names the partition and
	// the refusal once it has been blocked longer than the probe allows.
	waitUntil(t, ctx, "readiness naming the blocked partition", func() bool {
		rd := w.Readiness(time.Millisecond)
		return !rd.Ready && len(rd.Blocking) == 1 && rd.Blocking[0].Token.Partition == 0 &&
			rd.Blocking[0].State == consumer.StateBlocked && strings.Contains(rd.String(), "partition 0: blocked for ")
	})

	// The dry run.
	plans, err := admin.PlanResources(ctx, store, s, admin.ResourcePlanRequest{Group: rgroup, Topic: rtopic})
	if err != nil {
		t.Fatal(err)
	}
	fences, _ := s.Fences(ctx)
	if len(plans) != 1 || len(fences) != 1 {
		t.Fatalf("plans %+v for fences %+v, want one", plans, fences)
	}
	pl := plans[0]
	if pl.Err != nil || pl.Holder != fences[0].Holder || pl.Holder.Epoch >= 50 || pl.Floor != 50 || pl.Store.Token != prev ||
		pl.After != (fencehttp.ScopeState{Scope: scope, Token: pl.Holder, Floor: 50}) {
		t.Fatalf("plan %+v: want the sink's holder %v pinned below floor 50", pl, fences[0].Holder)
	}
	if st, _ := store.State(ctx, scope); st.Token != prev {
		t.Fatalf("the dry run changed the store: %+v", st)
	}
	if _, err := admin.ResetResource(ctx, store, s, admin.ResourceRequest{Scope: scope, Expect: "00000000", Reason: "INC-7"}); !errors.Is(err, admin.ErrMoved) {
		t.Fatalf("a reset with another expect token: %v, want ErrMoved", err)
	}
	if _, err := admin.ResetResource(ctx, store, s, admin.ResourceRequest{Scope: scope, Expect: pl.Expect}); !errors.Is(err, admin.ErrBadRequest) {
		t.Fatalf("a reset without a reason: %v, want ErrBadRequest", err)
	}

	res, err := admin.ResetResource(ctx, store, s, admin.ResourceRequest{Scope: scope, Expect: pl.Expect, Reason: "group recreated (INC-7)"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Before.Token != prev || res.After.Token != pl.Holder || res.After.Floor != 50 {
		t.Fatalf("result %+v", res)
	}

	// The worker resumes by itself; every command once.
	waitUntil(t, ctx, "every command charged after the reset", func() bool { rows, _ := charges(); return rows == n+1 })
	waitUntil(t, ctx, "the partition running again", func() bool {
		ps := w.Partitions()
		return len(ps) == 1 && ps[0].State == consumer.StateRunning
	})
	if rows, distinct := charges(); rows != n+1 || distinct != n+1 {
		t.Fatalf("%d charges, %d distinct, want %d each", rows, distinct, n+1)
	}
	status("running")
	if rd := w.Readiness(time.Millisecond); !rd.Ready {
		t.Fatalf("readiness after the partition resumed: %s", rd)
	}

	// The previous incarnation is refused under the pin.
	err = call(ctx, fencehttp.Fence{Token: prev, Key: "previous-2"})
	var fe *fencehttp.FencedError
	if !errors.As(err, &fe) || !fe.Pinned || fe.Floor != 50 || fe.Stored != pl.Holder {
		t.Fatalf("the previous incarnation's call after the reset: %v, want a 409 pinned at floor 50 naming %v", err, pl.Holder)
	}
	if rows, _ := charges(); rows != n+1 {
		t.Fatalf("%d charges after the previous incarnation's call, want %d", rows, n+1)
	}
	rr, err := store.Resets(ctx, scope)
	if err != nil || len(rr) != 1 || rr[0].Reason != "group recreated (INC-7)" || rr[0].Before.Token != prev || rr[0].After.Floor != 50 {
		t.Fatalf("the store's audit: %+v, %v", rr, err)
	}
	// Nothing left to reset.
	again, err := admin.PlanResources(ctx, store, s, admin.ResourcePlanRequest{Group: rgroup, Topic: rtopic})
	if err != nil || len(again) != 1 || !errors.Is(again[0].Err, admin.ErrStoreAdmits) {
		t.Fatalf("plan after the reset: %+v, %v; want refused with ErrStoreAdmits", again, err)
	}
	if st := w.Stats(); st.FencedApplies != 0 {
		t.Fatalf("the worker was fenced by its sink: %+v", st)
	}
}

// TestPlanResourcesRefusals: a sink without a holder, and a sink whose
// history has no reset or takeover (nothing says where a previous
// incarnation ends: the store may be right), are refused.
func TestPlanResourcesRefusals(t *testing.T) {
	ctx := t.Context()
	tok := func(p, e int32, m string) epochs.Token {
		return epochs.Token{Group: "g", Topic: "t", Partition: p, Epoch: e, Member: m}
	}
	s, store := memory.New(), memstore.New()
	for _, c := range []struct {
		sinkTok, storeTok epochs.Token
	}{
		{tok(0, 3, "a"), tok(0, 9, "z")}, // no reset in the sink
		{tok(1, 3, "a"), tok(1, 2, "z")}, // the store admits the holder
	} {
		if _, err := s.Claim(ctx, c.sinkTok, sink.Observed{}); err != nil {
			t.Fatal(err)
		}
		u, _, err := store.Begin(ctx, c.storeTok, "k")
		if err != nil {
			t.Fatal(err)
		}
		_ = u.Abort(ctx)
	}
	plans, err := admin.PlanResources(ctx, store, s, admin.ResourcePlanRequest{Group: "g", Topic: "t", Partitions: []int32{0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]error{0: admin.ErrNoSinkReset, 1: admin.ErrStoreAdmits, 2: admin.ErrNoHolder}
	if len(plans) != 3 {
		t.Fatalf("plans %+v, want 3", plans)
	}
	for _, p := range plans {
		if !errors.Is(p.Err, want[p.Scope.Partition]) {
			t.Errorf("partition %d: %v, want %v", p.Scope.Partition, p.Err, want[p.Scope.Partition])
		}
		if _, err := admin.ResetResource(ctx, store, s, admin.ResourceRequest{Scope: p.Scope, Expect: p.Expect, Reason: "r"}); !errors.Is(err, want[p.Scope.Partition]) {
			t.Errorf("partition %d: ResetResource %v, want %v", p.Scope.Partition, err, want[p.Scope.Partition])
		}
	}
	if st, _ := store.State(ctx, tok(0, 0, "").Scope()); st.Token != tok(0, 9, "z") || st.Floor != fencehttp.NoFloor {
		t.Fatalf("a refused reset changed the store: %+v", st)
	}
}

func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
