package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/sinktest"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// kvDDL is the table the harness and the other tests write through effects.
const kvDDL = `CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT NOT NULL)`

// execer is what put needs: a *sqlite.Tx inside Apply, a *sql.Tx in the
// unfenced benchmark baseline.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// put upserts k=v through tx.
func put(ctx context.Context, tx execer, k, v string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, k, v)
	return err
}

// openAt opens a sink on path with the kv table and registers its Close.
func openAt(t testing.TB, path string) *sqlite.Sink {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if _, err := s.DB().Exec(kvDDL); err != nil {
		t.Fatalf("create kv: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	var files sync.Map // *sqlite.Sink -> its file
	sinktest.Run(t, sinktest.Harness[*sqlite.Tx]{
		Open: func(t testing.TB) sink.Sink[*sqlite.Tx] {
			path := filepath.Join(t.TempDir(), "sink.db")
			s := openAt(t, path)
			files.Store(s, path)
			return s
		},
		Reopen: func(t testing.TB, old sink.Sink[*sqlite.Tx]) sink.Sink[*sqlite.Tx] {
			v, ok := files.Load(old)
			if !ok {
				t.Fatalf("Reopen of a sink the harness did not open")
			}
			path := v.(string)
			if err := old.(*sqlite.Sink).Close(); err != nil {
				t.Fatalf("Close before reopen: %v", err)
			}
			s := openAt(t, path)
			files.Store(s, path)
			return s
		},
		Put: func(ctx context.Context, tx *sqlite.Tx, k, v string) error { return put(ctx, tx, k, v) },
		// An Apply holds SQLite's write lock from BEGIN IMMEDIATE to COMMIT.
		WritesSerialized: true,
		RequireGaps:      true,
		Get: func(ctx context.Context, s sink.Sink[*sqlite.Tx], key string) (string, bool, error) {
			var v string
			err := s.(*sqlite.Sink).DB().QueryRowContext(ctx, `SELECT v FROM kv WHERE k = ?`, key).Scan(&v)
			if errors.Is(err, sql.ErrNoRows) {
				return "", false, nil
			}
			return v, err == nil, err
		},
	})
}

func tok(group string, part int32, epoch int32, member string) epochs.Token {
	return epochs.Token{Group: group, Topic: "orders", Partition: part, Epoch: epoch, Member: member}
}

func TestHistoryClaimsAndResets(t *testing.T) {
	ctx := t.Context()
	s := openAt(t, filepath.Join(t.TempDir(), "h.db"))
	a, b, c := tok("g", 0, 1, "a"), tok("g", 0, 2, "b"), tok("g", 0, 1, "c")
	other := tok("g", 1, 7, "x")
	mustClaim := func(tk epochs.Token, want int64) {
		t.Helper()
		if next, err := nextOf(s.Claim(ctx, tk, sink.Observed{})); err != nil || next != want {
			t.Fatalf("Claim(%s) = %d, %v; want %d, nil", tk, next, err, want)
		}
	}
	mustClaim(a, 0)
	mustClaim(other, 0)
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0, 1, 2}}, func(ctx context.Context, tx *sqlite.Tx, i int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	mustClaim(a, 3) // idempotent re-claim: recorded too
	mustClaim(b, 3)
	if _, err := s.Claim(ctx, a, sink.Observed{}); !errors.Is(err, sink.ErrFenced) { // refused: not in history
		t.Fatalf("stale claim: %v, want fenced", err)
	}
	seen := sink.Fence{Scope: a.Scope(), Holder: b, NextOffset: 3}
	if _, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: a.Scope(), Expect: seen}); !errors.Is(err, sqlite.ErrNoReason) {
		t.Fatalf("ResetFence without reason: %v, want ErrNoReason", err)
	}
	before, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: a.Scope(), Expect: seen, Reason: "group recreated by ops ticket 42"})
	if err != nil {
		t.Fatal(err)
	}
	if before.Holder != b || before.NextOffset != 3 {
		t.Fatalf("ResetFence before = %+v", before)
	}
	if _, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: a.Scope(), Expect: sink.Fence{Scope: a.Scope(), NextOffset: 3},
		Reason: "second reset, no holder"}); err != nil {
		t.Fatal(err)
	}
	if next, err := claimProven(ctx, s, c); err != nil || next != 3 {
		t.Fatalf("proven claim after the resets = %d, %v", next, err)
	}

	h, err := s.History(ctx, a.Scope())
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		kind   string
		tok    epochs.Token
		next   int64
		reason string
		proven bool
	}
	want := []row{
		{"claim", a, 0, "", false},
		{"claim", a, 3, "", false},
		{"claim", b, 3, "", false},
		{"reset", b, 3, "group recreated by ops ticket 42", false},
		{"reset", epochs.Token{}, 3, "second reset, no holder", false},
		{"claim", c, 3, "", true},
	}
	if len(h) != len(want) {
		t.Fatalf("History has %d entries, want %d: %+v", len(h), len(want), h)
	}
	for i, e := range h {
		w := want[i]
		if e.Kind != w.kind || e.Token != w.tok || e.NextOffset != w.next || e.Reason != w.reason || e.Proven != w.proven {
			t.Errorf("History[%d] = %+v, want %+v", i, e, w)
		}
		if i > 0 && e.Seq <= h[i-1].Seq {
			t.Errorf("History[%d].Seq = %d not after %d", i, e.Seq, h[i-1].Seq)
		}
		if e.At.IsZero() || (i > 0 && e.At.Before(h[i-1].At)) {
			t.Errorf("History[%d].At = %v", i, e.At)
		}
	}
	if h, err := s.History(ctx, other.Scope()); err != nil || len(h) != 1 || h[0].Token != other {
		t.Fatalf("History(other) = %+v, %v", h, err)
	}
	if h, err := s.History(ctx, epochs.Scope{Group: "none", Topic: "t"}); err != nil || len(h) != 0 {
		t.Fatalf("History(unknown) = %+v, %v", h, err)
	}
	if _, err := s.History(ctx, epochs.Scope{}); !errors.Is(err, epochs.ErrInvalidToken) {
		t.Fatalf("History(invalid scope): %v", err)
	}
}

