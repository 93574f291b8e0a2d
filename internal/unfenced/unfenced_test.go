package unfenced_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/internal/unfenced"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// TestSQLite: a failing effect rolls the whole batch back; a good batch
// commits; no fence row is written.
func TestSQLite(t *testing.T) {
	ctx := t.Context()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "u.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	put := func(ctx context.Context, tx *sql.Tx, i int) error {
		_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO kv VALUES (?, 'v')`, fmt.Sprint("u", i))
		return err
	}
	mu := make(chan struct{}, 1)
	boom := errors.New("boom")
	err = unfenced.SQLite(ctx, s.DB(), mu, 3, func(ctx context.Context, tx *sql.Tx, i int) error {
		if err := put(ctx, tx, i); err != nil {
			return err
		}
		if i == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failing effect: %v", err)
	}
	count := func() (n int) {
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM kv`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows after a rolled back batch", n)
	}
	if err := unfenced.SQLite(ctx, s.DB(), mu, 2, put); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d rows after a batch of 2", n)
	}
	if f, err := s.Fences(ctx); err != nil || len(f) != 0 {
		t.Fatalf("fence rows written: %+v %v", f, err)
	}
}

func TestPostgres(t *testing.T) {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, testpg.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table := fmt.Sprintf("unfenced_test_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (k text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(context.Background(), `DROP TABLE `+table)
	boom := errors.New("boom")
	err = unfenced.Postgres(ctx, pool, 3, func(ctx context.Context, tx pgx.Tx, i int) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES ($1)`, fmt.Sprint("u", i)); err != nil {
			return err
		}
		if i == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failing effect: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after a rolled back batch = %d, %v", n, err)
	}
	if err := unfenced.Postgres(ctx, pool, 2, func(ctx context.Context, tx pgx.Tx, i int) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES ($1)`, fmt.Sprint("u", i))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows after a batch of 2 = %d, %v", n, err)
	}
}
