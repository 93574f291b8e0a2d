package postgres

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/workrouter/workrouter/sink/internal/txstmt"
)

// handlerTx is the pgx.Tx handed to effects: the sink's transaction, with
// Commit and Rollback refused (the sink ends the transaction after the
// fence check), statements that control the transaction refused
// (txControl: COMMIT, ROLLBACK, BEGIN, SAVEPOINT …, which would end or
// change the transaction under the sink), and every method refused once
// the Apply that handed it out has returned (done): the sink commits on
// the connection itself, which pgx's transaction does not see, and the
// connection goes back to the pool, so a handle kept past its Apply must
// not reach it. Its Conn is the connection itself, which nothing guards:
// the sink checks, before its fence check, that the transaction is still
// open.
type handlerTx struct {
	pgx.Tx
	done atomic.Bool
}

// Commit refuses: the sink commits after its fence check.
func (*handlerTx) Commit(context.Context) error {
	return fmt.Errorf("postgres: commit: %w", ErrTxControl)
}

// Rollback refuses: return an error from the effect to abort the batch.
func (*handlerTx) Rollback(context.Context) error {
	return fmt.Errorf("postgres: rollback: %w (return an error from the handler to abort the batch)", ErrTxControl)
}

// closed returns the error of a method called after the Apply returned,
// or nil.
func (t *handlerTx) closed() error {
	if t.done.Load() {
		return fmt.Errorf("postgres: the transaction of an Apply that has returned: %w", pgx.ErrTxClosed)
	}
	return nil
}

// check returns the error of running sql on t: t is closed, or sql holds a
// statement that controls the transaction.
func (t *handlerTx) check(sql string) error {
	if err := t.closed(); err != nil {
		return err
	}
	return txControl(t.Tx.Conn(), sql)
}

// txControl returns an error matching ErrTxControl if sql, to be run on
// conn (nil if not known yet), holds a statement that controls the
// transaction (txstmt.Find, in the dialect of conn's
// standard_conforming_strings); nil otherwise.
func txControl(conn *pgx.Conn, sql string) error {
	d := txstmt.Postgres
	if conn != nil && conn.PgConn().ParameterStatus("standard_conforming_strings") == "off" {
		d = txstmt.PostgresBackslashStrings
	}
	if k, ok := txstmt.Find(sql, d); ok {
		return fmt.Errorf("postgres: %s in a handler: %w (return an error from the handler to abort the batch; use tx.Begin for a savepoint)", k, ErrTxControl)
	}
	return nil
}

// batchControl is txControl for every statement queued in b.
func batchControl(conn *pgx.Conn, b *pgx.Batch) error {
	for _, q := range b.QueuedQueries {
		if err := txControl(conn, q.SQL); err != nil {
			return err
		}
	}
	return nil
}

// Begin starts a savepoint, as pgx.Tx does; the savepoint's handle is
// guarded as t is.
func (t *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.closed(); err != nil {
		return nil, err
	}
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &savepointTx{Tx: sp, outer: t}, nil
}

// Exec runs sql in the transaction.
func (t *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.check(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.Tx.Exec(ctx, sql, args...)
}

// Query runs sql in the transaction.
func (t *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.check(sql); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

// QueryRow runs sql in the transaction.
func (t *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.check(sql); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

// SendBatch sends b in the transaction.
func (t *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.closed(); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	if err := batchControl(t.Tx.Conn(), b); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.Tx.SendBatch(ctx, b)
}

// CopyFrom copies rows in the transaction.
func (t *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.closed(); err != nil {
		return 0, err
	}
	return t.Tx.CopyFrom(ctx, table, columns, src)
}

// Prepare prepares sql on the transaction's connection.
func (t *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.check(sql); err != nil {
		return nil, err
	}
	return t.Tx.Prepare(ctx, name, sql)
}

// savepointTx is the pgx.Tx of a savepoint a handler began
// (handlerTx.Begin): pgx's, whose Commit releases the savepoint and
// whose Rollback rolls back to it, with the statement guard of the
// handlerTx it belongs to, and closed when that is.
type savepointTx struct {
	pgx.Tx
	outer *handlerTx
}

// Begin starts a savepoint in this one.
func (t *savepointTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.outer.closed(); err != nil {
		return nil, err
	}
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &savepointTx{Tx: sp, outer: t.outer}, nil
}

// Commit releases the savepoint.
func (t *savepointTx) Commit(ctx context.Context) error {
	if err := t.outer.closed(); err != nil {
		return err
	}
	return t.Tx.Commit(ctx)
}

// Rollback rolls back to the savepoint.
func (t *savepointTx) Rollback(ctx context.Context) error {
	if err := t.outer.closed(); err != nil {
		return err
	}
	return t.Tx.Rollback(ctx)
}

// Exec runs sql in the savepoint.
func (t *savepointTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.outer.check(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.Tx.Exec(ctx, sql, args...)
}

// Query runs sql in the savepoint.
func (t *savepointTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.outer.check(sql); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

// QueryRow runs sql in the savepoint.
func (t *savepointTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.outer.check(sql); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

// SendBatch sends b in the savepoint.
func (t *savepointTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.outer.closed(); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	if err := batchControl(t.Tx.Conn(), b); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.Tx.SendBatch(ctx, b)
}

// CopyFrom copies rows in the savepoint.
func (t *savepointTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.outer.closed(); err != nil {
		return 0, err
	}
	return t.Tx.CopyFrom(ctx, table, columns, src)
}

// Prepare prepares sql on the transaction's connection.
func (t *savepointTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.outer.check(sql); err != nil {
		return nil, err
	}
	return t.Tx.Prepare(ctx, name, sql)
}

// txEnded returns the error of an attempt whose transaction, open on conn
// when the effects began it, is no longer open when they have run
// (status idle): a handler ended it through its connection (Conn, which
// the guard does not see), so that what the effects wrote before may be
// committed without the fence. The caller must not send its fence check:
// outside the transaction it would run, and commit, on its own. nil when
// the transaction is open (or aborted: the check then fails on it).
func (s *Sink) txEnded(conn *pgx.Conn, op string) error {
	if st := conn.PgConn().TxStatus(); st != 'I' {
		return nil
	}
	s.log.Error("postgres sink: a handler ended the sink's transaction through its connection; the batch's checkpoint was not written, and what its handlers wrote before may be committed without the fence", "op", op)
	return fmt.Errorf("postgres: %s: %w: the transaction was no longer open when the handlers had run (ended through tx.Conn()); the batch's checkpoint was not written, and what the handlers wrote before that may be committed", op, ErrTxControl)
}
