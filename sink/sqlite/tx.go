package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/workrouter/workrouter/sink/internal/txstmt"
)

// ErrTxControl is matched by the error Commit and Rollback return when a
// handler calls them on the transaction the sink handed it, and by the
// error of a statement that controls the transaction (BEGIN, COMMIT, END,
// ROLLBACK, SAVEPOINT, RELEASE, ROLLBACK TO) that a handler runs through
// it with ExecContext, QueryContext, QueryRowContext or PrepareContext,
// wherever the statement stands in the SQL text: the sink owns the
// transaction's end, because the fence check and the new checkpoint
// commit with the handlers' effects (a handler's COMMIT would also
// release the write lock, letting a new holder claim before the check).
// Return an error from the handler to abort the batch.
var ErrTxControl = errors.New("sqlite: handlers must not commit or roll back the sink's transaction")

// Tx is the transaction handle an effect (a consumer handler) receives: the
// sink's open writing transaction, which also holds the fence check and the
// batch's new checkpoint. Write through it with ordinary SQL. It has the
// statement methods of *sql.Tx, refuses Commit and Rollback (they fail
// with an error matching ErrTxControl and leave the transaction open),
// and refuses statements that control the transaction, without running
// them (ErrTxControl too). A statement prepared on the sink's database and
// given to StmtContext is not checked: handlers must not use [Sink.DB].
// It must be used only from the goroutine running the effect, and not
// after the effect returns.
type Tx struct {
	tx *sql.Tx
}

// txControl returns an error matching ErrTxControl if query holds a
// statement that controls the transaction (txstmt.Find); nil otherwise.
func txControl(query string) error {
	if k, ok := txstmt.Find(query, txstmt.SQLite); ok {
		return fmt.Errorf("sqlite: %s in a handler: %w (return an error from the handler to abort the batch)", k, ErrTxControl)
	}
	return nil
}

// ExecContext executes a statement in the transaction (see
// (*sql.Tx).ExecContext).
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := txControl(query); err != nil {
		return nil, err
	}
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction (see (*sql.Tx).QueryContext).
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := txControl(query); err != nil {
		return nil, err
	}
	return t.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query returning at most one row in the
// transaction (see (*sql.Tx).QueryRowContext). A refused statement is not
// run: the row's Scan returns the refusal.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if err := txControl(query); err != nil {
		// A *sql.Row holds no error but one of database/sql's making,
		// which passes on the Err of a context that is done before it
		// takes the connection: the refusal rides on such a context,
		// with a statement that changes nothing in case it ever ran.
		return t.tx.QueryRowContext(refusal{ctx, err}, "SELECT 1 WHERE 0")
	}
	return t.tx.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares a statement for use in the transaction (see
// (*sql.Tx).PrepareContext); it is closed with the transaction.
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if err := txControl(query); err != nil {
		return nil, err
	}
	return t.tx.PrepareContext(ctx, query)
}

// StmtContext returns a transaction-specific statement from a statement
// prepared on the sink's database (see (*sql.Tx).StmtContext).
func (t *Tx) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	return t.tx.StmtContext(ctx, stmt)
}

// Commit refuses: it returns an error matching ErrTxControl. The sink
// commits the transaction after the batch's last effect, with the fence.
func (t *Tx) Commit() error {
	return fmt.Errorf("sqlite: commit: %w", ErrTxControl)
}

// Rollback refuses: it returns an error matching ErrTxControl. Return an
// error from the handler to abort the batch; the sink rolls back.
func (t *Tx) Rollback() error {
	return fmt.Errorf("sqlite: rollback: %w (return an error from the handler to abort the batch)", ErrTxControl)
}

// refusal is a context that is done, whose Err is err: it carries a
// refused statement's error through QueryRowContext (see there).
type refusal struct {
	parent context.Context
	err    error
}

// closed is the Done channel of every refusal.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (r refusal) Deadline() (time.Time, bool) { return r.parent.Deadline() }
func (r refusal) Done() <-chan struct{}       { return closed }
func (r refusal) Err() error                  { return r.err }
func (r refusal) Value(key any) any           { return r.parent.Value(key) }
