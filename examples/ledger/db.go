package ledger

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// execer is the one method the handlers and setup need from *sql.Tx, pgx.Tx
// and the databases, so that their logic and SQL exist once.
type execer interface {
	// exec runs a statement and returns the number of rows it changed.
	exec(ctx context.Context, query string, args ...any) (int64, error)
}

// querier is what Verify needs: queries returning rows.
type querier interface {
	query(ctx context.Context, query string, args ...any) (rows, error)
}

// rows is the subset of *sql.Rows and pgx.Rows that Verify uses.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// sqlTx adapts a *sqlite.Tx (in handlers) or a *sql.Tx (in Verify).
type sqlTx struct{ tx sqlConn }

// sqlConn is what *sqlite.Tx and *sql.Tx have in common.
type sqlConn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (t sqlTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

// sqlRows adapts *sql.Rows' Close to rows.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

type sqlDB struct{ db *sql.DB }

func (d sqlDB) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := d.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (t pgxTx) query(ctx context.Context, query string, args ...any) (rows, error) {
	return t.tx.Query(ctx, query, args...)
}

type pgxDB struct{ pool *pgxpool.Pool }

func (d pgxDB) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := d.pool.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}
