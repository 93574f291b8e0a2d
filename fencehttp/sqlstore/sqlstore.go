// Package sqlstore is the fencehttp.Store that lives in the resource's own
// database, through database/sql, on PostgreSQL or SQLite: the check of
// the token, the handler's writes and the idempotency key's result are one
// transaction, which the handler reaches with [TxFrom]. A request either lands
// whole (the scope's token advanced, the write done, the result recorded)
// or not at all; a zombie's request cannot fall between a check and a
// write, because there is no gap between them.
//
// Two tables, named after Config.Prefix ("fencehttp" by default), are
// created by [New] if missing: <prefix>_tokens, one row per scope (group,
// topic, partition) with the highest token seen, and <prefix>_results,
// one row per (group, key) with the first result.
//
// The check is one conditional upsert, the first statement of the
// transaction:
//
//	INSERT INTO <prefix>_tokens … ON CONFLICT (grp, topic, part) DO UPDATE
//	SET epoch = excluded.epoch, member = excluded.member
//	WHERE <prefix>_tokens.epoch < excluded.epoch
//	   OR (<prefix>_tokens.epoch = excluded.epoch AND <prefix>_tokens.member = excluded.member)
//	RETURNING epoch
//
// No row returned means refused (epochs.Token.CanClaim's rule, in SQL).
// On PostgreSQL the upsert locks the scope's row until the transaction
// ends, so that requests of one scope run one at a time; on SQLite the
// transaction holds the database's write lock: open the database with
// _txlock=immediate and a busy timeout (see [SQLiteDSN]). The key is
// claimed by an INSERT … ON CONFLICT DO NOTHING under a savepoint taken
// after the check, so that a handler that answers 5xx is rolled back to
// it and the token's advance is kept.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
)

// Dialect is the SQL database a Store runs on.
type Dialect int

// The dialects.
const (
	PostgreSQL Dialect = iota + 1
	SQLite
)

// ErrConfig is matched by the error of [New] for an invalid [Config].
var ErrConfig = errors.New("sqlstore: invalid config")

// Config configures a Store.
type Config struct {
	// DB is the resource's database. Required.
	DB *sql.DB
	// Dialect is DB's database. Required.
	Dialect Dialect
	// Prefix names the tables, <Prefix>_tokens and <Prefix>_results: a
	// letter, then letters, digits and underscores. Default "fencehttp".
	Prefix string
}

// SQLiteDSN returns the modernc.org/sqlite data source name a Store needs
// for the file at path: WAL, a busy timeout of 10 s, and transactions
// that take the write lock when they begin (_txlock=immediate).
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate"
}

// Store is a fencehttp.Store in an SQL database. Its methods may be called
// from any goroutine.
type Store struct {
	db      *sql.DB
	dialect Dialect
	q       queries
}

type queries struct {
	claim, holder, savepoint, rollbackTo, claimKey, result, record string
}

var prefixRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,40}$`)

// New returns a Store on cfg.DB, creating its tables if they do not exist.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.DB == nil {
		return nil, fmt.Errorf("%w: DB is required", ErrConfig)
	}
	if cfg.Dialect != PostgreSQL && cfg.Dialect != SQLite {
		return nil, fmt.Errorf("%w: Dialect must be PostgreSQL or SQLite", ErrConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "fencehttp"
	}
	if !prefixRE.MatchString(cfg.Prefix) {
		return nil, fmt.Errorf("%w: Prefix %q is not an SQL identifier", ErrConfig, cfg.Prefix)
	}
	s := &Store{db: cfg.DB, dialect: cfg.Dialect}
	t, r := cfg.Prefix+"_tokens", cfg.Prefix+"_results"
	blob := "BLOB"
	if cfg.Dialect == PostgreSQL {
		blob = "BYTEA"
	}
	for _, ddl := range []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
			grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL,
			epoch INTEGER NOT NULL, member TEXT NOT NULL,
			PRIMARY KEY (grp, topic, part))`,
		`CREATE TABLE IF NOT EXISTS ` + r + ` (
			grp TEXT NOT NULL, idem_key TEXT NOT NULL,
			status INTEGER NOT NULL, header TEXT NOT NULL, body ` + blob + ` NOT NULL,
			PRIMARY KEY (grp, idem_key))`,
	} {
		if _, err := cfg.DB.ExecContext(ctx, ddl); err != nil {
			return nil, fmt.Errorf("sqlstore: creating the tables: %w", err)
		}
	}
	s.q = queries{
		claim: `INSERT INTO ` + t + ` (grp, topic, part, epoch, member) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (grp, topic, part) DO UPDATE SET epoch = excluded.epoch, member = excluded.member
			WHERE ` + t + `.epoch < excluded.epoch OR (` + t + `.epoch = excluded.epoch AND ` + t + `.member = excluded.member)
			RETURNING epoch`,
		holder:     `SELECT epoch, member FROM ` + t + ` WHERE grp = $1 AND topic = $2 AND part = $3`,
		savepoint:  `SAVEPOINT fencehttp_request`,
		rollbackTo: `ROLLBACK TO SAVEPOINT fencehttp_request`,
		claimKey: `INSERT INTO ` + r + ` (grp, idem_key, status, header, body) VALUES ($1, $2, 0, '', $3)
			ON CONFLICT (grp, idem_key) DO NOTHING`,
		result: `SELECT status, header, body FROM ` + r + ` WHERE grp = $1 AND idem_key = $2`,
		record: `UPDATE ` + r + ` SET status = $3, header = $4, body = $5 WHERE grp = $1 AND idem_key = $2`,
	}
	if cfg.Dialect == SQLite {
		for _, p := range []*string{&s.q.claim, &s.q.holder, &s.q.claimKey, &s.q.result, &s.q.record} {
			*p = strings.ReplaceAll(*p, "$", "?")
		}
	}
	return s, nil
}

