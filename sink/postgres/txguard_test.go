package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/sink"
)

// txControlStatements are statements that end or change the sink's
// transaction, as a handler might write them.
var txControlStatements = []string{
	"COMMIT", "commit", "  /* done */ COMMIT;", "-- done\nCOMMIT", "END", "ABORT", "ROLLBACK",
	"BEGIN", "START TRANSACTION", "SAVEPOINT sp", "RELEASE SAVEPOINT sp", "ROLLBACK TO SAVEPOINT sp",
	"PREPARE TRANSACTION 'wr-test'", "COMMIT PREPARED 'wr-test'", "ROLLBACK PREPARED 'wr-test'",
	"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
	"SELECT 1; COMMIT", "select 1;commit;begin",
}

// txCallers are the ways a handler can send a statement through the tx
// it receives: each returns the statement's error.
var txCallers = map[string]func(ctx context.Context, tx pgx.Tx, sql string) error{
	"Exec": func(ctx context.Context, tx pgx.Tx, sql string) error { _, err := tx.Exec(ctx, sql); return err },
	"Query": func(ctx context.Context, tx pgx.Tx, sql string) error {
		rows, err := tx.Query(ctx, sql)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	},
	"QueryRow": func(ctx context.Context, tx pgx.Tx, sql string) error {
		if err := tx.QueryRow(ctx, sql).Scan(); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return nil
	},
	"SendBatch": func(ctx context.Context, tx pgx.Tx, sql string) error {
		b := &pgx.Batch{}
		b.Queue("SELECT 1")
		b.Queue(sql)
		return tx.SendBatch(ctx, b).Close()
	},
	"Prepare": func(ctx context.Context, tx pgx.Tx, sql string) error {
		if _, err := tx.Prepare(ctx, "wr_test_stmt", sql); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "wr_test_stmt")
		return err
	},
	"Savepoint.Exec": func(ctx context.Context, tx pgx.Tx, sql string) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, sql); err != nil {
			return err
		}
		return sp.Commit(ctx)
	},
}

// TestHandlerTxControlStatementsRefused: a statement that would end or
// change the sink's transaction is refused (ErrTxControl) whichever way
// a handler sends it, wherever it stands in the text, on the first
// apply of a tenure, on its view, and on a lane; the batch fails as the
// handler's error and nothing of it is visible.
func TestHandlerTxControlStatementsRefused(t *testing.T) {
	t.Parallel()
	s, ctx, tok := claimedGapped(t)
	paths := map[string]func(off int64, effect sink.Effect[pgx.Tx]) error{
		"lane": func(off int64, effect sink.Effect[pgx.Tx]) error {
			_, err := s.Apply(ctx, tok, gapBatch(off), effect)
			return err
		},
	}
	plainTok := tokenOf(testScope(t), 1, "plain")
	plainTok.Partition++
	mustClaim(t, s, plainTok)
	var plainNext int64
	paths["plain"] = func(off int64, effect sink.Effect[pgx.Tx]) error {
		// A batch that commits first, so that the next one may run on
		// the view, then the batch.
		mustApplyOffsets(t, s, plainTok, "ok", "v", plainNext)
		plainNext++
		_, err := s.Apply(ctx, plainTok, sink.Batch{Offsets: []int64{plainNext}}, effect)
		return err
	}
	off := int64(0)
	for path, apply := range paths {
		for caller, send := range txCallers {
			for _, stmt := range txControlStatements {
				off++
				var sendErr error
				err := apply(off, func(ctx context.Context, tx pgx.Tx, _ int) error {
					if _, err := tx.Exec(ctx, upsertKV, fmt.Sprint("t", off), "v"); err != nil {
						return err
					}
					sendErr = send(ctx, tx, stmt)
					return sendErr
				})
				var ee *sink.EffectError
				if !errors.Is(sendErr, ErrTxControl) || !errors.As(err, &ee) || !errors.Is(err, ErrTxControl) {
					t.Fatalf("%s, %s(%q): the handler got %v and the batch %v; want both to match ErrTxControl", path, caller, stmt, sendErr, err)
				}
				if _, ok, err := getKV(ctx, s, fmt.Sprint("t", off)); err != nil || ok {
					t.Fatalf("%s, %s(%q): the refused batch's write is visible (%v, %v)", path, caller, stmt, ok, err)
				}
			}
		}
	}
	// Statements that only look like it run.
	res, err := s.Apply(ctx, tok, gapBatch(off+1), func(ctx context.Context, tx pgx.Tx, _ int) error {
		for _, sql := range []string{"SELECT 'COMMIT'", "SELECT 1 /* ; COMMIT */", "SELECT $$; ROLLBACK$$", `SELECT "commit" FROM (SELECT 1 AS "commit") c`} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		return nil
	})
	if err != nil || res.Applied != 1 {
		t.Fatalf("statements that only mention COMMIT: %+v, %v", res, err)
	}
}

