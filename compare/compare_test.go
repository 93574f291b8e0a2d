package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/router"
)

// TestMain makes the test binary a workrouter instance when the harness
// starts it as one (see workerEnv); otherwise it runs the tests and checks
// that they leave no goroutine behind.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		if err := runInstance(); err != nil {
			fmt.Fprintln(os.Stderr, "compare instance:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// need returns the services the harness needs, or skips (fails under
// CI=true) without PostgreSQL. The real broker is asked for separately.
func needPostgres(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("WORKROUTER_TEST_POSTGRES")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		missing(t, "no PostgreSQL at "+dsn+": "+err.Error())
	}
	conn.Close(ctx)
	return dsn
}

func missing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// TestCheckCountsFromTheDatabase builds a run's tables by hand, with known
// faults, and checks that check and zombieCounts find exactly those: the
// harness's duplicates, losses, wrong balances, order violations and late
// writes are read from the rows, not assumed; late writes by the same two
// rules for every system (a newer generation's write by another member, a
// claim at a newer generation: the Java programs' compare_claims,
// workrouter's sink history).
func TestCheckCountsFromTheDatabase(t *testing.T) {
	dsn := needPostgres(t)
	ctx := context.Background()
	schema := fmt.Sprintf("cmp_test_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if err := setupRun(ctx, dsn, schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dropSchema(context.Background(), dsn, schema) })
	pool, err := pgxpool.New(ctx, withParams(dsn, "search_path="+schema))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Four commands of two accounts on partition 0; "y" was frozen at t1
	// and resumed at t2.
	wl := &workload{cmds: make([]router.Command, 4), want: map[string]int64{"a": 30, "b": 5}}
	t0 := time.Now().Add(-time.Hour)
	t1, t2 := t0.Add(10*time.Second), t0.Add(20*time.Second)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO ledger_accounts VALUES ('a', 30), ('b', 7)`) // b is wrong: 7, the model says 5
	post := func(off, seq int, acct string) {
		exec(`INSERT INTO ledger_postings (topic, part, off, account, id, seq, kind, amount, epoch, member)
			VALUES ('t', 0, $1, $2, $3, $4, 'deposit', 1, 0, 'x')`, off, acct, fmt.Sprintf("c-%d", off), seq)
	}
	// Command 3 is lost; account a's seq 1 was applied before its seq 0.
	post(1, 1, "a")
	post(0, 0, "a")
	post(2, 0, "b")
	effect := func(off int, member string, gen int, dup bool, produced, at time.Time) {
		exec(`INSERT INTO compare_effects (part, off, member, gen, dup, produced_ms, at) VALUES (0, $1, $2, $3, $4, $5, $6)`,
			off, member, gen, dup, produced.UnixMilli(), at)
	}
	effect(0, "x", 2, false, t0, t0.Add(time.Second))
	effect(1, "x", 3, false, t0, t1.Add(time.Second))   // x took the partition over at generation 3 while y was frozen
	effect(2, "y", 1, false, t0, t2.Add(time.Second))   // y's stale write (generation 1), landed
	effect(1, "y", 1, true, t0, t2.Add(2*time.Second))  // y's stale write, caught by the dedupe
	effect(0, "x", 3, true, t0, t2.Add(3*time.Second))  // a redelivery to x
	effect(3, "y", 4, false, t2, t2.Add(4*time.Second)) // y holds the partition again, at generation 4: not stale
	c, err := check(ctx, pool, wl)
	if err != nil {
		t.Fatal(err)
	}
	if err := zombieCounts(ctx, pool, &c, "y", t1, t2); err != nil {
		t.Fatal(err)
	}
	want := counts{Produced: 4, Applied: 3, Lost: 1, DupDeliveries: 2, WrongBalances: 1, OrderViolations: 1,
		LateLanded: 1, LateCaught: 1, TakenOver: 1}
	if c != want {
		t.Errorf("counts = %+v\nwant     %+v", c, want)
	}
	// A command ID posted twice (at two offsets) is a duplicate effect.
	exec(`INSERT INTO ledger_postings (topic, part, off, account, id, seq, kind, amount, epoch, member)
		VALUES ('t', 0, 9, 'b', 'c-2', 0, 'deposit', 1, 0, 'x')`)
	if c, err = check(ctx, pool, wl); err != nil {
		t.Fatal(err)
	}
	if c.DupEffects != 1 {
		t.Errorf("DupEffects = %d after one ID posted twice, want 1", c.DupEffects)
	}
	// Every system's claims count alike. The Java programs record theirs
	// in compare_claims: x's claim of partition 0 at generation 5 (its
	// rebalance callback, before it wrote anything there: y held the rows
	// it needed) makes y's later write under generation 4 stale; y's own
	// claim at generation 4, and x's claim of partition 1, make nothing
	// stale.
	exec(`INSERT INTO `+compareClaims+` (part, member, gen, at) VALUES (0, 'y', 4, $1), (0, 'x', 5, $2), (1, 'x', 9, $1)`,
		t2.Add(3*time.Second), t2.Add(5*time.Second))
	effect(3, "y", 4, false, t2, t2.Add(6*time.Second))
	lateAfter := func(what string, landed, caught int) {
		t.Helper()
		c := counts{}
		if err := zombieCounts(ctx, pool, &c, "y", t1, t2); err != nil {
			t.Fatal(err)
		}
		if c.LateLanded != landed || c.LateCaught != caught {
			t.Errorf("%s: LateLanded = %d, LateCaught = %d, want %d and %d", what, c.LateLanded, c.LateCaught, landed, caught)
		}
	}
	lateAfter("after a Java claim at a newer generation", 2, 1)
	// Without the claims, that write is not stale.
	exec(`DELETE FROM ` + compareClaims)
	lateAfter("with no claim", 1, 1)
	// workrouter's sink records its claims in its history, by epoch: the
	// same rule.
	exec(`CREATE TABLE ` + workrouterHistory + ` (part int, kind text, epoch int, member text, at timestamptz)`)
	exec(`INSERT INTO `+workrouterHistory+` VALUES (0, 'claim', 4, 'y-1', $1), (0, 'claim', 5, 'x-1', $2), (1, 'claim', 9, 'x-1', $1)`,
		t2.Add(3*time.Second), t2.Add(5*time.Second))
	lateAfter("after a workrouter claim at a newer epoch", 2, 1)
}

// TestShortComparison runs a short version of the comparison on the real
// broker named by WORKROUTER_TEST_BROKERS (CI's Apache Kafka step), with
// Java and Maven: every system applies every command of the backlog, and in
// the zombie scenario (a joins, c joins, a killed, b frozen past its
// session and resumed) every command is applied, the frozen instance's
// partitions are taken over, and workrouter's frozen instance, frozen
// inside a transaction that has written (holding a batch), has its late
// write refused by the sink with nothing of it landed. The other systems'
// duplicate deliveries and late writes are read from the database and
// logged, whatever they are.
func TestShortComparison(t *testing.T) {
	brokers := os.Getenv("WORKROUTER_TEST_BROKERS")
	if brokers == "" {
		t.Skip("no real Kafka broker: set WORKROUTER_TEST_BROKERS (CI's Apache Kafka step does)")
	}
	dsn := needPostgres(t)
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, "no "+tool+" on PATH: the comparison's Java programs need a JDK and Maven")
		}
	}
	o := defaultOptions()
	o.brokers, o.postgres = brokers, dsn
	o.records, o.keys, o.runs, o.warmup = 2000, 500, 1, 0
	o.dists, o.handlers = []string{"uniform"}, []string{"pg"}
	o.concurrency, o.latencyRate, o.zombieAttempts = 12, 0, 1
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, o, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Drain) != len(allSystems) || len(rep.Zombie) != len(allSystems) {
		t.Fatalf("%d drain runs and %d zombie runs, want %d of each", len(rep.Drain), len(rep.Zombie), len(allSystems))
	}
	for _, r := range rep.Drain {
		c := r.Counts
		if c.Applied != o.records || c.Lost != 0 || c.WrongBalances != 0 || c.OrderViolations != 0 || c.DupEffects != 0 {
			t.Errorf("drain %s: %+v: want every command applied once, in order, balances right", r.System, c)
		}
		if r.Timing.PerSecond <= 0 {
			t.Errorf("drain %s: no effect timed", r.System)
		}
	}
	for _, z := range rep.Zombie {
		c := z.Counts
		if c.Lost != 0 || c.Applied != c.Produced {
			t.Errorf("zombie %s: %d of %d commands applied", z.System, c.Applied, c.Produced)
		}
		if c.TakenOver == 0 {
			t.Errorf("zombie %s: nothing applied by the others while b was frozen: no takeover happened", z.System)
		}
		if c.DupEffects != 0 {
			t.Errorf("zombie %s: %d commands' effects landed twice despite the postings' key", z.System, c.DupEffects)
		}
		if c.ClaimsNotRecorded != 0 {
			t.Errorf("zombie %s: %d assignments not recorded as claims: late writes undercounted", z.System, c.ClaimsNotRecorded)
		}
		t.Logf("zombie %s: duplicate deliveries %d, late writes landed %d and caught %d, refused %d, wrong balances %d, order violations %d, frozen in a transaction %v (in %d scenarios)",
			z.System, c.DupDeliveries, c.LateLanded, c.LateCaught, c.Fenced, c.WrongBalances, c.OrderViolations, z.HeldTx, z.Attempts)
		if z.System != sysWorkrouter {
			continue
		}
		if c.Fenced == 0 {
			t.Errorf("zombie workrouter: the frozen instance attempted no late write in %d scenarios (no fenced line)", z.Attempts)
		}
		if !z.HeldTx {
			t.Errorf("zombie workrouter: the frozen instance was never frozen inside a transaction in %d scenarios: no batch held across the takeover", z.Attempts)
		}
		if c.LateLanded != 0 || c.LateCaught != 0 || c.DupDeliveries != 0 || c.WrongBalances != 0 || c.OrderViolations != 0 {
			t.Errorf("zombie workrouter: %+v: want no late write landed, no duplicate, balances and order right", c)
		}
	}
	if !strings.Contains(out.String(), "compare: uniform/pg/workrouter_vs_pc-key=") {
		t.Errorf("no ratios on the final line")
	}
}

// TestWaitAppliedGivesUpWhenStalled checks that a wait for a backlog ends
// when nothing is posted for the stall time, long before its timeout (a
// 1,000,000-record drain's timeout is hours).
func TestWaitAppliedGivesUpWhenStalled(t *testing.T) {
	dsn := needPostgres(t)
	ctx := context.Background()
	schema := fmt.Sprintf("cmp_test_stall_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if err := setupRun(ctx, dsn, schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dropSchema(context.Background(), dsn, schema) })
	pool, err := pgxpool.New(ctx, withParams(dsn, "search_path="+schema))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	err = waitApplied(ctx, pool, 1, time.Hour, 500*time.Millisecond, func() error { return nil })
	if err == nil || !strings.Contains(err.Error(), "0 of 1 commands applied, none in the last 500ms") {
		t.Fatalf("waitApplied with nothing posted: %v, want a stall error", err)
	}
}
