package chaos

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goodRecords: two partitions, a takeover of partition 0 at offset 2 by
// member b at epoch 5; every acknowledged command applied once, in order.
func goodRecords() Records {
	post := func(part int32, off int64, acct, id string, seq int, epoch int32, member string) cluster.Posting {
		return cluster.Posting{Partition: part, Offset: off, Account: acct, ID: id, Seq: seq, Epoch: epoch, Member: member}
	}
	return Records{
		Postings: []cluster.Posting{
			post(0, 0, "a1", "c1", 0, 3, "a"),
			post(0, 1, "a1", "c2", 1, 3, "a"),
			post(0, 2, "a1", "c3", 2, 5, "b"),
			post(0, 3, "a2", "c4", 0, 5, "b"),
			post(1, 0, "a3", "c5", 0, 3, "c"),
		},
		Claims: map[int32][]cluster.Claim{
			0: {{Epoch: 3, Member: "a", Next: 0}, {Epoch: 5, Member: "b", Next: 2}},
			1: {{Epoch: 3, Member: "c", Next: 0}},
		},
		Acked: map[string]cluster.Acked{
			"c1": {Account: "a1", Seq: 0}, "c2": {Account: "a1", Seq: 1}, "c3": {Account: "a1", Seq: 2},
			"c4": {Account: "a2", Seq: 0}, "c5": {Account: "a3", Seq: 0},
		},
	}
}

func TestCheckPassesGoodRecords(t *testing.T) {
	v, notes := Check(goodRecords())
	if v.Total() != 0 {
		t.Fatalf("violations %+v on good records: %v", v, notes)
	}
}

// TestCheckDetectsViolations feeds the checker records with one planted
// fault each, so that it cannot pass vacuously.
func TestCheckDetectsViolations(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*Records)
		want   Violations
		note   string
	}{
		"stale write after a newer claim": {func(r *Records) {
			r.Postings[2].Epoch, r.Postings[2].Member = 3, "a" // a's write landed after b claimed from offset 2
		}, Violations{F: 1}, "F: partition 0 offset 2"},
		"same epoch, another member after its claim": {func(r *Records) {
			r.Postings[3].Member = "zombie"
		}, Violations{F: 1}, "F: partition 0 offset 3"},
		"applied twice": {func(r *Records) {
			r.Postings = append(r.Postings, cluster.Posting{Partition: 1, Offset: 1, Account: "a3", ID: "c5", Seq: 0, Epoch: 3, Member: "c"})
		}, Violations{X: 1, O: 1}, "X: command c5"},
		"balance mismatch": {func(r *Records) { r.BalanceMismatches = 2 }, Violations{X: 2}, "X: 2 account balances"},
		"gap: acknowledged command never applied": {func(r *Records) {
			r.Postings = append(r.Postings[:1], r.Postings[2:]...)
		}, Violations{L: 1}, "L: acknowledged command c2"},
		"out of order": {func(r *Records) {
			r.Postings[0].Seq, r.Postings[1].Seq = 1, 0
			r.Acked["c1"], r.Acked["c2"] = cluster.Acked{Account: "a1", Seq: 1}, cluster.Acked{Account: "a1", Seq: 0}
		}, Violations{O: 1}, "O: a1 seq 0"},
	} {
		t.Run(name, func(t *testing.T) {
			r := goodRecords()
			tc.mutate(&r)
			v, notes := Check(r)
			if v != tc.want {
				t.Fatalf("violations %+v, want %+v (notes %v)", v, tc.want, notes)
			}
			if !strings.Contains(strings.Join(notes, "\n"), tc.note) {
				t.Fatalf("notes %v lack %q", notes, tc.note)
			}
		})
	}
}