// TestHandlerCommitCannotOutliveTheFence: a superseded tenure's effects
// run before the fence check on the view and on a lane. A handler that
// ran COMMIT there (and went on, ignoring the error) must not leave
// them durable: the statement is refused, the check refuses the batch,
// and nothing of it is visible.
func TestHandlerCommitCannotOutliveTheFence(t *testing.T) {
	t.Parallel()
	t.Run("view", func(t *testing.T) {
		t.Parallel()
		s, other, tok := viewAfterOneBatch(t)
		newer := tokenOf(tok.Scope(), 2, "new")
		mustClaim(t, other, newer)
		_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{1}}, func(ctx context.Context, tx pgx.Tx, _ int) error {
			if _, err := tx.Exec(ctx, upsertKV, "zombie", "v"); err != nil {
				return err
			}
			_, _ = tx.Exec(ctx, "COMMIT") // a handler that ends the transaction and goes on
			return nil
		})
		if !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("Apply of the superseded tenure on its view: %v, want fenced", err)
		}
		if _, ok, err := getKV(t.Context(), other, "zombie"); err != nil || ok {
			t.Fatalf("the fenced batch's write is visible (ok=%v, err=%v): its handler's COMMIT made it durable", ok, err)
		}
	})
	t.Run("lane", func(t *testing.T) {
		t.Parallel()
		s, ctx, a := claimedGapped(t)
		b := tokenOf(a.Scope(), 2, "b")
		_, err := s.Apply(ctx, a, gapBatch(0), func(ctx context.Context, tx pgx.Tx, _ int) error {
			if _, err := s.Claim(ctx, b, sink.Observed{}); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, upsertKV, "zombie", "v"); err != nil {
				return err
			}
			_, _ = tx.Exec(ctx, "COMMIT")
			return nil
		})
		if !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("a lane superseded during its effect: %v, want fenced", err)
		}
		if _, ok, err := getKV(ctx, s, "zombie"); err != nil || ok {
			t.Fatalf("the fenced lane's write is visible (ok=%v, err=%v): its handler's COMMIT made it durable", ok, err)
		}
	})
}

// TestHandlerEndsTransactionThroughConn: a handler that ends the
// transaction through tx.Conn() (which the statement guard does not see)
// makes the batch fail with ErrTxControl before the fence check is sent:
// the check would otherwise run, and commit, outside any transaction.
// The checkpoint does not move. (What the handler wrote before its
// COMMIT is committed: that the sink cannot undo.)
func TestHandlerEndsTransactionThroughConn(t *testing.T) {
	t.Parallel()
	s, ctx, a := claimedGapped(t)
	plain := tokenOf(testScope(t), 1, "plain")
	plain.Partition++
	mustClaim(t, s, plain)
	endIt := func(ctx context.Context, tx pgx.Tx, _ int) error {
		_, err := tx.Conn().Exec(ctx, "COMMIT")
		return err
	}
	// The first apply of the tenure (on an early read) at 0, and, after
	// a batch at 1 that commits, one on the tenure's view at 2.
	for _, off := range []int64{0, 2} {
		if off == 2 {
			mustApplyOffsets(t, s, plain, "ok", "v", 1)
		}
		if _, err := s.Apply(ctx, plain, sink.Batch{Offsets: []int64{off}}, endIt); !errors.Is(err, ErrTxControl) {
			t.Fatalf("Apply(%d) whose handler committed through Conn: %v, want ErrTxControl", off, err)
		}
		if next := mustClaim(t, s, plain); next != off {
			t.Fatalf("NextOffset after the refused Apply(%d) = %d, want %d (the advance ran outside the transaction)", off, next, off)
		}
	}
	if _, err := s.Apply(ctx, a, gapBatch(0), endIt); !errors.Is(err, ErrTxControl) {
		t.Fatalf("a lane's Apply whose handler committed through Conn: %v, want ErrTxControl", err)
	}
	if cp, err := s.Claim(ctx, a, sink.Observed{}); err != nil || cp.NextOffset != 0 || len(cp.Done) != 0 {
		t.Fatalf("checkpoint after the refused lane = %+v, %v; want nothing done (the spans were recorded outside the transaction)", cp, err)
	}
}
