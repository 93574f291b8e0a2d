package sqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

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
		t.Cleanup(func() {
			for _, tb := range []string{"_tokens", "_results", "_effects"} {
				_, _ = db.ExecContext(context.Background(), `DROP TABLE IF EXISTS `+prefix+tb)
			}
		})
		s, err := sqlstore.New(t.Context(), sqlstore.Config{DB: db, Dialect: sqlstore.PostgreSQL, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s, resource(t, db, prefix+"_effects")
	})
}
