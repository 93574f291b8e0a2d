package postgres

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// laneTx is the pgx.Tx a lane's effects get (ApplyGapped,
// DeadLetterGapped). Its transaction begins at the effects' first use of
// it, on a connection taken from the pool then: a lane whose handler
// waits on other I/O before it talks to the database (an HTTP call, a
// payment API) holds no connection while it waits, so lanes in flight
// are not bounded by the pool. Once begun it is the sink's transaction,
// closed like handlerTx after the Apply returns: Commit and Rollback
// refuse (ErrTxControl), and every method fails with pgx.ErrTxClosed.
//
// The fence does not depend on when it begins: the lane's check and
// write (gapQueries.laneCommit) run in it, pipelined with COMMIT, as
// when the transaction began with the lane's first read.
//
// A laneTx is used by the goroutine running the effects, as a pgx.Tx is.
type laneTx struct {
	pool *pgxpool.Pool
	ctx  context.Context // the Apply's: Conn and LargeObjects take none

	c    *pgxpool.Conn // nil until the transaction begins
	tx   pgx.Tx
	err  error // why the transaction could not begin: the batch fails with it
	done atomic.Bool
}

// begin returns the transaction, beginning it on a connection from the
// pool at the first call.
func (t *laneTx) begin(ctx context.Context) (pgx.Tx, error) {
	if t.done.Load() {
		return nil, fmt.Errorf("postgres: the transaction of an Apply that has returned: %w", pgx.ErrTxClosed)
	}
	if t.tx != nil {
		return t.tx, nil
	}
	if t.err != nil {
		return nil, t.err
	}
	c, err := t.pool.Acquire(ctx)
	if err != nil {
		t.err = fmt.Errorf("postgres: begin the batch's transaction: %w", err)
		return nil, t.err
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		release(ctx, c)
		t.err = fmt.Errorf("postgres: begin the batch's transaction: %w", err)
		return nil, t.err
	}
	t.c, t.tx = c, tx
	return tx, nil
}

// release returns the transaction's connection to the pool (rolling back
// what is left of the transaction) and closes t to the effects.
func (t *laneTx) release(ctx context.Context) {
	t.done.Store(true)
	if t.c != nil {
		release(ctx, t.c)
		t.c, t.tx = nil, nil
	}
}

// Commit refuses: the sink commits after its fence check.
func (*laneTx) Commit(context.Context) error {
	return fmt.Errorf("postgres: commit: %w", ErrTxControl)
}

// Rollback refuses: return an error from the effect to abort the batch.
func (*laneTx) Rollback(context.Context) error {
	return fmt.Errorf("postgres: rollback: %w (return an error from the handler to abort the batch)", ErrTxControl)
}

// Begin starts a savepoint, as pgx.Tx does.
func (t *laneTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// Exec runs sql in the transaction. As the effects' first statement it
// goes in one round trip with BEGIN.
func (t *laneTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.tx == nil && t.err == nil && !t.done.Load() {
		return t.beginExec(ctx, sql, args)
	}
	tx, err := t.begin(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return tx.Exec(ctx, sql, args...)
}

// beginExec begins the transaction with sql, in one pipeline.
func (t *laneTx) beginExec(ctx context.Context, sql string, args []any) (pgconn.CommandTag, error) {
	c, err := t.pool.Acquire(ctx)
	if err != nil {
		t.err = fmt.Errorf("postgres: begin the batch's transaction: %w", err)
		return pgconn.CommandTag{}, t.err
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(sql, args...)
	br := c.Conn().SendBatch(ctx, b)
	tx := br.Tx()
	_, err = br.Exec()
	if err != nil {
		br.Close()
		release(ctx, c)
		t.err = fmt.Errorf("postgres: begin the batch's transaction: %w", err)
		return pgconn.CommandTag{}, t.err
	}
	// BEGIN ran: the transaction is the batch's from here, whatever the
	// statement does (an error leaves it aborted, and the check then
	// fails the batch).
	t.c, t.tx = c, tx
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query runs sql in the transaction.
func (t *laneTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Query(ctx, sql, args...)
}

// QueryRow runs sql in the transaction.
func (t *laneTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	tx, err := t.begin(ctx)
	if err != nil {
		return errRow{err}
	}
	return tx.QueryRow(ctx, sql, args...)
}

// SendBatch sends b in the transaction.
func (t *laneTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := t.begin(ctx)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return tx.SendBatch(ctx, b)
}

// CopyFrom copies rows in the transaction.
func (t *laneTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

// Prepare prepares sql on the transaction's connection.
func (t *laneTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

// LargeObjects begins the transaction (with the Apply's context) and
// returns its large objects. If the transaction cannot begin, the batch
// fails, and the result is pgx's zero LargeObjects, whose methods panic:
// an effect that uses large objects sees the error first from any call
// that returns one (Exec "select 1").
func (t *laneTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.begin(t.ctx)
	if err != nil {
		return pgx.LargeObjects{}
	}
	return tx.LargeObjects()
}

// Conn begins the transaction (with the Apply's context) and returns its
// connection; nil if it cannot begin, and then the batch fails.
func (t *laneTx) Conn() *pgx.Conn {
	tx, err := t.begin(t.ctx)
	if err != nil {
		return nil
	}
	return tx.Conn()
}
