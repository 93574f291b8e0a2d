package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/examples/ledger"
)

// setupRun creates the run's schema with the ledger example's tables (made
// by the example's own SetupPostgres) and the harness's compare_effects:
// one row per handler call that committed, written by every system in the
// transaction of its effects: the member that wrote it, the generation
// under which that member held the record's partition (workrouter: the
// token's epoch; the plain consumer: its group generation when it polled
// the record; Parallel Consumer: the group generation when the partition
// was assigned to it), whether it was a duplicate delivery that the Java
// side's deduplication caught, the record's produce timestamp and the time
// it was written.
func setupRun(ctx context.Context, dsn, schema string) error {
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return fmt.Errorf("compare: create schema %s: %w", schema, err)
	}
	pool, err := pgxpool.New(ctx, withParams(dsn, "search_path="+schema))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := ledger.SetupPostgres(ctx, pool); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE compare_effects (
		part int NOT NULL,
		off bigint NOT NULL,
		member text NOT NULL,
		gen bigint NOT NULL,
		dup boolean NOT NULL,
		produced_ms bigint NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp()
	)`)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE `+compareClaims+` (
		part int NOT NULL,
		member text NOT NULL,
		gen bigint NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp()
	)`)
	return err
}

// compareClaims is the Java programs' claims table in a run's schema: one
// row per partition assigned to a member (written by its rebalance
// callback, onPartitionsAssigned, outside any record's transaction), with
// the group generation of the assignment and when. It is to the Java
// systems what the sink's history (workrouterHistory) is to workrouter.
const compareClaims = "compare_claims"

func dropSchema(ctx context.Context, dsn, schema string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	return err
}

