// Package sqlstore is the fencehttp.Store that lives in the resource's own
// database, through database/sql, on PostgreSQL or SQLite: the check of
// the token, the handler's writes and the idempotency key's result are one
// transaction, which the handler reaches with [TxFrom]. A request either lands
// whole (the scope's token advanced, the write done, the result recorded)
// or not at all; a zombie's request cannot fall between a check and a
// write, because there is no gap between them.
//
// Three tables, named after Config.Prefix ("fencehttp" by default), are
// created by [New] if missing: <prefix>_tokens, one row per scope (group,
// topic, partition) with the highest token seen and the floor of the
// scope's last reset (pin_floor, -1 if never reset; New adds the column
// to a table made by an earlier version), <prefix>_results, one row per
// (group, key) with the first result, and <prefix>_resets, one row per
// operator's reset ([Store.ResetScope]), never deleted.
//
// The check is one conditional upsert, the first statement of the
// transaction:
//
//	INSERT INTO <prefix>_tokens … ON CONFLICT (grp, topic, part) DO UPDATE
//	SET epoch = excluded.epoch, member = excluded.member
//	WHERE (<prefix>_tokens.epoch = excluded.epoch AND <prefix>_tokens.member = excluded.member)
//	   OR (<prefix>_tokens.epoch < excluded.epoch
//	       AND (<prefix>_tokens.epoch > <prefix>_tokens.pin_floor OR excluded.epoch > <prefix>_tokens.pin_floor))
//	RETURNING epoch
//
// No row returned means refused: fencehttp.ScopeState.Admits's rule, in
// SQL (epochs.Token.CanClaim, and while a reset pins the scope, the
// stored token or an epoch above the floor only). On PostgreSQL the upsert
// locks the scope's row until the transaction
// ends, so that requests of one scope run one at a time; on SQLite the
// transaction holds the database's write lock: open the database with
// _txlock=immediate and a busy timeout (see [SQLiteDSN]). The key is
// claimed by an INSERT … ON CONFLICT DO NOTHING under a savepoint taken
// after the check, so that a handler that answers 5xx is rolled back to
// it and the token's advance is kept. A reset is one conditional UPDATE
// of the scope's row (the compare-and-set) and the audit row, in one
// transaction: it waits for a request open on the scope.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

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

// Errors of [New]; match them with errors.Is.
var (
	// ErrConfig is matched by the error of New for an invalid [Config].
	ErrConfig = errors.New("sqlstore: invalid config")
	// ErrSchema is matched by the error of New with Config.NoCreate when
	// the store's tables are missing or lack a column of this version:
	// the database is not (yet) a store's, or its service runs an older
	// version.
	ErrSchema = errors.New("sqlstore: the store's tables are missing or out of date")
)

// Config configures a Store.
type Config struct {
	// DB is the resource's database. Required.
	DB *sql.DB
	// Dialect is DB's database. Required.
	Dialect Dialect
	// Prefix names the tables, <Prefix>_tokens, <Prefix>_results and
	// <Prefix>_resets: a letter, then letters, digits and underscores.
	// Default "fencehttp".
	Prefix string
	// NoCreate makes New create and alter nothing, and fail with
	// [ErrSchema] unless the tables exist as this version needs them (an
	// unreachable database is a connection error, not ErrSchema):
	// for admin tools, which must not make an empty store at a mistyped
	// database.
	NoCreate bool
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
	resetNew, resetCAS, audit, resets                              string
}

var prefixRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,40}$`)

// New returns a Store on cfg.DB, creating its tables if they do not exist.
// An invalid cfg fails with an error matching [ErrConfig].
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
	t, r, a := cfg.Prefix+"_tokens", cfg.Prefix+"_results", cfg.Prefix+"_resets"
	blob, serial := "BLOB", "INTEGER PRIMARY KEY AUTOINCREMENT"
	if cfg.Dialect == PostgreSQL {
		blob, serial = "BYTEA", "BIGSERIAL PRIMARY KEY"
	}
	if cfg.NoCreate {
		// A database it cannot reach is not one without the tables.
		if err := cfg.DB.PingContext(ctx); err != nil {
			return nil, fmt.Errorf("sqlstore: connecting: %w", err)
		}
	} else {
		for _, ddl := range []string{
			`CREATE TABLE IF NOT EXISTS ` + t + ` (
			grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL,
			epoch INTEGER NOT NULL, member TEXT NOT NULL, pin_floor INTEGER NOT NULL DEFAULT -1,
			PRIMARY KEY (grp, topic, part))`,
			`CREATE TABLE IF NOT EXISTS ` + r + ` (
			grp TEXT NOT NULL, idem_key TEXT NOT NULL,
			status INTEGER NOT NULL, header TEXT NOT NULL, body ` + blob + ` NOT NULL,
			PRIMARY KEY (grp, idem_key))`,
			`CREATE TABLE IF NOT EXISTS ` + a + ` (
			seq ` + serial + `, grp TEXT NOT NULL, topic TEXT NOT NULL, part INTEGER NOT NULL,
			before_epoch INTEGER NOT NULL, before_member TEXT NOT NULL, before_floor INTEGER NOT NULL,
			after_epoch INTEGER NOT NULL, after_member TEXT NOT NULL, after_floor INTEGER NOT NULL,
			reason TEXT NOT NULL, detail TEXT NOT NULL, at TEXT NOT NULL)`,
		} {
			if _, err := cfg.DB.ExecContext(ctx, ddl); err != nil {
				return nil, fmt.Errorf("sqlstore: creating the tables: %w", err)
			}
		}
		// A tokens table made by a version without resets gains the
		// floor column (-1: never reset).
		if err := probe(ctx, cfg.DB, `SELECT pin_floor FROM `+t+` WHERE 1 = 0`); err != nil {
			ddl := `ALTER TABLE ` + t + ` ADD COLUMN pin_floor INTEGER NOT NULL DEFAULT -1`
			if _, aerr := cfg.DB.ExecContext(ctx, ddl); aerr != nil && probe(ctx, cfg.DB, `SELECT pin_floor FROM `+t+` WHERE 1 = 0`) != nil {
				return nil, fmt.Errorf("sqlstore: adding column pin_floor to %s: %w", t, aerr)
			}
		}
	}
	for _, q := range []string{
		`SELECT grp, topic, part, epoch, member, pin_floor FROM ` + t + ` WHERE 1 = 0`,
		`SELECT grp, idem_key, status, header, body FROM ` + r + ` WHERE 1 = 0`,
		`SELECT seq, grp, topic, part, before_epoch, before_member, before_floor, after_epoch, after_member, after_floor, reason, detail, at FROM ` + a + ` WHERE 1 = 0`,
	} {
		if err := probe(ctx, cfg.DB, q); err != nil {
			return nil, fmt.Errorf("%w: prefix %q: %w", ErrSchema, cfg.Prefix, err)
		}
	}
	s.q = queries{
		claim: `INSERT INTO ` + t + ` (grp, topic, part, epoch, member) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (grp, topic, part) DO UPDATE SET epoch = excluded.epoch, member = excluded.member
			WHERE (` + t + `.epoch = excluded.epoch AND ` + t + `.member = excluded.member)
			   OR (` + t + `.epoch < excluded.epoch AND (` + t + `.epoch > ` + t + `.pin_floor OR excluded.epoch > ` + t + `.pin_floor))
			RETURNING epoch`,
		holder:     `SELECT epoch, member, pin_floor FROM ` + t + ` WHERE grp = $1 AND topic = $2 AND part = $3`,
		savepoint:  `SAVEPOINT fencehttp_request`,
		rollbackTo: `ROLLBACK TO SAVEPOINT fencehttp_request`,
		claimKey: `INSERT INTO ` + r + ` (grp, idem_key, status, header, body) VALUES ($1, $2, 0, '', $3)
			ON CONFLICT (grp, idem_key) DO NOTHING`,
		result: `SELECT status, header, body FROM ` + r + ` WHERE grp = $1 AND idem_key = $2`,
		record: `UPDATE ` + r + ` SET status = $3, header = $4, body = $5 WHERE grp = $1 AND idem_key = $2`,
		resetNew: `INSERT INTO ` + t + ` (grp, topic, part, epoch, member, pin_floor) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (grp, topic, part) DO NOTHING`,
		resetCAS: `UPDATE ` + t + ` SET epoch = $4, member = $5, pin_floor = $6
			WHERE grp = $1 AND topic = $2 AND part = $3 AND epoch = $7 AND member = $8 AND pin_floor = $9`,
		audit: `INSERT INTO ` + a + ` (grp, topic, part, before_epoch, before_member, before_floor, after_epoch, after_member, after_floor, reason, detail, at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		resets: `SELECT seq, before_epoch, before_member, before_floor, after_epoch, after_member, after_floor, reason, detail, at FROM ` + a + `
			WHERE grp = $1 AND topic = $2 AND part = $3 ORDER BY seq`,
	}
	if cfg.Dialect == SQLite {
		for _, p := range []*string{&s.q.claim, &s.q.holder, &s.q.claimKey, &s.q.result, &s.q.record, &s.q.resetNew, &s.q.resetCAS, &s.q.audit, &s.q.resets} {
			*p = strings.ReplaceAll(*p, "$", "?")
		}
	}
	return s, nil
}

// probe runs q, a query that returns no rows, to learn whether the
// tables and columns it names exist.
func probe(ctx context.Context, db *sql.DB, q string) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	return rows.Close()
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
		// Refused by the upsert; the state is read for the refusal's
		// message only.
		st, err := s.state(ctx, tx, tok.Scope())
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, st.Refusal(tok)
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

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// state reads scope's state through q.
func (s *Store) state(ctx context.Context, q querier, scope epochs.Scope) (fencehttp.ScopeState, error) {
	st := fencehttp.ScopeState{Scope: scope, Token: epochs.Token{Group: scope.Group, Topic: scope.Topic, Partition: scope.Partition}}
	err := q.QueryRowContext(ctx, s.q.holder, scope.Group, scope.Topic, scope.Partition).Scan(&st.Token.Epoch, &st.Token.Member, &st.Floor)
	if errors.Is(err, sql.ErrNoRows) {
		return fencehttp.ScopeState{Scope: scope, Floor: fencehttp.NoFloor}, nil
	}
	if err != nil {
		return fencehttp.ScopeState{}, fmt.Errorf("sqlstore: reading the state of %s: %w", scope, err)
	}
	return st, nil
}

