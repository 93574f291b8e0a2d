package cli

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/postgres"
)

// TestDLQListAndShowLeaveSQLiteUnchanged: dlq list and dlq show read a
// sink without changing it (no -wal or -shm file, no journal mode switch,
// byte for byte), and on another application's database they say it
// holds no sink and create nothing (they used to create the sink's tables
// and switch the file to WAL, and list "no dead letters").
func TestDLQListAndShowLeaveSQLiteUnchanged(t *testing.T) {
	path := deadLetteredSink(t) // closed: no -wal or -shm file
	dir := filepath.Dir(path)
	before := dirFiles(t, dir)
	spec := "sqlite:" + path
	if out, _, err := runCLI(t, nil, "dlq", "list", "--sink", spec); err != nil || !strings.Contains(out, "acct-2") {
		t.Fatalf("dlq list: %q, %v", out, err)
	}
	sameDir(t, "dlq list", before, dirFiles(t, dir))
	if out, _, err := runCLI(t, nil, "dlq", "show", "1", "--sink", spec); err != nil || !strings.Contains(out, "acct-1") {
		t.Fatalf("dlq show: %q, %v", out, err)
	}
	sameDir(t, "dlq show", before, dirFiles(t, dir))

	appDir := t.TempDir()
	app := filepath.Join(appDir, "app.db")
	db, err := sql.Open("sqlite", app)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('keep me')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	appBefore := dirFiles(t, appDir)
	oneLineFailure(t, []string{"dlq", "list", "--sink", "sqlite:" + app}, "no workrouter sink tables", app)
	oneLineFailure(t, []string{"dlq", "show", "1", "--sink", "sqlite:" + app}, "no workrouter sink tables")
	sameDir(t, "dlq on another application's database", appBefore, dirFiles(t, appDir))
}

// pgAdmin connects to the test server as its superuser.
func pgAdmin(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := testpg.DSN(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, dsn
}

// withParam adds a query parameter to a postgres:// DSN.
func withParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// schemaExists reports whether the test server has schema name.
func schemaExists(t *testing.T, admin *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := admin.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestDLQListPostgresReadOnly: dlq list and dlq show on a search_path
// that names no schema fail, saying the schema does not exist, and create
// nothing (they used to create the schema and its tables and print "no
// dead letters", exit 0); on a role that may only read they work.
func TestDLQListPostgresReadOnly(t *testing.T) {
	admin, dsn := pgAdmin(t)
	ctx := t.Context()
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	missing := "wr_dlq_missing_" + suffix
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{missing}.Sanitize()+" CASCADE")
	})
	for _, args := range [][]string{{"dlq", "list"}, {"dlq", "show", "1"}} {
		oneLineFailure(t, append(args, "--sink", withParam(dsn, "search_path="+missing)),
			fmt.Sprintf("schema %q does not exist", missing), "search_path")
		if schemaExists(t, admin, missing) {
			t.Fatalf("%s created schema %s", strings.Join(args, " "), missing)
		}
	}

	// A sink with a dead letter, read by a role that may only read it.
	schema, role := "wr_dlq_ro_"+suffix, "wr_dlq_reader_"+suffix
	t.Cleanup(func() {
		bg := context.Background()
		admin.Exec(bg, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		admin.Exec(bg, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
	})
	s, err := postgres.Open(ctx, postgres.Config{DSN: dsn, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	tok := epochs.Token{Group: "g", Topic: "ledger", Partition: 0, Epoch: 3, Member: "m-0"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 0, Key: []byte("acct-ro"), Value: []byte(`{}`),
		Headers: []sink.RecordHeader{{Key: envelope.TypeHeader, Value: []byte("deposit")}}, Timestamp: time.Now(),
		Reason: consumer.ReasonPermanent, Error: "permanent: bad", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	id := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{"CREATE ROLE " + pgx.Identifier{role}.Sanitize() + " LOGIN",
		"GRANT USAGE ON SCHEMA " + id + " TO " + pgx.Identifier{role}.Sanitize(),
		"GRANT SELECT ON ALL TABLES IN SCHEMA " + id + " TO " + pgx.Identifier{role}.Sanitize()} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	reader := fmt.Sprintf("postgres://%s@%s:%d/%s?search_path=%s", role, cfg.Host, cfg.Port, cfg.Database, schema)
	if out, _, err := runCLI(t, nil, "dlq", "list", "--sink", reader); err != nil || !strings.Contains(out, "acct-ro") {
		t.Fatalf("dlq list as a reader: %q, %v", out, err)
	}
	if out, _, err := runCLI(t, nil, "dlq", "show", "1", "--sink", reader); err != nil || !strings.Contains(out, "acct-ro") {
		t.Fatalf("dlq show as a reader: %q, %v", out, err)
	}
}