func TestOpenBadInput(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()

	for name, cfg := range map[string]sqlite.Config{
		"empty path":        {},
		"memory":            {Path: ":memory:"},
		"uri":               {Path: "file:x.db?mode=memory"},
		"question mark":     {Path: filepath.Join(dir, "a?b.db")},
		"prefix dash":       {Path: filepath.Join(dir, "p.db"), Prefix: "work-router"},
		"prefix digit":      {Path: filepath.Join(dir, "p.db"), Prefix: "1wr"},
		"prefix injection":  {Path: filepath.Join(dir, "p.db"), Prefix: "x; DROP TABLE kv"},
		"negative busy":     {Path: filepath.Join(dir, "p.db"), BusyTimeout: -1},
		"missing directory": {Path: filepath.Join(dir, "no", "such", "dir", "x.db")},
	} {
		s, err := sqlite.Open(ctx, cfg)
		if err == nil {
			s.Close()
			t.Errorf("%s: Open(%+v) succeeded", name, cfg)
			continue
		}
		if !errors.Is(err, sqlite.ErrConfig) {
			t.Errorf("%s: Open error %v does not match ErrConfig", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "p.db")); err == nil {
		t.Errorf("an invalid config created the database file")
	}

	// A file that is not a database.
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("this is not an SQLite database\n", 200)), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := sqlite.Open(ctx, sqlite.Config{Path: junk}); err == nil {
		s.Close()
		t.Errorf("Open of a text file succeeded")
	} else if !errors.Is(err, sqlite.ErrConfig) || !strings.Contains(err.Error(), "not an SQLite database") {
		t.Errorf("Open of a text file: %v, want ErrConfig saying it is not an SQLite database", err)
	} else {
		t.Logf("not a database: %v", err)
	}
}

