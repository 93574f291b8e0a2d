package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Report is what [VerifySQLite] and [VerifyPostgres] find in the example's
// tables. A correct run has Duplicates == 0, OrderViolations == 0 and no
// Mismatches; a caller that knows what was produced checks Seqs for loss.
type Report struct {
	// Accounts is the number of rows in ledger_accounts.
	Accounts int
	// Postings is the number of rows in ledger_postings: one per applied
	// command, refused withdrawals included.
	Postings int
	// Refused is the number of withdrawals refused by the overdraft rule.
	Refused int
	// Duplicates is the number of command ids applied more than once.
	Duplicates int
	// OrderViolations counts, per account, the postings whose seq is not
	// greater than the seq of the posting before them in offset order.
	OrderViolations int
	// Mismatches lists, sorted, the accounts whose balance is not the sum
	// of their deposits minus their withdrawals (refusals count zero).
	Mismatches []string
	// Seqs maps each account to the seqs of its applied commands, in
	// offset order.
	Seqs map[string][]int
}

// VerifySQLite reads the example's tables from db in one read transaction
// and reports their invariants. It may run while workers write; the report
// is then of one consistent snapshot.
func VerifySQLite(ctx context.Context, db *sql.DB) (Report, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Report{}, fmt.Errorf("ledger: verify: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return verify(ctx, sqlTx{tx})
}

// VerifyPostgres reads the example's tables through pool in one read-only
// repeatable-read transaction and reports their invariants. It may run while
// workers write; the report is then of one consistent snapshot.
func VerifyPostgres(ctx context.Context, pool *pgxpool.Pool) (Report, error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return Report{}, fmt.Errorf("ledger: verify: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	return verify(ctx, pgxTx{tx})
}

func verify(ctx context.Context, q querier) (Report, error) {
	rep := Report{Seqs: map[string][]int{}}
	balances := map[string]int64{}
	err := each(ctx, q, `SELECT account, balance FROM ledger_accounts`, func(r rows) error {
		var (
			account string
			balance int64
		)
		if err := r.Scan(&account, &balance); err != nil {
			return err
		}
		balances[account] = balance
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	rep.Accounts = len(balances)

	sums := map[string]int64{}
	ids := map[string]int{}
	err = each(ctx, q, `SELECT account, id, seq, kind, amount FROM ledger_postings ORDER BY account, part, off`, func(r rows) error {
		var (
			account, id, kind string
			seq               int
			amount            int64
		)
		if err := r.Scan(&account, &id, &seq, &kind, &amount); err != nil {
			return err
		}
		rep.Postings++
		if ids[id]++; ids[id] == 2 {
			rep.Duplicates++
		}
		if seqs := rep.Seqs[account]; len(seqs) > 0 && seq <= seqs[len(seqs)-1] {
			rep.OrderViolations++
		}
		rep.Seqs[account] = append(rep.Seqs[account], seq)
		var delta int64 // refusals leave the balance unchanged
		switch kind {
		case KindDeposit:
			delta = amount
		case KindWithdraw:
			delta = -amount
		case KindRefused:
			rep.Refused++
		default:
			return fmt.Errorf("posting %q of account %q has unknown kind %q", id, account, kind)
		}
		sums[account] += delta
		return nil
	})
	if err != nil {
		return Report{}, err
	}

	for account, sum := range sums {
		if b, ok := balances[account]; !ok || b != sum {
			rep.Mismatches = append(rep.Mismatches, account)
		}
	}
	for account, b := range balances {
		if _, ok := sums[account]; !ok && b != 0 {
			rep.Mismatches = append(rep.Mismatches, account)
		}
	}
	sort.Strings(rep.Mismatches)
	return rep, nil
}

// each runs query and calls fn for each row.
func each(ctx context.Context, q querier, query string, fn func(rows) error) error {
	r, err := q.query(ctx, query)
	if err != nil {
		return fmt.Errorf("ledger: verify: %w", err)
	}
	defer r.Close()
	for r.Next() {
		if err := fn(r); err != nil {
			return fmt.Errorf("ledger: verify: %w", err)
		}
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("ledger: verify: %w", err)
	}
	return nil
}
