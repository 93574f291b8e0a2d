package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// laneTx is the pgx.Tx a lane's effects get (a lane's Apply,
// a lane's DeadLetter), and a plain Apply's on a view (view.go). Its
// transaction begins at the effects' first use of
// it, on a connection taken from the pool then: a lane whose handler
// waits on other I/O before it talks to the database (an HTTP call, a
// payment API) holds no connection while it waits, so lanes in flight
// are not bounded by the pool. Once begun it is a handlerTx over the
// sink's transaction: Commit and Rollback refuse (ErrTxControl), so do
// statements that control the transaction, and every method fails with
// pgx.ErrTxClosed after the Apply returned.
//
// The fence does not depend on when it begins: the lane's check and
// write (gapQueries.laneCommit), or the plain apply's checked advance,
// run in it, pipelined with COMMIT, as when the transaction began with
// the first read.
//
// A laneTx is used by the goroutine running the effects, as a pgx.Tx is.
type laneTx struct {
	handlerTx // Tx nil until the transaction begins
	pool      *pgxpool.Pool
	ctx       context.Context // the Apply's: Conn and LargeObjects take none

	c   *pgxpool.Conn // nil until the transaction begins
	err error         // why the transaction could not begin: the batch fails with it
}

// begin begins the transaction on a connection from the pool at the
// first call; it returns an error if the transaction is closed or could
// not begin.
func (t *laneTx) begin(ctx context.Context) error {
	if err := t.closed(); err != nil {
		return err
	}
	if t.Tx != nil || t.err != nil {
		return t.err
	}
	c, err := t.pool.Acquire(ctx)
	if err != nil {
		return t.failed(err)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		release(ctx, c)
		return t.failed(err)
	}
	t.c, t.Tx = c, tx
	return nil
}

// failed records that the transaction could not begin, for err.
func (t *laneTx) failed(err error) error {
	t.err = fmt.Errorf("postgres: begin the batch's transaction: %w", err)
	return t.err
}

// commitConn returns the connection of the lane's last pipeline, and
// whether that pipeline must begin the transaction itself (the effects
// ran no statement).
func (t *laneTx) commitConn(ctx context.Context) (*pgx.Conn, bool, error) {
	if t.c != nil {
		return t.c.Conn(), false, nil
	}
	c, err := t.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	t.c = c
	return c.Conn(), true, nil
}

// release returns the transaction's connection to the pool (rolling back
// what is left of the transaction) and closes t to the effects.
func (t *laneTx) release(ctx context.Context) {
	t.done.Store(true)
	if t.c != nil {
		release(ctx, t.c)
		t.c, t.Tx = nil, nil
	}
}

// Begin starts a savepoint, as pgx.Tx does.
func (t *laneTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.handlerTx.Begin(ctx)
}

// Exec runs sql in the transaction. As the effects' first statement it
// goes in one round trip with BEGIN.
func (t *laneTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.Tx == nil && t.err == nil && !t.done.Load() {
		return t.beginExec(ctx, sql, args)
	}
	if err := t.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.handlerTx.Exec(ctx, sql, args...)
}

// beginExec begins the transaction with sql, in one pipeline.
func (t *laneTx) beginExec(ctx context.Context, sql string, args []any) (pgconn.CommandTag, error) {
	c, err := t.pool.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, t.failed(err)
	}
	if err := txControl(c.Conn(), sql); err != nil {
		c.Release()
		return pgconn.CommandTag{}, err
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(sql, args...)
	br := c.Conn().SendBatch(ctx, b)
	tx := br.Tx()
	if _, err = br.Exec(); err != nil {
		br.Close()
		release(ctx, c)
		return pgconn.CommandTag{}, t.failed(err)
	}
	// BEGIN ran: the transaction is the batch's from here, whatever the
	// statement does (an error leaves it aborted, and the check then
	// fails the batch).
	t.c, t.Tx = c, tx
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query runs sql in the transaction.
func (t *laneTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.handlerTx.Query(ctx, sql, args...)
}

// QueryRow runs sql in the transaction.
func (t *laneTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.begin(ctx); err != nil {
		return errRow{err}
	}
	return t.handlerTx.QueryRow(ctx, sql, args...)
}

// SendBatch sends b in the transaction.
func (t *laneTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.begin(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.handlerTx.SendBatch(ctx, b)
}

// CopyFrom copies rows in the transaction.
func (t *laneTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.begin(ctx); err != nil {
		return 0, err
	}
	return t.handlerTx.CopyFrom(ctx, table, columns, src)
}

// Prepare prepares sql on the transaction's connection.
func (t *laneTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.handlerTx.Prepare(ctx, name, sql)
}

// LargeObjects begins the transaction (with the Apply's context) and
// returns its large objects. If the transaction cannot begin, the batch
// fails, and the result is pgx's zero LargeObjects, whose methods panic:
// an effect that uses large objects sees the error first from any call
// that returns one (Exec "select 1").
func (t *laneTx) LargeObjects() pgx.LargeObjects {
	if t.begin(t.ctx) != nil {
		return pgx.LargeObjects{}
	}
	return t.Tx.LargeObjects()
}

// Conn begins the transaction (with the Apply's context) and returns its
// connection; nil if it cannot begin, and then the batch fails.
func (t *laneTx) Conn() *pgx.Conn {
	if t.begin(t.ctx) != nil {
		return nil
	}
	return t.Tx.Conn()
}
