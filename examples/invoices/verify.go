package invoices

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Report is what [VerifySQLite] and [VerifyPostgres] find in the example's
// tables. A caller that produced commands for N distinct (tenant, period)
// pairs, D of them repeats, expects Runs == N and DuplicateRuns == D: each
// period billed once, each repeat recorded as a no-op exactly once.
type Report struct {
	// Runs is the number of billing runs: rows of invoice_runs, one per
	// billed (tenant, period).
	Runs int
	// DuplicateRuns is the number of run-billing commands that found their
	// (tenant, period) already billed and were recorded as no-ops (rows of
	// invoice_skips).
	DuplicateRuns int
	// Tenants is the number of distinct tenants with at least one run.
	Tenants int
}

// VerifySQLite counts the example's rows in db in one read transaction.
func VerifySQLite(ctx context.Context, db *sql.DB) (Report, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Report{}, fmt.Errorf("invoices: verify: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return verify(ctx, sqlTx{tx})
}

// VerifyPostgres counts the example's rows through pool in one read-only
// repeatable-read transaction.
func VerifyPostgres(ctx context.Context, pool *pgxpool.Pool) (Report, error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return Report{}, fmt.Errorf("invoices: verify: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	return verify(ctx, pgxTx{tx})
}

func verify(ctx context.Context, q querier) (Report, error) {
	var rep Report
	if err := q.queryRow(ctx, `SELECT count(*), count(DISTINCT tenant) FROM invoice_runs`).Scan(&rep.Runs, &rep.Tenants); err != nil {
		return Report{}, fmt.Errorf("invoices: verify: %w", err)
	}
	if err := q.queryRow(ctx, `SELECT count(*) FROM invoice_skips`).Scan(&rep.DuplicateRuns); err != nil {
		return Report{}, fmt.Errorf("invoices: verify: %w", err)
	}
	return rep, nil
}
