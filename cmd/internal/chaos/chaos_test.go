package chaos

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseKinds(t *testing.T) {
	all, err := ParseKinds("all")
	if err != nil || all != nil {
		t.Fatalf("all: %v %v; want nil (every kind that applies where the run goes)", all, err)
	}
	if ek := EmbeddedKinds(); len(ek) != 10 || !slices.Contains(ek, Poison) || !slices.Contains(ek, Resend) || !slices.Contains(ek, BrokerRestart) {
		t.Fatalf("embedded kinds: %v", ek)
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
		"one worker":     {Workers: 1, Worker: cluster.Binary{Argv: []string{"x"}}},
		"bad protocol":   {Protocol: "eager", Worker: cluster.Binary{Argv: []string{"x"}}},
		"bad kind":       {Kinds: []Kind{"gc"}, Worker: cluster.Binary{Argv: []string{"x"}}},
		"negative rate":  {Rate: -1, Worker: cluster.Binary{Argv: []string{"x"}}},
		"no lane":        {KeyConcurrency: -1, Worker: cluster.Binary{Argv: []string{"x"}}},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}

func TestResultOK(t *testing.T) {
	r := Result{Requested: []Kind{Pause, Kill}, Faults: map[Kind]int{Pause: 2, Kill: 1}, StaleRejected: 1, Produced: 10, VSamples: 12}
	if !r.OK() || len(r.Failures()) != 0 || r.Line() != "chaos: faults=3 kinds=2 commands=10 stale_rejected=1 dead_letters=0 gap_dead_letters=0 duplicates_skipped=0 v_samples=12 violations=0" {
		t.Fatalf("OK %v line %q", r.OK(), r.Line())
	}
	for name, bad := range map[string]func(*Result){
		"violation":          func(r *Result) { r.Violations.F = 1 },
		"kind never fired":   func(r *Result) { r.Faults = map[Kind]int{Pause: 2} },
		"no stale rejection": func(r *Result) { r.StaleRejected = 0 },
		"D violation":        func(r *Result) { r.Violations.D = 1 },
		"lost at a restart":  func(r *Result) { r.Restarts = []Restart{{Workers: 3, Back: 3, Lost: 1}} },
		"worker not back":    func(r *Result) { r.Restarts = []Restart{{Workers: 3, Back: 2}} },
		"V never sampled":    func(r *Result) { r.VSamples, r.VSkipped, r.VReadsFailed = 0, 4, 2 },
		"poison, no gap": func(r *Result) {
			r.Requested, r.Faults[Poison], r.DeadLetters = append(r.Requested, Poison), 1, map[string]int{"undecodable": 5}
		},
		"resend, no duplicate skipped": func(r *Result) {
			r.Requested, r.Faults[Resend], r.Resent = append(r.Requested, Resend), 2, 20
		},
		"a copy in the log not counted as skipped": func(r *Result) { r.LogCopies, r.DuplicatesSkipped = 5, 4 },
	} {
		b := r
		b.Faults = map[Kind]int{Pause: 2, Kill: 1}
		bad(&b)
		if b.OK() || len(b.Failures()) != 1 {
			t.Errorf("%s: OK %v, failures %q", name, b.OK(), b.Failures())
		}
	}
	if !strings.Contains(r.Table(), "time to recover") {
		t.Fatalf("table:\n%s", r.Table())
	}
}

// TestResultReportsPoisonAndRestarts: the table and the final line carry
// the dead letters, the poison records, the broker restarts' figures and
// the duplicates: the copies of commands in the log (re-sent, or written
// twice by the broker) are skipped duplicates, not exempted applications.
func TestResultReportsPoisonAndRestarts(t *testing.T) {
	r := Result{Requested: []Kind{Poison, BrokerRestart, Resend}, Faults: map[Kind]int{Poison: 2, BrokerRestart: 2, Resend: 1}, Produced: 10,
		Poisoned:    map[cluster.PoisonKind]int{cluster.PoisonNullKey: 2, cluster.PoisonMalformed: 2},
		DeadLetters: map[string]int{"undecodable": 2, "handler_error": 2}, DeadLettersAfterGap: 2, PoisonTxn: 2, Aborted: 4,
		VSamples: 30, VSkipped: 6, VReadsFailed: 2,
		Restarts: []Restart{{Down: 300 * time.Millisecond, Recovery: time.Second, Workers: 3, Back: 3},
			{Down: 400 * time.Millisecond, Recovery: 2 * time.Second, Workers: 3, Back: 3}},
		LogCopies: 17, Resent: 12, DuplicatesSkipped: 17, DuplicateEvents: 16}
	if !r.OK() || r.Line() != "chaos: faults=5 kinds=3 commands=10 stale_rejected=0 dead_letters=4 gap_dead_letters=2 duplicates_skipped=17 v_samples=30 violations=0" {
		t.Fatalf("OK %v line %q", r.OK(), r.Line())
	}
	table := r.Table()
	if strings.Contains(table, "wrote twice") {
		t.Errorf("the table still exempts records the broker wrote twice:\n%s", table)
	}
	flat := strings.Join(strings.Fields(table), " ")
	for _, want := range []string{
		"poison records acknowledged                      4 (malformed 2, null-key 2)",
		"dead letters in the sink (by reason)             4 (handler_error 2, undecodable 2)",
		"broker restarts: down, p50 / max                 300ms / 400ms (2 of 2)",
		"broker restarts: recovery, p50 / max             1s / 2s (2 of 2)",
		"broker restarts: workers back                    6 of 6",
		"broker restarts: acknowledged records lost       0",
		"acknowledged commands re-sent with their IDs     12",
		"records in the log repeating a command ID        17",
		"duplicates skipped (sink's count / workers' events) 17 / 16",
		"violations X (a command ID applied twice, balance)",
		"violations D (a record without exactly one dead letter or effect)",
		"poison records in committed transactions         2",
		"records of aborted transactions                  4",
		"dead letters right after an offset gap           2",
		"V samples: compared / skipped / readings failed  30 / 6 / 2",
	} {
		if !strings.Contains(flat, strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}

// TestWorkersGetShortRebalanceTimeout guards the long profile's finding:
// with the worker's default rebalance timeout (60s) and a join every few
// seconds, the embedded broker kept the group in PreparingRebalance for
// good (V=1). The harness's workers get 2.5× the session timeout.
func TestWorkersGetShortRebalanceTimeout(t *testing.T) {
	cfg, err := Config{Worker: cluster.Binary{Argv: []string{"x"}}}.withDefaults()
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

// TestWorkersGetKeyConcurrency: the workers get the run's lanes per
// partition as --key-concurrency; the default (1) passes none, so a run
// without lanes starts the workers as before.
func TestWorkersGetKeyConcurrency(t *testing.T) {
	for _, n := range []int{0, 1, 8} {
		cfg, err := Config{Worker: cluster.Binary{Argv: []string{"x"}}, KeyConcurrency: n}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		args := (&run{cfg: cfg, store: &cluster.Store{}}).workerArgs("w1")
		i := slices.Index(args, "--key-concurrency")
		switch {
		case n <= 1 && (i >= 0 || cfg.KeyConcurrency != 1):
			t.Errorf("key concurrency %d: worker args %v, config %d, want no flag and 1", n, args, cfg.KeyConcurrency)
		case n > 1 && (i < 0 || args[i+1] != strconv.Itoa(n)):
			t.Errorf("key concurrency %d: worker args %v lack --key-concurrency %d", n, args, n)
		}
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
