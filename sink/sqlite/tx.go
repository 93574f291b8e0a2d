package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrTxControl is matched by the error Commit and Rollback return when a
// handler calls them on the transaction the sink handed it: the sink owns
// the transaction's end, because the fence check and the new checkpoint
// commit with the handlers' effects. Return an error from the handler to
// abort the batch.
var ErrTxControl = errors.New("sqlite: handlers must not commit or roll back the sink's transaction")

// Tx is the transaction handle an effect (a consumer handler) receives: the
// sink's open writing transaction, which also holds the fence check and the
// batch's new checkpoint. Write through it with ordinary SQL. It has the
// statement methods of *sql.Tx, and refuses Commit and Rollback (they fail
// with an error matching ErrTxControl and leave the transaction open). It
// must be used only from the goroutine running the effect, and not after
// the effect returns.
type Tx struct {
	tx *sql.Tx
}

// ExecContext executes a statement in the transaction (see
// (*sql.Tx).ExecContext).
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction (see (*sql.Tx).QueryContext).
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query returning at most one row in the
// transaction (see (*sql.Tx).QueryRowContext).
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares a statement for use in the transaction (see
// (*sql.Tx).PrepareContext); it is closed with the transaction.
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
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