// applied returns the number of postings: commands applied (the postings'
// key is the command's Kafka position, so a command is posted at most once).
func applied(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger_postings`).Scan(&n)
	return n, err
}

// counts is what the database says of a run.
type counts struct {
	Produced        int `json:"produced"`
	Applied         int `json:"applied"`          // postings
	Lost            int `json:"lost"`             // produced − applied
	DupDeliveries   int `json:"dup_deliveries"`   // handler calls for a command already posted (caught by the Java side's check)
	DupEffects      int `json:"dup_effects"`      // commands whose effects landed twice (an ID posted twice)
	WrongBalances   int `json:"wrong_balances"`   // accounts whose balance is not the model's (commands once each, in produce order)
	OrderViolations int `json:"order_violations"` // postings applied after a later command of their account
	// LateLanded and LateCaught count the resumed (frozen) instance's
	// stale writes: handler calls it committed, on a partition, under a
	// generation older than one under which another member had already
	// written to that partition: landed (an effect applied) or caught by
	// the deduplication (a duplicate delivery). Zombie runs only.
	LateLanded int `json:"late_landed"`
	LateCaught int `json:"late_caught"`
	// TakenOver counts the effects the other instances committed while the
	// frozen one was stopped (zombie runs: the proof that its partitions
	// moved).
	TakenOver int `json:"taken_over"`
	// Fenced counts the writes the sink refused (workrouter's "fenced" lines
	// of the frozen instance).
	Fenced int `json:"fenced"`
	// ClaimsNotRecorded counts the Java instances' "claim not recorded"
	// lines, every instance's: an assignment missing from compareClaims,
	// so late writes the claim rule would have counted may be missed.
	ClaimsNotRecorded int `json:"claims_not_recorded"`
}

// check reads the run's tables back and compares them with the workload.
func check(ctx context.Context, pool *pgxpool.Pool, wl *workload) (counts, error) {
	c := counts{Produced: len(wl.cmds)}
	var err error
	if c.Applied, err = applied(ctx, pool); err != nil {
		return c, err
	}
	c.Lost = c.Produced - c.Applied
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE dup) FROM compare_effects`).Scan(&c.DupDeliveries); err != nil {
		return c, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM ledger_postings GROUP BY id HAVING count(*) > 1) d`).Scan(&c.DupEffects); err != nil {
		return c, err
	}
	rows, err := pool.Query(ctx, `SELECT account, balance FROM ledger_accounts`)
	if err != nil {
		return c, err
	}
	got := map[string]int64{}
	for rows.Next() {
		var a string
		var b int64
		if err := rows.Scan(&a, &b); err != nil {
			rows.Close()
			return c, err
		}
		got[a] = b
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return c, err
	}
	for a, want := range wl.want {
		if b, ok := got[a]; !ok || b != want {
			c.WrongBalances++
		}
	}
	for a := range got {
		if _, ok := wl.want[a]; !ok {
			c.WrongBalances++
		}
	}
	// Per account, in the order the postings were inserted (applied, a
	// bigserial drawn under the account's row lock), seq must grow.
	rows, err = pool.Query(ctx, `SELECT account, seq FROM ledger_postings ORDER BY account, applied`)
	if err != nil {
		return c, err
	}
	prevAcct, prevSeq := "", -1
	for rows.Next() {
		var a string
		var s int
		if err := rows.Scan(&a, &s); err != nil {
			rows.Close()
			return c, err
		}
		if a == prevAcct && s <= prevSeq {
			c.OrderViolations++
		}
		prevAcct, prevSeq = a, s
	}
	rows.Close()
	return c, rows.Err()
}

// zombieCounts fills the zombie run's counts: member was frozen at stop and
// resumed at resume.
//
// A handler call of member is stale, whatever the system, when another
// member had already written to its partition under a newer generation,
// or when a claim of its partition at a newer generation had already been
// recorded: workrouter's sink records its claims in its history
// (workrouterHistory, the epoch claimed), the Java programs record theirs
// in compareClaims (the group generation of the assignment). An instance
// frozen in the middle of a batch holds its transaction's row locks, so
// the new holder cannot write to that partition before the frozen one's
// batch commits or rolls back, and only the claim shows that the
// partition had moved. Without a fence that batch commits; with
// workrouter's, it is refused.
func zombieCounts(ctx context.Context, pool *pgxpool.Pool, c *counts, member string, stop, resume time.Time) error {
	claims, err := claimsQuery(ctx, pool)
	if err != nil {
		return err
	}
	err = pool.QueryRow(ctx, `WITH claims AS (`+claims+`)
		SELECT count(*) FILTER (WHERE NOT z.dup), count(*) FILTER (WHERE z.dup)
		FROM compare_effects z WHERE z.member = $1 AND (EXISTS (
			SELECT 1 FROM compare_effects o
			WHERE o.part = z.part AND o.member <> z.member AND o.gen > z.gen AND o.at < z.at)
		OR EXISTS (SELECT 1 FROM claims h WHERE h.part = z.part AND h.gen > z.gen AND h.at < z.at))`,
		member).Scan(&c.LateLanded, &c.LateCaught)
	if err != nil {
		return err
	}
	return pool.QueryRow(ctx, `SELECT count(*) FROM compare_effects WHERE member <> $1 AND at > $2 AND at < $3`,
		member, stop, resume).Scan(&c.TakenOver)
}

// claimsQuery is a query of every claim recorded in the run's schema, as
// (part, gen, at): the Java programs' compareClaims and, when the run's
// sink made it, workrouter's history.
func claimsQuery(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	q := `SELECT part, gen, at FROM ` + compareClaims
	var history bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, workrouterHistory).Scan(&history); err != nil {
		return "", err
	}
	if history {
		q += ` UNION ALL SELECT part, epoch::bigint, at FROM ` + workrouterHistory + ` WHERE kind = 'claim'`
	}
	return q, nil
}

// workrouterHistory is the fenced PostgreSQL sink's history table in a
// run's schema (the sink's default prefix): one row per claim, with the
// epoch claimed and when.
const workrouterHistory = "workrouter_history"

// timing is a run's throughput or latency figures, from compare_effects.
type timing struct {
	DrainSeconds float64 `json:"drain_s"` // first effect to last effect
	PerSecond    float64 `json:"per_s"`
	P50ms, P99ms float64
}

func drainTiming(ctx context.Context, pool *pgxpool.Pool) (timing, error) {
	var t timing
	var n int
	err := pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM max(at) - min(at)), 0)::float8, count(*)
		FROM compare_effects WHERE NOT dup`).Scan(&t.DrainSeconds, &n)
	if t.DrainSeconds > 0 {
		t.PerSecond = float64(n) / t.DrainSeconds
	}
	return t, err
}

// latency is produce timestamp to the effect row's write, for the first
// application of each record.
func latency(ctx context.Context, pool *pgxpool.Pool) (timing, error) {
	var t timing
	err := pool.QueryRow(ctx, `SELECT
		coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM at) * 1000 - produced_ms), 0)::float8,
		coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM at) * 1000 - produced_ms), 0)::float8
		FROM compare_effects WHERE NOT dup`).Scan(&t.P50ms, &t.P99ms)
	return t, err
}
