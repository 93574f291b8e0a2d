package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/sink"
)

// requireDB skips the test (or fails it when CI=true: never skip in CI) if
// the test server is unreachable, and returns its DSN.
func requireDB(tb testing.TB) string {
	tb.Helper()
	return testpg.DSN(tb)
}

// adminPool is the pool of the tests' admin statements, shared by the
// package's tests: a fresh connection per statement costs the server
// milliseconds of CPU each, and every test makes a few. It is opened by
// the first admin call and closed by TestMain after the tests.
var adminPool struct {
	once sync.Once
	pool *pgxpool.Pool
	err  error
}

// admin returns the shared admin pool, or fails tb.
func admin(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	dsn := requireDB(tb)
	adminPool.once.Do(func() { adminPool.pool, adminPool.err = pgxpool.New(context.Background(), dsn) })
	if adminPool.err != nil {
		tb.Fatalf("admin pool: %v", adminPool.err)
	}
	return adminPool.pool
}

// adminExec runs one statement on the test server (the admin pool).
func adminExec(tb testing.TB, sql string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin(tb).Exec(ctx, sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// adminQueryRow runs one query on the test server (the admin pool) and
// scans its row.
func adminQueryRow(tb testing.TB, sql string, args []any, dest ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin(tb).QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// newTestSchema creates a fresh PostgreSQL schema wr_test_<random> with a
// kv(k text primary key, v text) table, and drops it (and everything in
// it) when the test ends.
func newTestSchema(tb testing.TB) string {
	tb.Helper()
	requireDB(tb)
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "wr_test_" + hex.EncodeToString(b[:])
	adminExec(tb, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	tb.Cleanup(func() {
		adminExec(tb, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	adminExec(tb, "CREATE TABLE "+pgx.Identifier{name, "kv"}.Sanitize()+" (k text PRIMARY KEY, v text NOT NULL)")
	return name
}

// schemaDSN returns the test DSN with search_path set to schema, so that
// handlers can write to the unqualified table kv of their test's schema,
// and with a small pool so that parallel tests stay within the server's
// connection limit.
func schemaDSN(tb testing.TB, schema string) string {
	tb.Helper()
	dsn := requireDB(tb)
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			tb.Fatalf("parse %s: %v", testpg.EnvDSN, err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		q.Set("pool_max_conns", "6")
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema + " pool_max_conns=6"
}

// openSink opens a sink whose tables live in schema, and closes it when
// the test ends. mutate, if not nil, adjusts the config first.
func openSink(tb testing.TB, schema string, mutate func(*Config)) *Sink {
	tb.Helper()
	cfg := Config{DSN: schemaDSN(tb, schema), Schema: schema}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// upsertKV is the handlers' write: kv(k) = v.
const upsertKV = `INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v`

// appendKV appends v to kv(k): applying it twice is visible.
const appendKV = `INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = kv.v || EXCLUDED.v`

// getKV reads kv(k) through s's pool.
func getKV(ctx context.Context, s *Sink, k string) (string, bool, error) {
	var v string
	err := s.Pool().QueryRow(ctx, `SELECT v FROM kv WHERE k = $1`, k).Scan(&v)
	switch {
	case err == pgx.ErrNoRows:
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return v, true, nil
}

// claimProven claims tok's scope as the consumer does after a reset: on
// a refusal for want of a proof it claims again with a proof made at the
// fence version the refusal names (the test stands in for the broker).
func claimProven(ctx context.Context, s *Sink, tok epochs.Token) (int64, error) {
	next, err := nextOf(s.Claim(ctx, tok, sink.Observed{}))
	var pe *sink.ProofRequiredError
	if errors.As(err, &pe) {
		next, err = nextOf(s.Claim(ctx, tok, sink.Observed{Proof: &sink.Proof{Version: pe.Version}}))
	}
	return next, err
}

// migrated opens schema, whose tables are those of version from: first
// read-only, which must refuse to migrate it (ErrSchema naming from), then
// read-write, which must migrate it to schemaVersion. It returns the
// read-write Sink.
func migrated(t *testing.T, schema string, from int32) *Sink {
	t.Helper()
	if ro, err := Open(t.Context(), Config{DSN: schemaDSN(t, schema), Schema: schema, ReadOnly: true}); err == nil {
		ro.Close()
		t.Fatalf("a read-only open of a version %d schema succeeded", from)
	} else if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), fmt.Sprintf("version %d", from)) || !strings.Contains(err.Error(), "read-only open cannot migrate") {
		t.Fatalf("read-only open of a version %d schema: %v, want ErrSchema saying it cannot migrate version %d", from, err, from)
	}
	s := openSink(t, schema, nil)
	var version int32
	adminQueryRow(t, "SELECT version FROM "+pgx.Identifier{schema, "workrouter_schema"}.Sanitize(), nil, &version)
	if version != schemaVersion {
		t.Fatalf("schema version after migrating version %d = %d, want %d", from, version, schemaVersion)
	}
	return s
}
