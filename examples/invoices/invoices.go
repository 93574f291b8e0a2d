// Package invoices is a complete workrouter example: a singleton invoice
// scheduler. "Run billing for tenant T, period P" commands are keyed by
// tenant, so one worker at a time bills a tenant, and every billing run is
// written to a fenced SQL sink (SQLite or PostgreSQL).
//
// Each (tenant, billing period) is billed at most once, enforced twice:
//
//   - by the fencing token: the run is written inside the sink's fenced
//     transaction, so a scheduler that was paused past its session timeout
//     (GC, a frozen VM, SIGSTOP) and wakes up after its partition moved to
//     another worker has its late insert rejected by the sink
//     (sink.ErrFenced) — it cannot bill a second time beside its successor;
//   - by the table's primary key (tenant, period): a repeated run-billing
//     command for an already billed period (a retried cron, a double click)
//     is a no-op, recorded in invoice_skips, and not an error.
//
// The handlers write two tables (created by [SetupSQLite] or
// [SetupPostgres]):
//
//	invoice_runs(tenant text, period text, invoice_id text, epoch int, member text,
//	             topic text, part int, off bigint, primary key(tenant, period))
//	invoice_skips(topic_id text, topic text, part int, off bigint, tenant text, period text,
//	              epoch int, member text, primary key(topic_id, topic, part, off))
//
// Both record the Kafka position (topic, partition, offset) of the command
// and the epoch and member of the tenure that applied it. [VerifySQLite] and
// [VerifyPostgres] count runs and skipped duplicates.
//
// The handler logic and SQL exist once for both databases: the statements
// use $n placeholders, which modernc.org/sqlite binds by position like
// PostgreSQL does.
package invoices

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// Topic is the default topic of invoice scheduler commands.
const Topic = "invoices"

// TypeRunBilling is the command type of [RunBilling] commands.
const TypeRunBilling = "run-billing"

// ErrMalformed is matched by the error the handler returns for a command
// whose payload is not a valid run-billing payload (not JSON, no period, a
// period that is not YYYY-MM). The worker retries the batch and never skips
// the command, so a malformed command stalls its partition until it is
// dealt with; producers should only build commands with [RunBilling].
var ErrMalformed = errors.New("invoices: malformed command")

// payload is the JSON body of a run-billing command.
type payload struct {
	// Period is the billing period, "YYYY-MM".
	Period string `json:"period"`
}

// periodLayout is the time layout of a billing period.
const periodLayout = "2006-01"

// RunBilling returns the command that bills tenant for period, a month
// written "YYYY-MM" (e.g. "2026-11"). Sending it again for a billed period is
// harmless: the repeat is recorded as skipped. Arguments are not validated
// here: the handler refuses an invalid command with [ErrMalformed].
func RunBilling(tenant, period string) router.Command {
	body, _ := json.Marshal(payload{Period: period}) // cannot fail
	return router.Command{Key: []byte(tenant), Type: TypeRunBilling, Payload: body}
}

// decode parses and validates a command's payload.
func decode(cmd consumer.Command) (payload, error) {
	var p payload
	dec := json.NewDecoder(bytes.NewReader(cmd.Payload))
	if err := dec.Decode(&p); err != nil {
		return payload{}, fmt.Errorf("%w: %s at %s/%d@%d: payload is not a JSON object: %w", ErrMalformed, cmd.Type, cmd.Token.Topic, cmd.Token.Partition, cmd.Offset, err)
	}
	if dec.More() {
		return payload{}, fmt.Errorf("%w: %s at %s/%d@%d: trailing data after the JSON payload", ErrMalformed, cmd.Type, cmd.Token.Topic, cmd.Token.Partition, cmd.Offset)
	}
	if t, err := time.Parse(periodLayout, p.Period); err != nil || t.Format(periodLayout) != p.Period {
		return payload{}, fmt.Errorf("%w: %s at %s/%d@%d: period %q is not a month written YYYY-MM", ErrMalformed, cmd.Type, cmd.Token.Topic, cmd.Token.Partition, cmd.Offset, p.Period)
	}
	return p, nil
}

