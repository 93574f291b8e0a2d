// Package unfenced runs a batch's effects in one database transaction with
// no fence at all — no holder check, no checkpoint row — as the baseline
// of the benchmarks that measure what fencing costs (the sinks' Go
// benchmarks and `workrouter-lab bench` W2/B3). It is not for real work: a
// paused worker's late write lands. It lives in internal/ so that no
// user can reach it.
package unfenced

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SQLite runs effect for i = 0 … n-1 in one writing transaction of db and
// commits. db must be the database handle of an SQLite sink (sqlite.Sink's
// DB), whose connections begin IMMEDIATE transactions; mu serializes the
// writers of one process, as the sink's own writer lock does. It returns
// the effect's error (wrapped with its index) or the commit's.
func SQLite(ctx context.Context, db *sql.DB, mu chan struct{}, n int, effect func(ctx context.Context, tx *sql.Tx, i int) error) error {
	select {
	case mu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-mu }()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("unfenced: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for i := range n {
		if err := effect(ctx, tx, i); err != nil {
			return fmt.Errorf("unfenced: effect %d: %w", i, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("unfenced: commit: %w", err)
	}
	return nil
}

// Postgres runs effect for i = 0 … n-1 in one transaction of pool and
// commits. It returns the effect's error (wrapped with its index) or the
// commit's.
func Postgres(ctx context.Context, pool *pgxpool.Pool, n int, effect func(ctx context.Context, tx pgx.Tx, i int) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("unfenced: begin: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // a no-op after Commit
	}()
	for i := range n {
		if err := effect(ctx, tx, i); err != nil {
			return fmt.Errorf("unfenced: effect %d: %w", i, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("unfenced: commit: %w", err)
	}
	return nil
}
