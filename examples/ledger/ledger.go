// Package ledger is a complete workrouter example: account deposits and
// withdrawals routed by account through Kafka and applied, exactly once and
// in order, to a fenced SQL sink (SQLite or PostgreSQL), to Redis
// ([RedisHandlers], [VerifyRedis]), or published as events through a
// sink/kafka sink ([Kafka], [KafkaEvents], [VerifyKafka]).
//
// Every command is keyed by its account, so all of one account's commands
// land on one partition and are applied by the one worker that currently
// owns it, in produce order. A withdrawal that would overdraw the account is
// refused: the refusal is a business outcome, recorded as a posting of kind
// "refused" with the balance left unchanged, not an error. A command whose
// payload is malformed is refused for good: its handler returns
// [consumer.Permanent]([ErrMalformed]), and the worker dead-letters it.
//
// The handlers write two tables (created by [SetupSQLite] or
// [SetupPostgres]):
//
//	ledger_accounts(account text primary key, balance bigint not null check (balance >= 0))
//	ledger_postings(topic_id text, topic text, part int, off bigint, account text, id text, seq int,
//	                kind text /* deposit|withdraw|refused */, amount bigint,
//	                epoch int, member text, applied bigserial /* PostgreSQL only */,
//	                primary key(topic_id, topic, part, off))
//
// One postings row is written per command, unique on the command's Kafka
// position in its log (topic ID, topic, partition, offset: a recreated topic
// is a new log whose offsets start again), together with the epoch and
// member of the tenure that applied it. The rows also keep the order they
// were inserted in, which per account is the order the commands were
// applied in, for the invariant checker's O: on SQLite the table's
// implicit rowid (its one writer inserts in commit order, each row at the
// highest rowid plus one), on PostgreSQL the column applied, a bigserial
// (drawn at insert, so two lanes' rows may commit out of their order, but
// one account's rows are inserted by one lane, one transaction after
// another; a table made before the column existed has none, and the
// handlers do not need it). The handlers run inside the sink's fenced
// transaction: a worker that was paused past its session timeout and wakes
// up after its partition moved has its whole batch rejected by the sink
// (sink.ErrFenced), so it cannot post twice or out of order.
//
// [VerifySQLite] and [VerifyPostgres] read the tables back and report the
// invariants: no command applied twice, per-account order, and balances
// equal to the sum of their postings.
//
// The handler logic and SQL exist once for both databases: the statements
// use $n placeholders, which modernc.org/sqlite binds by position like
// PostgreSQL does.
package ledger

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// Topic is the default topic of ledger commands.
const Topic = "ledger"

// Command types, carried in router.Command.Type.
const (
	// TypeDeposit adds the amount to the account.
	TypeDeposit = "deposit"
	// TypeWithdraw subtracts the amount unless that would overdraw the
	// account, in which case the withdrawal is refused.
	TypeWithdraw = "withdraw"
)

// Posting kinds, stored in ledger_postings.kind.
const (
	// KindDeposit is the posting of an applied deposit.
	KindDeposit = "deposit"
	// KindWithdraw is the posting of an applied withdrawal.
	KindWithdraw = "withdraw"
	// KindRefused is the posting of a withdrawal refused by the overdraft
	// rule; it leaves the balance unchanged.
	KindRefused = "refused"
)

// ErrMalformed is matched by the error a handler returns for a command whose
// payload is not a valid ledger payload (not JSON, no id, negative seq,
// amount not positive). Retrying cannot make such a command valid, so the
// error is marked permanent ([consumer.Permanent], matching
// [consumer.ErrPermanent]): under the worker's default policy the command
// is dead-lettered at once — stored in the sink's dead-letter table, in the
// fenced unit that moves the checkpoint past it — and the partition goes
// on (docs/design.md#dead-letters). A worker whose policy stalls on handler
// errors, or whose sink cannot store dead letters, stalls the partition on
// it instead. Producers should only build commands with [Deposit] and
// [Withdraw].
var ErrMalformed = errors.New("ledger: malformed command")

// payload is the JSON body of a ledger command.
type payload struct {
	// ID is the command's unique id, assigned by the producer.
	ID string `json:"id"`
	// Seq is the per-account sequence number assigned by the producer
	// (0, 1, 2, …), for checking loss and order.
	Seq int `json:"seq"`
	// Amount is in cents, > 0.
	Amount int64 `json:"amount"`
}