// schema creates the example's tables; valid SQL for SQLite and PostgreSQL.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS invoice_runs (
		tenant     text   NOT NULL,
		period     text   NOT NULL,
		invoice_id text   NOT NULL UNIQUE,
		epoch      int    NOT NULL,
		member     text   NOT NULL,
		topic      text   NOT NULL,
		part       int    NOT NULL,
		off        bigint NOT NULL,
		PRIMARY KEY (tenant, period)
	)`,
	`CREATE TABLE IF NOT EXISTS invoice_skips (
		topic_id text NOT NULL DEFAULT '',
		topic  text   NOT NULL,
		part   int    NOT NULL,
		off    bigint NOT NULL,
		tenant text   NOT NULL,
		period text   NOT NULL,
		epoch  int    NOT NULL,
		member text   NOT NULL,
		PRIMARY KEY (topic_id, topic, part, off)
	)`,
}

// The handler's statements; $n placeholders work on both databases.
const (
	// runSQL inserts the run, or nothing if the period is already billed.
	runSQL = `INSERT INTO invoice_runs (tenant, period, invoice_id, epoch, member, topic, part, off)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (tenant, period) DO NOTHING`
	skipSQL = `INSERT INTO invoice_skips (topic, part, off, tenant, period, epoch, member, topic_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
)

// SetupSQLite creates the example's tables in db if they do not exist. Call
// it once before starting workers, with the sink's database
// (sqlite.Sink.DB).
func SetupSQLite(ctx context.Context, db *sql.DB) error {
	return setup(ctx, sqlDB{db})
}

// SetupPostgres creates the example's tables, in the first schema of the
// pool's search_path, if they do not exist. Call it once before starting
// workers, with the sink's pool (postgres.Sink.Pool).
//
// Workers that start together (the replicas of a Deployment) may all call
// it at once, and PostgreSQL's CREATE TABLE IF NOT EXISTS fails with a
// unique violation when another session creates the same table at the same
// moment: the setups take turns under a transaction-scoped advisory lock.
func SetupPostgres(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('workrouter/examples/invoices/setup'))`); err != nil {
			return fmt.Errorf("invoices: setup: %w", err)
		}
		return setup(ctx, pgxTx{tx})
	})
}

func setup(ctx context.Context, db execer) error {
	for _, stmt := range schema {
		if _, err := db.exec(ctx, stmt); err != nil {
			return fmt.Errorf("invoices: setup: %w", err)
		}
	}
	return nil
}

// SQLiteHandlers returns the example's handler for a sink/sqlite sink, by
// command type ([TypeRunBilling]). Each call returns a new map.
func SQLiteHandlers() map[string]consumer.Handler[*sqlite.Tx] {
	return map[string]consumer.Handler[*sqlite.Tx]{
		TypeRunBilling: func(ctx context.Context, tx *sqlite.Tx, cmd consumer.Command) error {
			return runBilling(ctx, sqlTx{tx}, cmd)
		},
	}
}

// PostgresHandlers returns the example's handler for a sink/postgres sink,
// by command type ([TypeRunBilling]). Each call returns a new map.
func PostgresHandlers() map[string]consumer.Handler[pgx.Tx] {
	return map[string]consumer.Handler[pgx.Tx]{
		TypeRunBilling: func(ctx context.Context, tx pgx.Tx, cmd consumer.Command) error {
			return runBilling(ctx, pgxTx{tx}, cmd)
		},
	}
}

// runBilling records the billing run of (tenant, period), or a skip if that
// period is already billed.
func runBilling(ctx context.Context, tx execer, cmd consumer.Command) error {
	p, err := decode(cmd)
	if err != nil {
		return err
	}
	tenant, tok := string(cmd.Key), cmd.Token
	n, err := tx.exec(ctx, runSQL, tenant, p.Period, InvoiceID(tenant, p.Period),
		tok.Epoch, tok.Member, tok.Topic, tok.Partition, cmd.Offset)
	if err != nil {
		return fmt.Errorf("invoices: billing %q for %s: %w", tenant, p.Period, err)
	}
	if n == 1 {
		return nil
	}
	// Already billed: a no-op, recorded once per command (its Kafka
	// position is the key, so a command applied twice fails the batch).
	if _, err := tx.exec(ctx, skipSQL, tok.Topic, tok.Partition, cmd.Offset, tenant, p.Period, tok.Epoch, tok.Member, cmd.TopicID); err != nil {
		return fmt.Errorf("invoices: recording skipped billing of %q for %s: %w", tenant, p.Period, err)
	}
	return nil
}

// InvoiceID is the id of the invoice of tenant for period: derived from the
// pair, so that billing it again could only ever produce the same invoice.
func InvoiceID(tenant, period string) string {
	return "INV-" + period + "-" + tenant
}