// State implements fencehttp.ScopeResetter.
func (s *Store) State(ctx context.Context, scope epochs.Scope) (fencehttp.ScopeState, error) {
	return s.state(ctx, s.db, scope)
}

// ResetScope implements fencehttp.ScopeResetter: in one transaction, a
// conditional UPDATE of the scope's row on req.Expect (an INSERT of a row
// for a scope the store never saw) and the audit row in <prefix>_resets.
// A request open on the scope holds the row (PostgreSQL) or the write
// lock (SQLite): the reset waits for it.
func (s *Store) ResetScope(ctx context.Context, req fencehttp.ResetRequest) (fencehttp.ScopeState, error) {
	if err := req.Validate(); err != nil {
		return fencehttp.ScopeState{}, err
	}
	sc, exp := req.Scope, req.Expect
	after := exp.AfterReset(req)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fencehttp.ScopeState{}, fmt.Errorf("sqlstore: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var res sql.Result
	if exp.Token.IsZero() {
		if exp.Floor == fencehttp.NoFloor {
			res, err = tx.ExecContext(ctx, s.q.resetNew, sc.Group, sc.Topic, sc.Partition, after.Token.Epoch, after.Token.Member, after.Floor)
		}
	} else {
		res, err = tx.ExecContext(ctx, s.q.resetCAS, sc.Group, sc.Topic, sc.Partition, after.Token.Epoch, after.Token.Member, after.Floor,
			exp.Token.Epoch, exp.Token.Member, exp.Floor)
	}
	if err != nil {
		return fencehttp.ScopeState{}, fmt.Errorf("sqlstore: resetting %s: %w", sc, err)
	}
	var n int64
	if res != nil {
		if n, err = res.RowsAffected(); err != nil {
			return fencehttp.ScopeState{}, fmt.Errorf("sqlstore: resetting %s: %w", sc, err)
		}
	}
	if n != 1 {
		_ = tx.Rollback()
		now, err := s.State(ctx, sc)
		if err != nil {
			return fencehttp.ScopeState{}, fmt.Errorf("%w: %s is not %s any more (%w)", fencehttp.ErrResetConflict, sc, exp, err)
		}
		return now, fmt.Errorf("%w: %s is now %s, not %s", fencehttp.ErrResetConflict, sc, now, exp)
	}
	if _, err := tx.ExecContext(ctx, s.q.audit, sc.Group, sc.Topic, sc.Partition, exp.Token.Epoch, exp.Token.Member, exp.Floor,
		after.Token.Epoch, after.Token.Member, after.Floor, req.Reason, req.Detail, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		return fencehttp.ScopeState{}, fmt.Errorf("sqlstore: auditing the reset of %s: %w", sc, err)
	}
	if err := tx.Commit(); err != nil {
		return fencehttp.ScopeState{}, fmt.Errorf("sqlstore: commit of the reset of %s: %w", sc, err)
	}
	return exp, nil
}

// Resets implements fencehttp.ScopeResetter.
func (s *Store) Resets(ctx context.Context, scope epochs.Scope) ([]fencehttp.ResetEntry, error) {
	rows, err := s.db.QueryContext(ctx, s.q.resets, scope.Group, scope.Topic, scope.Partition)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: reading the resets of %s: %w", scope, err)
	}
	defer rows.Close()
	var out []fencehttp.ResetEntry
	tok := func(epoch int32, member string) epochs.Token {
		if member == "" {
			return epochs.Token{}
		}
		return epochs.Token{Group: scope.Group, Topic: scope.Topic, Partition: scope.Partition, Epoch: epoch, Member: member}
	}
	for rows.Next() {
		e := fencehttp.ResetEntry{Before: fencehttp.ScopeState{Scope: scope}, After: fencehttp.ScopeState{Scope: scope}}
		var be, ae int32
		var bm, am, at string
		if err := rows.Scan(&e.Seq, &be, &bm, &e.Before.Floor, &ae, &am, &e.After.Floor, &e.Reason, &e.Detail, &at); err != nil {
			return nil, fmt.Errorf("sqlstore: reading the resets of %s: %w", scope, err)
		}
		e.Before.Token, e.After.Token = tok(be, bm), tok(ae, am)
		if e.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return nil, fmt.Errorf("sqlstore: the time %q of reset %d of %s: %w", at, e.Seq, scope, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: reading the resets of %s: %w", scope, err)
	}
	return out, nil
}

var (
	_ fencehttp.Store         = (*Store)(nil)
	_ fencehttp.ScopeResetter = (*Store)(nil)
)
