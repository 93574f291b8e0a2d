package sqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/sqlstore"
	"github.com/workrouter/workrouter/fencehttp/storetest"
	"github.com/workrouter/workrouter/internal/testpg"
)

// resource is the suite's resource in the store's own database: a table of
// the keys written, without a unique constraint, so that a key written
// twice shows twice.
func resource(t *testing.T, db *sql.DB, table string) storetest.Resource {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE `+table+` (idem_key TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return storetest.Resource{
		Transactional: true,
		Write: func(ctx context.Context, key string) error {
			tx := sqlstore.TxFrom(ctx)
			if tx == nil {
				return sql.ErrTxDone
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (idem_key) VALUES ('`+key+`')`)
			return err
		},
		Written: func(t testing.TB) map[string]int {
			rows, err := db.QueryContext(context.Background(), `SELECT idem_key, count(*) FROM `+table+` GROUP BY idem_key`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			out := map[string]int{}
			for rows.Next() {
				var k string
				var n int
				if err := rows.Scan(&k, &n); err != nil {
					t.Fatal(err)
				}
				out[k] = n
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		},
	}
}

// TestConformanceSQLite: the store passes the suite on SQLite, the
// handler's write in the store's transaction.
func TestConformanceSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (fencehttp.Store, storetest.Resource) {
		db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "resource.db")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s, err := sqlstore.New(t.Context(), sqlstore.Config{DB: db, Dialect: sqlstore.SQLite})
		if err != nil {
			t.Fatal(err)
		}
		return s, resource(t, db, "effects")
	})
}

// TestConformancePostgreSQL: the store passes the suite on PostgreSQL,
// each subtest in tables of its own.
func TestConformancePostgreSQL(t *testing.T) {
	dsn := testpg.DSN(t)
	storetest.Run(t, func(t *testing.T) (fencehttp.Store, storetest.Resource) {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		var b [6]byte
		_, _ = rand.Read(b[:])
		prefix := "fh_" + hex.EncodeToString(b[:])
		t.Cleanup(func() { dropTables(t, db, prefix, "_tokens", "_results", "_resets", "_effects") })
		s, err := sqlstore.New(t.Context(), sqlstore.Config{DB: db, Dialect: sqlstore.PostgreSQL, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s, resource(t, db, prefix+"_effects")
	})
}

// TestNewAddsTheFloorToAnOldTable: a tokens table made by a version
// without resets (no pin_floor column) gains the column from New, its
// rows unpinned (-1), and keeps fencing: the stored token still refuses
// an older one, and the scope can be reset. New with NoCreate refuses
// such a table (ErrSchema) and creates nothing in an empty database.
func TestNewAddsTheFloorToAnOldTable(t *testing.T) {
	ctx := t.Context()
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "old.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, ddl := range []string{
		`CREATE TABLE fencehttp_tokens (grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL,
			epoch INTEGER NOT NULL, member TEXT NOT NULL, PRIMARY KEY (grp, topic, part))`,
		`CREATE TABLE fencehttp_results (grp TEXT NOT NULL, idem_key TEXT NOT NULL,
			status INTEGER NOT NULL, header TEXT NOT NULL, body BLOB NOT NULL, PRIMARY KEY (grp, idem_key))`,
		`INSERT INTO fencehttp_tokens VALUES ('payments', 'charges', 0, 9, 'old')`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sqlstore.New(ctx, sqlstore.Config{DB: db, Dialect: sqlstore.SQLite, NoCreate: true}); !errors.Is(err, sqlstore.ErrSchema) {
		t.Fatalf("NoCreate on a table without pin_floor: %v, want ErrSchema", err)
	}
	s, err := sqlstore.New(ctx, sqlstore.Config{DB: db, Dialect: sqlstore.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	var floor int
	if err := db.QueryRowContext(ctx, `SELECT pin_floor FROM fencehttp_tokens`).Scan(&floor); err != nil || floor != -1 {
		t.Fatalf("the old row's pin_floor: %d, %v; want -1", floor, err)
	}
	old := tok(0, 9, "old")
	st, err := s.State(ctx, old.Scope())
	if err != nil || st != (fencehttp.ScopeState{Scope: old.Scope(), Token: old, Floor: fencehttp.NoFloor}) {
		t.Fatalf("state of the old row: %+v, %v", st, err)
	}
	var fe *fencehttp.FencedError
	if _, _, err := s.Begin(ctx, tok(0, 2, "new"), "k"); !errors.As(err, &fe) || fe.Pinned {
		t.Fatalf("an older token against the migrated row: %v, want an unpinned refusal", err)
	}
	if _, err := s.ResetScope(ctx, fencehttp.ResetRequest{Scope: old.Scope(), Expect: st, To: tok(0, 2, "new"), Floor: 9, Reason: "r"}); err != nil {
		t.Fatalf("reset of the migrated row: %v", err)
	}
	// And New again (every start of the service) changes nothing more.
	if _, err := sqlstore.New(ctx, sqlstore.Config{DB: db, Dialect: sqlstore.SQLite, NoCreate: true}); err != nil {
		t.Fatalf("NoCreate on the migrated tables: %v", err)
	}

	empty, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "empty.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if _, err := sqlstore.New(ctx, sqlstore.Config{DB: empty, Dialect: sqlstore.SQLite, NoCreate: true}); !errors.Is(err, sqlstore.ErrSchema) {
		t.Fatalf("NoCreate on an empty database: %v, want ErrSchema", err)
	}
	var n int
	if err := empty.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("NoCreate left %d objects in an empty database (%v)", n, err)
	}
}

// TestNewAddsTheFloorToAnOldTablePostgreSQL: the same migration on
// PostgreSQL.
func TestNewAddsTheFloorToAnOldTablePostgreSQL(t *testing.T) {
	ctx := t.Context()
	db, err := sql.Open("pgx", testpg.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after the tables are dropped
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "fh_" + hex.EncodeToString(b[:])
	t.Cleanup(func() { dropTables(t, db, prefix, "_tokens", "_results", "_resets") })
	for _, ddl := range []string{
		`CREATE TABLE ` + prefix + `_tokens (grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL,
			epoch INTEGER NOT NULL, member TEXT NOT NULL, PRIMARY KEY (grp, topic, part))`,
		`CREATE TABLE ` + prefix + `_results (grp TEXT NOT NULL, idem_key TEXT NOT NULL,
			status INTEGER NOT NULL, header TEXT NOT NULL, body BYTEA NOT NULL, PRIMARY KEY (grp, idem_key))`,
		`INSERT INTO ` + prefix + `_tokens VALUES ('payments', 'charges', 0, 9, 'old')`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	cfg := sqlstore.Config{DB: db, Dialect: sqlstore.PostgreSQL, Prefix: prefix, NoCreate: true}
	if _, err := sqlstore.New(ctx, cfg); !errors.Is(err, sqlstore.ErrSchema) {
		t.Fatalf("NoCreate on a table without pin_floor: %v, want ErrSchema", err)
	}
	cfg.NoCreate = false
	s, err := sqlstore.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	old := tok(0, 9, "old")
	if st, err := s.State(ctx, old.Scope()); err != nil || st != (fencehttp.ScopeState{Scope: old.Scope(), Token: old, Floor: fencehttp.NoFloor}) {
		t.Fatalf("state of the old row: %+v, %v", st, err)
	}
	if _, _, err := s.Begin(ctx, tok(0, 2, "new"), "k"); !errors.Is(err, fencehttp.ErrFenced) {
		t.Fatalf("an older token against the migrated row: %v, want refused", err)
	}
}

// dropTables drops the tables prefix+suffix of db, failing t if it cannot:
// a table left behind is left in the test database's schema for good.
func dropTables(t *testing.T, db *sql.DB, prefix string, suffixes ...string) {
	t.Helper()
	for _, sfx := range suffixes {
		if _, err := db.ExecContext(context.Background(), `DROP TABLE IF EXISTS `+prefix+sfx); err != nil {
			t.Errorf("dropping %s%s: %v", prefix, sfx, err)
		}
	}
}

// tok returns a token of partition part at epoch, held by member.
func tok(part, epoch int32, member string) epochs.Token {
	return epochs.Token{Group: "payments", Topic: "charges", Partition: part, Epoch: epoch, Member: member}
}