// Deposit returns the command depositing amount cents (> 0) to account. id
// is the command's unique id and seq the account's sequence number for it,
// assigned by the producer (0, 1, 2, …). Arguments are not validated here:
// the handler refuses an invalid command with [ErrMalformed].
func Deposit(account, id string, seq int, amount int64) router.Command {
	return command(TypeDeposit, account, id, seq, amount)
}

// Withdraw returns the command withdrawing amount cents (> 0) from account,
// refused by the handler if it would overdraw the account. id and seq are as
// for [Deposit].
func Withdraw(account, id string, seq int, amount int64) router.Command {
	return command(TypeWithdraw, account, id, seq, amount)
}

func command(typ, account, id string, seq int, amount int64) router.Command {
	body, _ := json.Marshal(payload{ID: id, Seq: seq, Amount: amount}) // cannot fail
	return router.Command{Key: []byte(account), Type: typ, Payload: body}
}

// decode parses and validates a command's payload.
func decode(cmd consumer.Command) (payload, error) {
	var raw struct {
		ID     *string `json:"id"`
		Seq    *int    `json:"seq"`
		Amount *int64  `json:"amount"`
	}
	dec := json.NewDecoder(bytes.NewReader(cmd.Payload))
	if err := dec.Decode(&raw); err != nil {
		// The decoder's error is text here, not wrapped: for a truncated
		// payload it is io.ErrUnexpectedEOF, which sink error classifiers
		// read as a lost database connection (retried without limit).
		return payload{}, fmt.Errorf("%w: %s at %s/%d@%d: payload is not a JSON object: %v", ErrMalformed, cmd.Type, cmd.Token.Topic, cmd.Token.Partition, cmd.Offset, err)
	}
	if dec.More() {
		return payload{}, fmt.Errorf("%w: %s at %s/%d@%d: trailing data after the JSON payload", ErrMalformed, cmd.Type, cmd.Token.Topic, cmd.Token.Partition, cmd.Offset)
	}
	switch {
	case raw.ID == nil || *raw.ID == "":
		return payload{}, fmt.Errorf("%w: %s at %s/%d@%d: no id", ErrMalformed, cmd.Type, cmd.Token.Topic, cmd.Token.Partition, cmd.Offset)
	case raw.Seq == nil || *raw.Seq < 0:
		return payload{}, fmt.Errorf("%w: %s %q: missing or negative seq", ErrMalformed, cmd.Type, *raw.ID)
	case raw.Amount == nil || *raw.Amount <= 0:
		return payload{}, fmt.Errorf("%w: %s %q: amount must be a positive number of cents", ErrMalformed, cmd.Type, *raw.ID)
	}
	return payload{ID: *raw.ID, Seq: *raw.Seq, Amount: *raw.Amount}, nil
}

// schema returns the statements that create the example's tables: the
// same SQL for SQLite and PostgreSQL but for one column, which PostgreSQL
// gets (applied, the rows' insert order; SQLite numbers its rows itself,
// rowid).
func schema(postgres bool) []string {
	applied := ""
	if postgres {
		applied = "applied bigserial NOT NULL,"
	}
	return []string{
		`CREATE TABLE IF NOT EXISTS ledger_accounts (
		account text PRIMARY KEY,
		balance bigint NOT NULL CHECK (balance >= 0)
	)`,
		`CREATE TABLE IF NOT EXISTS ledger_postings (
		topic_id text NOT NULL DEFAULT '',
		topic  text   NOT NULL,
		part   int    NOT NULL,
		off    bigint NOT NULL,
		account text  NOT NULL,
		id     text   NOT NULL,
		seq    int    NOT NULL,
		kind   text   NOT NULL CHECK (kind IN ('deposit', 'withdraw', 'refused')),
		amount bigint NOT NULL CHECK (amount > 0),
		epoch  int    NOT NULL,
		member text   NOT NULL,
		` + applied + `
		PRIMARY KEY (topic_id, topic, part, off)
	)`,
		`CREATE INDEX IF NOT EXISTS ledger_postings_account ON ledger_postings (account, part, off)`,
	}
}