func TestParseKinds(t *testing.T) {
	all, err := ParseKinds("all")
	if err != nil || len(all) != 7 {
		t.Fatalf("all: %v %v", all, err)
	}
	ks, err := ParseKinds("pause, churn,pause")
	if err != nil || len(ks) != 2 || ks[0] != Pause || ks[1] != Churn {
		t.Fatalf("pause,churn: %v %v", ks, err)
	}
	if _, err := ParseKinds("pause,gc"); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown kind: %v, want ErrConfig", err)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no worker argv": {},
		"one worker":     {Workers: 1, WorkerArgv: []string{"x"}},
		"bad protocol":   {Protocol: "eager", WorkerArgv: []string{"x"}},
		"bad kind":       {Kinds: []Kind{"gc"}, WorkerArgv: []string{"x"}},
		"negative rate":  {Rate: -1, WorkerArgv: []string{"x"}},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}

func TestResultOK(t *testing.T) {
	r := Result{Requested: []Kind{Pause, Kill}, Faults: map[Kind]int{Pause: 2, Kill: 1}, StaleRejected: 1, Produced: 10}
	if !r.OK() || r.Line() != "chaos: faults=3 kinds=2 commands=10 stale_rejected=1 violations=0" {
		t.Fatalf("OK %v line %q", r.OK(), r.Line())
	}
	for name, bad := range map[string]func(*Result){
		"violation":          func(r *Result) { r.Violations.F = 1 },
		"kind never fired":   func(r *Result) { r.Faults = map[Kind]int{Pause: 2} },
		"no stale rejection": func(r *Result) { r.StaleRejected = 0 },
	} {
		b := r
		b.Faults = map[Kind]int{Pause: 2, Kill: 1}
		bad(&b)
		if b.OK() {
			t.Errorf("%s: OK", name)
		}
	}
	if !strings.Contains(r.Table(), "time to recover") {
		t.Fatalf("table:\n%s", r.Table())
	}
}

func TestErrorResponse(t *testing.T) {
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	if r := errorResponse(hb, kerr.RebalanceInProgress.Code).(*kmsg.HeartbeatResponse); r.ErrorCode != kerr.RebalanceInProgress.Code || r.GetVersion() != 4 {
		t.Fatalf("heartbeat response %+v", r)
	}
	oc := kmsg.NewPtrOffsetCommitRequest()
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = "t"
	for p := int32(0); p < 2; p++ {
		op := kmsg.NewOffsetCommitRequestTopicPartition()
		op.Partition = p
		ot.Partitions = append(ot.Partitions, op)
	}
	oc.Topics = append(oc.Topics, ot)
	r := errorResponse(oc, kerr.NotCoordinator.Code).(*kmsg.OffsetCommitResponse)
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 2 || r.Topics[0].Partitions[1].ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("offset commit response %+v", r)
	}
}

// TestWorkersGetShortRebalanceTimeout guards the long profile's finding:
// with the worker's default rebalance timeout (60s) and a join every few
// seconds, the embedded broker kept the group in PreparingRebalance for
// good (V=1). The harness's workers get 2.5× the session timeout.
func TestWorkersGetShortRebalanceTimeout(t *testing.T) {
	cfg, err := Config{WorkerArgv: []string{"x"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RebalanceTimeout != 5*time.Second || cfg.SessionTimeout != 2*time.Second {
		t.Fatalf("rebalance timeout %s with session %s, want 5s with 2s", cfg.RebalanceTimeout, cfg.SessionTimeout)
	}
	args := (&run{cfg: cfg, store: &cluster.Store{}}).workerArgs("w1")
	i := slices.Index(args, "--rebalance-timeout")
	if i < 0 || args[i+1] != "5s" {
		t.Fatalf("worker args %v lack --rebalance-timeout 5s", args)
	}
}

func TestTakeoverSummary(t *testing.T) {
	r := Result{Watched: 4, Takeovers: []time.Duration{3 * time.Second, time.Second, 2 * time.Second}}
	if got, want := r.takeoverSummary(), "2s / 3s (3 of 4 faults)"; got != want {
		t.Errorf("takeoverSummary() = %q, want %q", got, want)
	}
	if got, want := (Result{Watched: 2}).takeoverSummary(), "- (0 of 2 faults)"; got != want {
		t.Errorf("takeoverSummary() with none = %q, want %q", got, want)
	}
	if !strings.Contains(r.Table(), "takeover after a fault (p50 / max)") {
		t.Errorf("the table lacks the takeover row:\n%s", r.Table())
	}
}