type txKey struct{}

// Tx is a handler's handle on the transaction of its fenced request: the
// statement methods of *sql.Tx, without Commit and Rollback, which are the
// Guard's (it commits the handler's writes with the token's check and the
// key's result, or rolls them back). It is used by the request's goroutine.
type Tx struct{ tx *sql.Tx }

// ExecContext runs a statement in the request's transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the request's transaction.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns at most one row in the
// request's transaction.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, query, args...)
}

// TxFrom returns the transaction of the fenced request whose context ctx
// is (in a handler behind a fencehttp.Guard over a Store): the handler's
// writes through it commit with the token's check and the key's result.
// It returns nil outside such a request.
func TxFrom(ctx context.Context) *Tx {
	tx, _ := ctx.Value(txKey{}).(*Tx)
	return tx
}

// Begin implements fencehttp.Store.
func (s *Store) Begin(ctx context.Context, tok epochs.Token, key string) (u fencehttp.Unit, rec *fencehttp.Result, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlstore: begin: %w", err)
	}
	defer func() {
		if u == nil {
			if err != nil {
				_ = tx.Rollback()
			} else if cerr := tx.Commit(); cerr != nil {
				u, rec, err = nil, nil, fmt.Errorf("sqlstore: commit: %w", cerr)
			}
		}
	}()
	var epoch int32
	err = tx.QueryRowContext(ctx, s.q.claim, tok.Group, tok.Topic, tok.Partition, tok.Epoch, tok.Member).Scan(&epoch)
	if errors.Is(err, sql.ErrNoRows) {
		stored := epochs.Token{Group: tok.Group, Topic: tok.Topic, Partition: tok.Partition}
		if err := tx.QueryRowContext(ctx, s.q.holder, tok.Group, tok.Topic, tok.Partition).Scan(&stored.Epoch, &stored.Member); err != nil {
			return nil, nil, fmt.Errorf("sqlstore: reading the stored token of %s: %w", tok.Scope(), err)
		}
		return nil, nil, &fencehttp.FencedError{Stored: stored, Presented: tok}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sqlstore: checking the token of %s: %w", tok.Scope(), err)
	}
	if _, err := tx.ExecContext(ctx, s.q.savepoint); err != nil {
		return nil, nil, fmt.Errorf("sqlstore: savepoint: %w", err)
	}
	res, err := tx.ExecContext(ctx, s.q.claimKey, tok.Group, key, []byte{})
	if err != nil {
		return nil, nil, fmt.Errorf("sqlstore: claiming key %q: %w", key, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, nil, fmt.Errorf("sqlstore: claiming key %q: %w", key, err)
	} else if n == 0 {
		r := &fencehttp.Result{}
		var hdr string
		if err := tx.QueryRowContext(ctx, s.q.result, tok.Group, key).Scan(&r.Status, &hdr, &r.Body); err != nil {
			return nil, nil, fmt.Errorf("sqlstore: reading the result of key %q: %w", key, err)
		}
		if err := json.Unmarshal([]byte(hdr), &r.Header); err != nil {
			return nil, nil, fmt.Errorf("sqlstore: the recorded header of key %q: %w", key, err)
		}
		if _, err := tx.ExecContext(ctx, s.q.rollbackTo); err != nil {
			return nil, nil, fmt.Errorf("sqlstore: rollback to savepoint: %w", err)
		}
		return nil, r, nil
	}
	return &unit{s: s, tx: tx, group: tok.Group, key: key}, nil, nil
}

type unit struct {
	s          *Store
	tx         *sql.Tx
	group, key string
}

func (u *unit) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, &Tx{tx: u.tx})
}

func (u *unit) Commit(ctx context.Context, res fencehttp.Result) error {
	hdr, err := json.Marshal(res.Header)
	if err == nil && res.Header == nil {
		hdr = []byte("{}")
	}
	if err != nil {
		_ = u.tx.Rollback()
		return fmt.Errorf("sqlstore: encoding the result's header: %w", err)
	}
	body := res.Body
	if body == nil {
		body = []byte{}
	}
	if _, err := u.tx.ExecContext(ctx, u.s.q.record, u.group, u.key, res.Status, string(hdr), body); err != nil {
		_ = u.tx.Rollback()
		return fmt.Errorf("sqlstore: recording the result of key %q: %w", u.key, err)
	}
	if err := u.tx.Commit(); err != nil {
		return fmt.Errorf("sqlstore: commit: %w", err)
	}
	return nil
}

func (u *unit) Abort(ctx context.Context) error {
	if _, err := u.tx.ExecContext(ctx, u.s.q.rollbackTo); err != nil {
		_ = u.tx.Rollback()
		return fmt.Errorf("sqlstore: rollback to savepoint: %w", err)
	}
	if err := u.tx.Commit(); err != nil {
		return fmt.Errorf("sqlstore: commit of the token: %w", err)
	}
	return nil
}

var _ fencehttp.Store = (*Store)(nil)
