package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/observe"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

const (
	topic = "orders"
	group = "workers"
)

type env struct {
	t   *testing.T
	ctx context.Context
	kf  *kfake.Cluster
	cl  *kgo.Client
	adm *kadm.Client
	s   *memory.Sink
}

func newEnv(t *testing.T) *env {
	t.Helper()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &env{t: t, ctx: ctx, kf: kf, cl: cl, adm: kadm.NewClient(cl), s: memory.New()}
}

func (e *env) produce(n int) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		if err := e.cl.ProduceSync(e.ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// observe reads the partition's log as a worker's claim does
// (observe.ReadLog, from the brokers).
func (e *env) observe() sink.Observed {
	e.t.Helper()
	look, err := observe.ReadLog(e.ctx, e.cl, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	obs, err := look.Observed(topic, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return obs
}

// hold claims partition 0 for tok on the log as it is and applies up to
// next.
func (e *env) hold(tok epochs.Token, next int64) {
	e.t.Helper()
	if _, err := e.s.Claim(e.ctx, tok, e.observe()); err != nil {
		e.t.Fatal(err)
	}
	var offs []int64
	for o := int64(0); o < next; o++ {
		offs = append(offs, o)
	}
	if len(offs) > 0 {
		if _, err := e.s.Apply(e.ctx, tok, sink.Batch{Offsets: offs}, func(context.Context, *memory.Tx, int) error { return nil }); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) report() admin.Report {
	e.t.Helper()
	rs, err := admin.Diagnose(e.ctx, e.cl, e.s, group, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(rs) != 1 {
		e.t.Fatalf("Diagnose returned %d reports, want 1", len(rs))
	}
	return rs[0]
}

func kinds(r admin.Report) []admin.ProblemKind {
	var ks []admin.ProblemKind
	for _, p := range r.Problems {
		ks = append(ks, p.Kind)
	}
	return ks
}

var (
	scope = epochs.Scope{Group: group, Topic: topic, Partition: 0}
	tok   = epochs.Token{Group: group, Topic: topic, Partition: 0, Epoch: 7, Member: "m-7"}
)

func TestResetRefusedWithoutCause(t *testing.T) {
	e := newEnv(t)
	e.produce(10)
	e.hold(tok, 10)
	r := e.report()
	if len(r.Problems) != 0 || !r.TopicExists || r.Log.LogEnd != 10 {
		t.Fatalf("healthy scope diagnosed as %+v", r)
	}
	req := admin.Request{Scope: scope, Expect: admin.ExpectToken(r.Fence), Checkpoint: admin.Checkpoint{Keep: true}, Reason: "test"}
	if _, err := admin.Reset(e.ctx, e.cl, e.s, req); !errors.Is(err, admin.ErrNoCause) {
		t.Fatalf("reset of a healthy scope: %v, want ErrNoCause", err)
	}
	if f := e.report().Fence; f.Holder != tok || f.ProofRequired {
		t.Fatalf("a refused reset changed the fence: %+v", f)
	}

	req.Force = true
	res, err := admin.Reset(e.ctx, e.cl, e.s, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Before.Holder != tok || !res.After.Holder.IsZero() || res.After.NextOffset != 10 || !res.After.ProofRequired || res.Resumes {
		t.Fatalf("forced reset: %+v", res)
	}
	f := e.report().Fence
	if !f.Holder.IsZero() || f.NextOffset != 10 || !f.ProofRequired {
		t.Fatalf("fence after a forced reset: %+v", f)
	}
	hs, err := e.s.History(e.ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	last := hs[len(hs)-1]
	var detail map[string]any
	if err := json.Unmarshal([]byte(last.Detail), &detail); err != nil || last.Kind != "reset" || detail["forced"] != true {
		t.Fatalf("the reset's audit row: %+v (detail: %v)", last, err)
	}
}

func TestResetRequestChecks(t *testing.T) {
	e := newEnv(t)
	e.produce(5)
	e.hold(tok, 5)
	good := admin.ExpectToken(e.report().Fence)
	for _, c := range []struct {
		name string
		req  admin.Request
		want error
	}{
		{"no reason", admin.Request{Scope: scope, Expect: good, Force: true, Checkpoint: admin.Checkpoint{Keep: true}}, admin.ErrBadRequest},
		{"stale expect", admin.Request{Scope: scope, Expect: "00000000", Force: true, Checkpoint: admin.Checkpoint{Keep: true}, Reason: "r"}, admin.ErrMoved},
		{"unknown scope", admin.Request{Scope: epochs.Scope{Group: group, Topic: topic, Partition: 3}, Expect: good, Force: true, Reason: "r"}, sink.ErrNotFound},
		{"offset past the log", admin.Request{Scope: scope, Expect: good, Force: true, Checkpoint: admin.Checkpoint{RestartAt: "6"}, Reason: "r"}, admin.ErrBadRequest},
	} {
		if _, err := admin.Reset(e.ctx, e.cl, e.s, c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if f := e.report().Fence; f.Holder != tok {
		t.Fatalf("refused resets changed the fence: %+v", f)
	}
	for _, bad := range []string{"", "first", "-1", "1.5"} {
		if _, err := admin.ParseCheckpoint(bad); !errors.Is(err, admin.ErrBadRequest) {
			t.Errorf("ParseCheckpoint(%q): %v, want ErrBadRequest", bad, err)
		}
	}
}

// TestRecreatedTopic: the topic is deleted and created again. Diagnose
// names it; keeping the checkpoint is refused (it would never resume);
// restarting at the new log's start moves the fence onto the new topic ID,
// and only a proven claim is accepted there.
func TestRecreatedTopic(t *testing.T) {
	e := newEnv(t)
	e.produce(10)
	e.hold(tok, 10)
	oldID := e.report().Fence.TopicID
	if _, err := e.adm.DeleteTopics(e.ctx, topic); err != nil {
		t.Fatal(err)
	}
	if _, err := e.adm.CreateTopic(e.ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	// A new client: the old one's producer knows the old topic ID.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kf.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.cl, e.adm = cl, kadm.NewClient(cl)
	e.produce(3)
	r := e.report()
	if got := kinds(r); len(got) != 1 || got[0] != admin.TopicRecreated {
		t.Fatalf("problems %v, want [topic_recreated]", got)
	}
	if r.Log.TopicID == oldID || r.Log.TopicID == "" {
		t.Fatalf("the broker's topic ID %q, the fence's %q", r.Log.TopicID, oldID)
	}
	// A worker's claim on the new log is refused loudly, as a changed log.
	next := epochs.Token{Group: group, Topic: topic, Partition: 0, Epoch: 8, Member: "m-8"}
	if _, err := e.s.Claim(e.ctx, next, e.observe()); !errors.Is(err, sink.ErrTopicRecreated) || errors.Is(err, sink.ErrFenced) {
		t.Fatalf("claim on the recreated topic: %v", err)
	}

	expect := admin.ExpectToken(r.Fence)
	keep := admin.Request{Scope: scope, Expect: expect, Checkpoint: admin.Checkpoint{Keep: true}, Reason: "topic recreated"}
	if _, err := admin.Reset(e.ctx, e.cl, e.s, keep); !errors.Is(err, admin.ErrBadRequest) {
		t.Fatalf("keeping the checkpoint of a recreated topic: %v, want ErrBadRequest", err)
	}
	cp, err := admin.ParseCheckpoint("earliest")
	if err != nil {
		t.Fatal(err)
	}
	res, err := admin.Reset(e.ctx, e.cl, e.s, admin.Request{Scope: scope, Expect: expect, Checkpoint: cp, Reason: "topic recreated"})
	if err != nil {
		t.Fatal(err)
	}
	if res.After.NextOffset != 0 || res.After.TopicID != r.Log.TopicID {
		t.Fatalf("after the restart at earliest: %+v", res.After)
	}
	_, err = e.s.Claim(e.ctx, next, e.observe())
	var pe *sink.ProofRequiredError
	if !errors.As(err, &pe) {
		t.Fatalf("an unproven claim after the reset: %v, want a *sink.ProofRequiredError", err)
	}
	obs := e.observe()
	obs.Proof = &sink.Proof{Version: pe.Version}
	if n, err := nextOf(e.s.Claim(e.ctx, next, obs)); err != nil || n != 0 {
		t.Fatalf("a proven claim after the reset: %d, %v", n, err)
	}
	if len(e.report().Problems) != 0 {
		t.Fatalf("problems after the reset and a claim: %v", kinds(e.report()))
	}
}

// TestRetentionLoss: records are deleted before they were applied.
// Diagnose counts them; a restart below the new log start is refused.
func TestRetentionLoss(t *testing.T) {
	e := newEnv(t)
	e.produce(20)
	e.hold(tok, 10)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 15})
	if _, err := e.adm.DeleteRecords(e.ctx, del); err != nil {
		t.Fatal(err)
	}
	r := e.report()
	if got := kinds(r); len(got) != 1 || got[0] != admin.RetentionLoss || r.Lost() != 5 {
		t.Fatalf("problems %v, lost %d; want [retention_loss], 5", got, r.Lost())
	}
	expect := admin.ExpectToken(r.Fence)
	if _, err := admin.Reset(e.ctx, e.cl, e.s, admin.Request{Scope: scope, Expect: expect, Checkpoint: admin.Checkpoint{RestartAt: "12"}, Reason: "r"}); !errors.Is(err, admin.ErrBadRequest) {
		t.Fatalf("restart at a deleted offset: %v, want ErrBadRequest", err)
	}
	res, err := admin.Reset(e.ctx, e.cl, e.s, admin.Request{Scope: scope, Expect: expect, Checkpoint: admin.Checkpoint{RestartAt: "15"}, Reason: "accepted the loss of 10-14 (INC-1)"})
	if err != nil {
		t.Fatal(err)
	}
	if res.After.NextOffset != 15 || res.After.TopicID != r.Fence.TopicID {
		t.Fatalf("after restarting at 15: %+v", res.After)
	}
}

// TestTruncatedLog: the checkpoint is past the log's end on the same topic
// ID (a broker lost its data): Diagnose names it.
func TestTruncatedLog(t *testing.T) {
	e := newEnv(t)
	e.produce(5)
	e.hold(tok, 8) // the sink applied offsets the log no longer has
	if got := kinds(e.report()); len(got) != 1 || got[0] != admin.LogTruncated {
		t.Fatalf("problems %v, want [log_truncated]", got)
	}
}

// TestHolderGone: the stored holder is not a member of the group and a
// live member is assigned the partition (the generations went backwards):
// Diagnose names it, the reset needs no force, and a running worker
// resumes by itself.
func TestHolderGone(t *testing.T) {
	e := newEnv(t)
	e.produce(3)
	e.hold(epochs.Token{Group: group, Topic: topic, Partition: 0, Epoch: 40, Member: "gone"}, 3)
	member, err := kgo.NewClient(kgo.SeedBrokers(e.kf.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	deadline := time.Now().Add(20 * time.Second)
	var r admin.Report
	for {
		pctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
		member.PollFetches(pctx)
		cancel()
		if r = e.report(); r.Owner != "" || time.Now().After(deadline) {
			break
		}
	}
	if got := kinds(r); len(got) != 1 || got[0] != admin.HolderGone || r.HolderIsMember || r.Members != 1 {
		t.Fatalf("report %+v, want one holder_gone problem with one member", r)
	}
	if !strings.Contains(r.Problems[0].Detail, "gone") {
		t.Fatalf("detail does not name the holder: %s", r.Problems[0].Detail)
	}
	res, err := admin.Reset(e.ctx, e.cl, e.s, admin.Request{Scope: scope, Expect: admin.ExpectToken(r.Fence), Checkpoint: admin.Checkpoint{Keep: true}, Reason: "group recreated"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Resumes || res.After.NextOffset != 3 {
		t.Fatalf("result %+v: want Resumes and the checkpoint kept", res)
	}
}
