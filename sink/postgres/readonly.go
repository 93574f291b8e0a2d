package postgres

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrReadOnly is matched by the errors the writing methods (Claim, Apply,
// ResetFence, the dead letters' and the gapped ones) of a [Sink] opened
// with [Config.ReadOnly] return.
var ErrReadOnly = errors.New("postgres: sink opened read-only")

// ErrNoSchema is matched by the error [Open] returns, with
// [Config.ReadOnly], when the schema holds none of the sink's tables (or
// the schema does not exist): a read-only Open reports it and creates
// nothing.
var ErrNoSchema = errors.New("postgres: the database holds no workrouter sink tables")

// readOnlySessions makes every session of a pool the sink opens read-only
// (default_transaction_read_only), so that the server itself refuses any
// write, whatever the code above it does.
func readOnlySessions(pcfg *pgxpool.Config) {
	pcfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
}

// noSchema is the error of a read-only Open that found none of the sink's
// tables.
func (s *Sink) noSchema() error {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = s.schema + "." + s.prefix + t.suffix
	}
	return fmt.Errorf("%w: none of %s exists (a worker creates them on first use; a read-only open never does)",
		ErrNoSchema, strings.Join(names, ", "))
}

// writable fails with ErrReadOnly for a read-only Sink; op names the
// refused operation.
func (s *Sink) writable(op string) error {
	if s.readOnly {
		return fmt.Errorf("postgres: %s: %w", op, ErrReadOnly)
	}
	return nil
}