// tablesOf lists the tables of the database at path.
func tablesOf(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

// execAt runs statements on the database at path with a plain connection.
func execAt(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func TestOpenConflictingSchema(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()

	t.Run("fences with other columns", func(t *testing.T) {
		path := filepath.Join(dir, "conflict.db")
		execAt(t, path, `CREATE TABLE workrouter_fences (id INTEGER PRIMARY KEY, owner TEXT)`)
		s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
		if err == nil {
			s.Close()
			t.Fatal("Open over a conflicting workrouter_fences succeeded")
		}
		if !errors.Is(err, sqlite.ErrSchema) || !strings.Contains(err.Error(), "workrouter_fences") {
			t.Fatalf("Open error %v, want ErrSchema naming workrouter_fences", err)
		}
		t.Logf("conflict: %v", err)
		if got := tablesOf(t, path); len(got) != 1 || got[0] != "workrouter_fences" {
			t.Fatalf("tables after failed Open = %v, want only the pre-existing workrouter_fences", got)
		}
		// Another prefix coexists with the foreign table.
		s, err = sqlite.Open(ctx, sqlite.Config{Path: path, Prefix: "wr2"})
		if err != nil {
			t.Fatalf("Open with another prefix: %v", err)
		}
		s.Close()
	})

	t.Run("history is a view", func(t *testing.T) {
		path := filepath.Join(dir, "view.db")
		execAt(t, path, `CREATE VIEW app_history AS SELECT 1 AS x`)
		_, err := sqlite.Open(ctx, sqlite.Config{Path: path, Prefix: "app"})
		if !errors.Is(err, sqlite.ErrSchema) || !strings.Contains(err.Error(), "app_history") {
			t.Fatalf("Open error %v, want ErrSchema naming app_history", err)
		}
		if got := tablesOf(t, path); len(got) != 0 {
			t.Fatalf("tables after failed Open = %v, want none", got)
		}
	})

	t.Run("other version", func(t *testing.T) {
		path := filepath.Join(dir, "version.db")
		s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		execAt(t, path, fmt.Sprintf(`UPDATE workrouter_schema SET version = %d`, sqlite.SchemaVersion+1))
		_, err = sqlite.Open(ctx, sqlite.Config{Path: path})
		if !errors.Is(err, sqlite.ErrSchema) || !strings.Contains(err.Error(), "workrouter_schema") {
			t.Fatalf("Open error %v, want ErrSchema naming workrouter_schema", err)
		}
		t.Logf("version: %v", err)
	})

	t.Run("incomplete", func(t *testing.T) {
		path := filepath.Join(dir, "incomplete.db")
		s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		execAt(t, path, `DROP TABLE workrouter_history`)
		_, err = sqlite.Open(ctx, sqlite.Config{Path: path})
		if !errors.Is(err, sqlite.ErrSchema) || !strings.Contains(err.Error(), "workrouter_history") {
			t.Fatalf("Open error %v, want ErrSchema naming workrouter_history", err)
		}
	})

	t.Run("reopen and two prefixes", func(t *testing.T) {
		path := filepath.Join(dir, "ok.db")
		for range 2 {
			for _, p := range []string{"", "Other_1"} {
				s, err := sqlite.Open(ctx, sqlite.Config{Path: path, Prefix: p})
				if err != nil {
					t.Fatalf("Open(prefix %q): %v", p, err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil { // idempotent
					t.Fatalf("second Close: %v", err)
				}
			}
		}
		want := []string{"Other_1_command_ids", "Other_1_dead_letters", "Other_1_dl_audit", "Other_1_done_spans", "Other_1_fences", "Other_1_history", "Other_1_schema",
			"workrouter_command_ids", "workrouter_dead_letters", "workrouter_dl_audit", "workrouter_done_spans", "workrouter_fences", "workrouter_history", "workrouter_schema"}
		if got := tablesOf(t, path); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("tables = %v, want %v", got, want)
		}
	})
}

func TestPragmas(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "p.db"))
	for pragma, want := range map[string]string{
		"journal_mode": "wal",
		"synchronous":  "2", // FULL
		"foreign_keys": "1",
		"busy_timeout": "30000",
	} {
		var got string
		if err := s.DB().QueryRow("PRAGMA " + pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
}

// TestHandlerCannotEndTheTransaction: the Tx an effect receives refuses
// Commit and Rollback (the fence commits with the effects), and the batch
// still commits as one unit.
func TestHandlerCannotEndTheTransaction(t *testing.T) {
	ctx := t.Context()
	s := openAt(t, filepath.Join(t.TempDir(), "tx.db"))
	tk := tok("g", 0, 1, "m")
	if _, err := s.Claim(ctx, tk, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	var commitErr, rollbackErr error
	res, err := s.Apply(ctx, tk, sink.Batch{Offsets: []int64{0, 1}}, func(ctx context.Context, tx *sqlite.Tx, i int) error {
		if err := put(ctx, tx, "t"+strconv.Itoa(i), "v"); err != nil {
			return err
		}
		commitErr, rollbackErr = tx.Commit(), tx.Rollback()
		return nil
	})
	if err != nil || res.NextOffset != 2 {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	if !errors.Is(commitErr, sqlite.ErrTxControl) || !errors.Is(rollbackErr, sqlite.ErrTxControl) {
		t.Fatalf("Commit = %v, Rollback = %v; want both refused with ErrTxControl", commitErr, rollbackErr)
	}
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM kv WHERE k IN ('t0', 't1')`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows after the batch = %d, %v; want both", n, err)
	}
}

func TestClosed(t *testing.T) {
	ctx := t.Context()
	s := openAt(t, filepath.Join(t.TempDir(), "u.db"))
	s.Close()
	if _, err := s.Claim(ctx, tok("g", 0, 1, "m"), sink.Observed{}); err == nil {
		t.Fatal("Claim after Close succeeded")
	}
}

// TestBusy holds SQLite's write lock from another connection: a writing
// call waits up to BusyTimeout, then fails with ErrBusy (transient, not
// fenced), or with the ctx's error if that ends first; reads go on.
func TestBusy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "busy.db")
	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: path, BusyTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tk := tok("g", 0, 1, "m")
	if _, err := s.Claim(t.Context(), tk, sink.Observed{}); err != nil {
		t.Fatal(err)
	}

	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_, err = s.Claim(t.Context(), tk, sink.Observed{})
	if !errors.Is(err, sqlite.ErrBusy) || errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Claim under a held write lock: %v, want ErrBusy", err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Fatalf("Claim gave up after %v, before the busy timeout", waited)
	}
	t.Logf("busy: %v", err)
	_, err = s.Apply(t.Context(), tk, sink.Batch{Offsets: []int64{0}}, func(context.Context, *sqlite.Tx, int) error {
		t.Error("effect ran without the write lock")
		return nil
	})
	if !errors.Is(err, sqlite.ErrBusy) {
		t.Fatalf("Apply under a held write lock: %v, want ErrBusy", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Claim(ctx, tk, sink.Observed{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim with a short ctx under a held write lock: %v, want context.DeadlineExceeded", err)
	}
	// Readers are not blocked in WAL mode.
	if f, err := s.Fences(t.Context()); err != nil || len(f) != 1 {
		t.Fatalf("Fences under a held write lock: %+v, %v", f, err)
	}

	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if next, err := nextOf(s.Claim(t.Context(), tk, sink.Observed{})); err != nil || next != 0 {
		t.Fatalf("Claim after the lock is released: %d, %v", next, err)
	}
}

// v1Schema is the sink's schema version 1, as Open created it before the
// log identity and the dead letters.
const v1Schema = `
CREATE TABLE workrouter_fences (grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL, epoch INTEGER NOT NULL,
	member TEXT NOT NULL, next_offset INTEGER NOT NULL, PRIMARY KEY (grp, topic, part)) WITHOUT ROWID;
CREATE TABLE workrouter_history (seq INTEGER PRIMARY KEY AUTOINCREMENT, grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL,
	kind TEXT NOT NULL CHECK (kind IN ('claim', 'reset')), epoch INTEGER NOT NULL, member TEXT NOT NULL, next_offset INTEGER NOT NULL,
	reason TEXT NOT NULL, at TEXT NOT NULL);
CREATE TABLE workrouter_schema (version INTEGER NOT NULL);
CREATE INDEX workrouter_history_scope ON workrouter_history (grp, topic, part, seq);
INSERT INTO workrouter_schema VALUES (1);
INSERT INTO workrouter_fences VALUES ('g', 'orders', 0, 7, 'm-7', 42);
INSERT INTO workrouter_history (grp, topic, part, kind, epoch, member, next_offset, reason, at)
	VALUES ('g', 'orders', 0, 'claim', 7, 'm-7', 40, '', '2026-11-01T00:00:00Z');
`

// TestMigrateFromVersion1: Open migrates a version 1 database in place,
// keeping its fences and history; the fence row has no topic ID and adopts
// the one its next claim observes.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v1.db")
	execAt(t, path, v1Schema)
	s := openAt(t, path)
	fences, err := s.Fences(ctx)
	if err != nil || len(fences) != 1 || fences[0].NextOffset != 42 || fences[0].Holder.Epoch != 7 || fences[0].TopicID != "" {
		t.Fatalf("fences after migration = %+v, %v", fences, err)
	}
	var version int
	if err := s.DB().QueryRowContext(ctx, `SELECT version FROM workrouter_schema`).Scan(&version); err != nil || version != sqlite.SchemaVersion {
		t.Fatalf("schema version after migration = %d, %v", version, err)
	}
	b := tok("g", 0, 8, "m-8")
	if next, err := nextOf(s.Claim(ctx, b, sink.Observed{TopicID: "topic-1", LogStart: 0, LogEnd: 50})); err != nil || next != 42 {
		t.Fatalf("first claim after migration = %d, %v", next, err)
	}
	if fs, _ := s.Fences(ctx); fs[0].TopicID != "topic-1" {
		t.Fatalf("the migrated row did not adopt the topic ID: %+v", fs[0])
	}
	h, err := s.History(ctx, b.Scope())
	if err != nil || len(h) != 2 || h[0].NextOffset != 40 || h[1].TopicID != "topic-1" {
		t.Fatalf("history after migration = %+v, %v", h, err)
	}
	// The dead letters work on the migrated database, and a second Open
	// finds the current schema.
	if _, err := s.DeadLetter(ctx, b, sink.DeadRecord{Offset: 42, Reason: "undecodable"}); err != nil {
		t.Fatal(err)
	}
	// So does the deduplication.
	noop := func(context.Context, *sqlite.Tx, int) error { return nil }
	if res, err := s.Apply(ctx, b, sink.Batch{Offsets: []int64{43, 44}, IDs: []string{"c", "c"}}, noop); err != nil || res.Applied != 1 || len(res.Duplicates) != 1 {
		t.Fatalf("an Apply with IDs after migration = %+v, %v", res, err)
	}
	s.Close()
	s2 := openAt(t, path)
	if dl, err := s2.DeadLetters(ctx, dlq.Filter{}); err != nil || len(dl) != 1 || dl[0].Record.TopicID != "topic-1" {
		t.Fatalf("dead letters after reopen = %+v, %v", dl, err)
	}
}

// TestMigrateFromVersion3: Open migrates a version 3 database (version 4
// without the command IDs table and the fences' ids_version and
// duplicates) in place, keeping its fences, and the command IDs work at
// once, the duplicates counted; a read-only Open refuses to migrate it.
func TestMigrateFromVersion3(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v3.db")
	s := openAt(t, path)
	a := tok("g", 0, 3, "m-3")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0, 1}}, func(context.Context, *sqlite.Tx, int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	execAt(t, path, dropV5...)
	execAt(t, path, `DROP TABLE workrouter_command_ids`, `ALTER TABLE workrouter_fences DROP COLUMN ids_version`, `ALTER TABLE workrouter_fences DROP COLUMN duplicates`, `UPDATE workrouter_schema SET version = 3`)

	if _, err := sqlite.Open(ctx, sqlite.Config{Path: path, ReadOnly: true}); !errors.Is(err, sqlite.ErrSchema) || !strings.Contains(err.Error(), "version 3") {
		t.Fatalf("read-only Open of a version 3 database: %v, want ErrSchema naming version 3", err)
	}
	s = openAt(t, path)
	var version int
	if err := s.DB().QueryRowContext(ctx, `SELECT version FROM workrouter_schema`).Scan(&version); err != nil || version != sqlite.SchemaVersion {
		t.Fatalf("schema version after migration = %d, %v", version, err)
	}
	if fs, err := s.Fences(ctx); err != nil || len(fs) != 1 || fs[0].Holder != a || fs[0].NextOffset != 2 {
		t.Fatalf("fences after migration = %+v, %v", fs, err)
	}
	noop := func(context.Context, *sqlite.Tx, int) error { return nil }
	if res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{2, 3}, IDs: []string{"x", "y"}}, noop); err != nil || res.Applied != 2 {
		t.Fatalf("an Apply with IDs after migration = %+v, %v", res, err)
	}
	if res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{4}, IDs: []string{"x"}}, noop); err != nil || res.Applied != 0 || len(res.Duplicates) != 1 {
		t.Fatalf("an Apply with IDs of a duplicate after migration = %+v, %v", res, err)
	}
	if fs, err := s.Fences(ctx); err != nil || len(fs) != 1 || fs[0].Duplicates != 1 {
		t.Fatalf("fences after a duplicate = %+v, %v, want 1 duplicate counted", fs, err)
	}
}

// dropV6 turns a version 6 database into a version 5 one: the fences with
// a proof floor, the history without proven.
var dropV6 = []string{`ALTER TABLE workrouter_fences ADD COLUMN proof_below INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE workrouter_history DROP COLUMN proven`, `UPDATE workrouter_schema SET version = 5`}

// dropV5 turns a version 6 database into a version 4 one: dropV6, then
// no done spans table, no spans column, no history done column.
var dropV5 = append(slices.Clone(dropV6), `DROP TABLE workrouter_done_spans`, `ALTER TABLE workrouter_fences DROP COLUMN spans`,
	`ALTER TABLE workrouter_history DROP COLUMN done`, `UPDATE workrouter_schema SET version = 4`)

// TestMigrateFromVersion4: Open migrates a version 4 database (version 5
// without the done spans table and the fences' spans count) in place,
// keeping its fences and command IDs, and gapped applies work at once; a
// read-only Open refuses to migrate it.
func TestMigrateFromVersion4(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v4.db")
	s := openAt(t, path)
	a := tok("g", 0, 3, "m-3")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *sqlite.Tx, int) error { return nil }
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0, 1}, IDs: []string{"x", "y"}}, noop); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	execAt(t, path, dropV5...)
	if _, err := sqlite.Open(ctx, sqlite.Config{Path: path, ReadOnly: true}); !errors.Is(err, sqlite.ErrSchema) || !strings.Contains(err.Error(), "version 4") {
		t.Fatalf("read-only Open of a version 4 database: %v, want ErrSchema naming version 4", err)
	}
	s = openAt(t, path)
	var version int
	if err := s.DB().QueryRowContext(ctx, `SELECT version FROM workrouter_schema`).Scan(&version); err != nil || version != sqlite.SchemaVersion {
		t.Fatalf("schema version after migration = %d, %v", version, err)
	}
	if res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{3, 5}, From: []int64{3, 5}, IDs: []string{"x", "z"}}, noop); err != nil || res.Applied != 1 || len(res.Duplicates) != 1 {
		t.Fatalf("a lane's Apply after migration = %+v, %v; want z applied, x a duplicate of the migrated IDs", res, err)
	}
	if fs, err := s.Fences(ctx); err != nil || len(fs) != 1 || fs[0].NextOffset != 2 || !slices.Equal(fs[0].Done, []sink.Span{{From: 3, To: 4}, {From: 5, To: 6}}) {
		t.Fatalf("fences after a gapped apply = %+v, %v", fs, err)
	}
}

// TestDedupeWindowConfig: Config.DedupeWindow sets the horizon (zero is
// the default, negative refused), and the prune keeps the table at the
// window's IDs.
func TestDedupeWindowConfig(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	if _, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "neg.db"), DedupeWindow: -1}); !errors.Is(err, sqlite.ErrConfig) {
		t.Fatalf("Open with a negative DedupeWindow: %v, want ErrConfig", err)
	}
	s := openAt(t, filepath.Join(dir, "default.db"))
	if w := s.Features().DedupeWindow; w != int64(100_000) {
		t.Fatalf("default DedupeWindow = %d, want %d", w, int64(100_000))
	}
	s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "small.db"), DedupeWindow: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := tok("g", 0, 1, "m")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *sqlite.Tx, int) error { return nil }
	for b := range int64(10) {
		offs, ids := make([]int64, 7), make([]string, 7)
		for i := range offs {
			offs[i] = b*7 + int64(i)
			ids[i] = "id-" + strconv.FormatInt(offs[i], 10)
		}
		if _, err := s.Apply(ctx, a, sink.Batch{Offsets: offs, IDs: ids}, noop); err != nil {
			t.Fatal(err)
		}
	}
	// NextOffset is 70, the horizon 60: the rows (one per batch) of
	// offsets 56..62 and 63..69 are kept, no more.
	var n, low int64
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*), min(first_off) FROM workrouter_command_ids`).Scan(&n, &low); err != nil || n != 2 || low != 56 {
		t.Fatalf("command ID rows kept: %d from offset %d (%v), want 2 from 56", n, low, err)
	}
	// What is inside the window is a duplicate, what is outside is not.
	res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{70, 71}, IDs: []string{"id-60", "id-59"}}, noop)
	if err != nil || !slices.Equal(res.Duplicates, []int{0}) || res.Applied != 1 {
		t.Fatalf("an Apply with IDs of id-60 and id-59 at 70 and 71 = %+v, %v; want id-60 a duplicate, id-59 applied", res, err)
	}
	// The prune and the load are index ranges, never a scan.
	for q, want := range map[string]string{
		`DELETE FROM workrouter_command_ids WHERE grp = 'g' AND topic = 'orders' AND part = 0 AND last_off < 5`:         "workrouter_command_ids_scope (grp=? AND topic=? AND part=? AND last_off<?)",
		`SELECT first_off, last_off, ids FROM workrouter_command_ids WHERE grp = 'g' AND topic = 'orders' AND part = 0`: "workrouter_command_ids_scope (grp=? AND topic=? AND part=?)",
	} {
		var plan []string
		rows, err := s.DB().QueryContext(ctx, "EXPLAIN QUERY PLAN "+q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if len(plan) != 1 || !strings.Contains(plan[0], want) || strings.HasPrefix(plan[0], "SCAN") {
			t.Errorf("plan of %s: %q, want a SEARCH using %s", q, plan, want)
		}
	}
}

// TestMigrateFromVersion2: Open migrates a version 2 database (version 3
// without the fences' proof_below) in place, requiring a proof for good
// of each scope its history shows reset, so that a scope reset before the
// upgrade still refuses its previous incarnation; a read-only Open refuses
// to migrate it.
func TestMigrateFromVersion2(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v2.db")
	s := openAt(t, path)
	old, fresh, zombie := tok("g", 0, 10, "old-10"), tok("g", 0, 1, "new-1"), tok("g", 0, 9, "old-9")
	other := tok("g", 1, 4, "m-4")
	for _, c := range []epochs.Token{old, other} {
		if _, err := s.Claim(ctx, c, sink.Observed{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: old.Scope(), Expect: sink.Fence{Scope: old.Scope(), Holder: old}, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := claimProven(ctx, s, fresh); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	execAt(t, path, dropV5...)
	// A version 2 claim cleared the requirement the reset set.
	execAt(t, path, `DROP TABLE workrouter_command_ids`, `ALTER TABLE workrouter_fences DROP COLUMN ids_version`, `ALTER TABLE workrouter_fences DROP COLUMN duplicates`,
		`ALTER TABLE workrouter_fences DROP COLUMN proof_below`, `UPDATE workrouter_fences SET proof_required = 0`, `UPDATE workrouter_schema SET version = 2`)

	if _, err := sqlite.Open(ctx, sqlite.Config{Path: path, ReadOnly: true}); !errors.Is(err, sqlite.ErrSchema) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("read-only Open of a version 2 database: %v, want ErrSchema naming version 2", err)
	}
	s = openAt(t, path)
	fences, err := s.Fences(ctx)
	if err != nil || len(fences) != 2 {
		t.Fatalf("fences after migration = %+v, %v", fences, err)
	}
	if f := fences[0]; f.Holder != fresh || !f.ProofRequired {
		t.Fatalf("reset scope after migration = %+v, want holder %s, a proof required", f, fresh)
	}
	if f := fences[1]; f.Holder != other || f.ProofRequired {
		t.Fatalf("scope never reset after migration = %+v, want holder %s, no proof required", f, other)
	}
	for _, z := range []epochs.Token{zombie, tok("g", 0, 40, "old-40")} {
		if _, err := s.Claim(ctx, z, sink.Observed{}); !errors.Is(err, sink.ErrProofRequired) {
			t.Fatalf("unproven claim by %s after migration: %v, want ErrProofRequired", z, err)
		}
	}
	var version int
	if err := s.DB().QueryRowContext(ctx, `SELECT version FROM workrouter_schema`).Scan(&version); err != nil || version != sqlite.SchemaVersion {
		t.Fatalf("schema version after migration = %d, %v", version, err)
	}
}

// TestMigrateFromVersion5: Open migrates a version 5 database (a proof
// floor a claim kept, a requirement a claim cleared) in place: a scope
// with a floor requires a proof of every claim for good, one without
// none, and the history rows read unproven; a read-only Open refuses to
// migrate it.
func TestMigrateFromVersion5(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v5.db")
	s := openAt(t, path)
	old, fresh, other := tok("g", 0, 10, "old-10"), tok("g", 0, 1, "new-1"), tok("g", 1, 4, "m-4")
	for _, c := range []epochs.Token{old, other} {
		if _, err := s.Claim(ctx, c, sink.Observed{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: old.Scope(), Expect: sink.Fence{Scope: old.Scope(), Holder: old}, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := claimProven(ctx, s, fresh); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What version 5 left: the floor above the cleared epoch, the
	// requirement cleared by the claim.
	execAt(t, path, dropV6...)
	execAt(t, path, `UPDATE workrouter_fences SET proof_required = 0, proof_below = CASE WHEN part = 0 THEN 11 ELSE 0 END`)
	if _, err := sqlite.Open(ctx, sqlite.Config{Path: path, ReadOnly: true}); !errors.Is(err, sqlite.ErrSchema) || !strings.Contains(err.Error(), "version 5") {
		t.Fatalf("read-only Open of a version 5 database: %v, want ErrSchema naming version 5", err)
	}
	s = openAt(t, path)
	fences, err := s.Fences(ctx)
	if err != nil || len(fences) != 2 || !fences[0].ProofRequired || fences[1].ProofRequired {
		t.Fatalf("fences after migration = %+v, %v; want a proof required of the reset scope only", fences, err)
	}
	if _, err := s.Claim(ctx, tok("g", 0, 40, "old-40"), sink.Observed{}); !errors.Is(err, sink.ErrProofRequired) {
		t.Fatalf("unproven claim at epoch 40 after migration: %v, want ErrProofRequired", err)
	}
	h, err := s.History(ctx, old.Scope())
	if err != nil || len(h) != 3 || h[2].Token != fresh || h[2].Proven {
		t.Fatalf("history after migration = %+v, %v; want the claim by %s read unproven", h, err, fresh)
	}
	if _, err := claimProven(ctx, s, tok("g", 0, 2, "new-2")); err != nil {
		t.Fatal(err)
	}
	if h, err := s.History(ctx, old.Scope()); err != nil || len(h) != 4 || !h[3].Proven {
		t.Fatalf("history after a proven claim = %+v, %v", h, err)
	}
}

// claimProven claims tok's scope as the consumer does after a reset: on
// a refusal for want of a proof it claims again with a proof made at the
// fence version the refusal names (the test stands in for the broker).
func claimProven(ctx context.Context, s *sqlite.Sink, tk epochs.Token) (int64, error) {
	next, err := nextOf(s.Claim(ctx, tk, sink.Observed{}))
	var pe *sink.ProofRequiredError
	if errors.As(err, &pe) {
		next, err = nextOf(s.Claim(ctx, tk, sink.Observed{Proof: &sink.Proof{Version: pe.Version}}))
	}
	return next, err
}

// TestDedupeTwoSinksOneFile: two Sinks (two processes) on one file apply
// the same scope in turn, as a partition moving between workers does;
// each sees the IDs the other applied, although each keeps a cache of
// the scope's IDs: the cache is used only while it mirrors the fence
// row's IDs version.
func TestDedupeTwoSinksOneFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "two.db")
	s1, s2 := openAt(t, path), openAt(t, path)
	a, b := tok("g", 0, 1, "a"), tok("g", 0, 2, "b")
	noop := func(context.Context, *sqlite.Tx, int) error { return nil }
	once := func(s *sqlite.Sink, tk epochs.Token, off int64, id string) sink.Result {
		t.Helper()
		res, err := s.Apply(ctx, tk, sink.Batch{Offsets: []int64{off}, IDs: []string{id}}, noop)
		if err != nil {
			t.Fatalf("an Apply with IDs(%s, %d, %q): %v", tk, off, id, err)
		}
		return res
	}
	if _, err := s1.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	once(s1, a, 0, "x") // s1's cache now holds the scope
	if _, err := s2.Claim(ctx, b, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if res := once(s2, b, 1, "x"); len(res.Duplicates) != 1 {
		t.Fatalf("s2 applied x again: %+v", res)
	}
	once(s2, b, 2, "y")
	// The partition moves back to s1's process: its cache is stale.
	c := tok("g", 0, 3, "c")
	if _, err := s1.Claim(ctx, c, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if res := once(s1, c, 3, "y"); len(res.Duplicates) != 1 {
		t.Fatalf("s1 applied y, which s2 applied, again: %+v", res)
	}
	if res := once(s1, c, 4, "z"); res.Applied != 1 {
		t.Fatalf("s1 did not apply z: %+v", res)
	}
	if _, err := s2.Apply(ctx, b, sink.Batch{Offsets: []int64{5}, IDs: []string{"w"}}, noop); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("an Apply with IDs by the superseded s2 tenure: %v, want fenced", err)
	}
}