// The handlers' statements; $n placeholders work on both databases.
const (
	depositSQL = `INSERT INTO ledger_accounts (account, balance) VALUES ($1, $2)
		ON CONFLICT (account) DO UPDATE SET balance = ledger_accounts.balance + excluded.balance`
	openAccountSQL = `INSERT INTO ledger_accounts (account, balance) VALUES ($1, 0)
		ON CONFLICT (account) DO NOTHING`
	// withdrawSQL changes one row, or none if the withdrawal would
	// overdraw: the overdraft rule is checked and applied in one statement.
	withdrawSQL = `UPDATE ledger_accounts SET balance = balance - $2 WHERE account = $1 AND balance >= $2`
	postSQL     = `INSERT INTO ledger_postings (topic, part, off, account, id, seq, kind, amount, epoch, member, topic_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`
)

// SetupSQLite creates the example's tables in db if they do not exist. Call
// it once before starting workers, with the sink's database
// (sqlite.Sink.DB).
func SetupSQLite(ctx context.Context, db *sql.DB) error {
	return setup(ctx, sqlDB{db}, schema(false))
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
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('workrouter/examples/ledger/setup'))`); err != nil {
			return fmt.Errorf("ledger: setup: %w", err)
		}
		return setup(ctx, pgxTx{tx}, schema(true))
	})
}

func setup(ctx context.Context, db execer, stmts []string) error {
	for _, stmt := range stmts {
		if _, err := db.exec(ctx, stmt); err != nil {
			return fmt.Errorf("ledger: setup: %w", err)
		}
	}
	return nil
}

// SQLiteHandlers returns the example's handlers for a sink/sqlite sink, by
// command type ([TypeDeposit], [TypeWithdraw]). Each call returns a new map.
func SQLiteHandlers() map[string]consumer.Handler[*sqlite.Tx] {
	return handlers(func(tx *sqlite.Tx) execer { return sqlTx{tx} })
}

// PostgresHandlers returns the example's handlers for a sink/postgres sink,
// by command type ([TypeDeposit], [TypeWithdraw]). Each call returns a new
// map.
func PostgresHandlers() map[string]consumer.Handler[pgx.Tx] {
	return handlers(func(tx pgx.Tx) execer { return pgxTx{tx} })
}

func handlers[Tx any](wrap func(Tx) execer) map[string]consumer.Handler[Tx] {
	return map[string]consumer.Handler[Tx]{
		TypeDeposit: func(ctx context.Context, tx Tx, cmd consumer.Command) error {
			return deposit(ctx, wrap(tx), cmd)
		},
		TypeWithdraw: func(ctx context.Context, tx Tx, cmd consumer.Command) error {
			return withdraw(ctx, wrap(tx), cmd)
		},
	}
}

// deposit adds the amount to the account, creating it if new.
func deposit(ctx context.Context, tx execer, cmd consumer.Command) error {
	p, err := decode(cmd)
	if err != nil {
		return consumer.Permanent(err)
	}
	if _, err := tx.exec(ctx, depositSQL, string(cmd.Key), p.Amount); err != nil {
		return fmt.Errorf("ledger: deposit %q: %w", p.ID, err)
	}
	return post(ctx, tx, cmd, p, KindDeposit)
}

// withdraw subtracts the amount, or records a refusal if the account (new
// accounts start at 0) does not cover it.
func withdraw(ctx context.Context, tx execer, cmd consumer.Command) error {
	p, err := decode(cmd)
	if err != nil {
		return consumer.Permanent(err)
	}
	account := string(cmd.Key)
	if _, err := tx.exec(ctx, openAccountSQL, account); err != nil {
		return fmt.Errorf("ledger: withdraw %q: %w", p.ID, err)
	}
	n, err := tx.exec(ctx, withdrawSQL, account, p.Amount)
	if err != nil {
		return fmt.Errorf("ledger: withdraw %q: %w", p.ID, err)
	}
	kind := KindWithdraw
	if n == 0 {
		kind = KindRefused
	}
	return post(ctx, tx, cmd, p, kind)
}

// post records the command's posting. Its primary key is the command's
// Kafka position in its log, so a command applied twice fails the batch
// instead of posting twice.
func post(ctx context.Context, tx execer, cmd consumer.Command, p payload, kind string) error {
	_, err := tx.exec(ctx, postSQL,
		cmd.Token.Topic, cmd.Token.Partition, cmd.Offset,
		string(cmd.Key), p.ID, p.Seq, kind, p.Amount,
		cmd.Token.Epoch, cmd.Token.Member, cmd.TopicID)
	if err != nil {
		return fmt.Errorf("ledger: posting %s %q: %w", kind, p.ID, err)
	}
	return nil
}
