package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// TestHandlerCommitCannotOutliveTheFence: a handler's COMMIT through the
// Tx would end the sink's transaction, release the write lock (another
// process could then claim) and leave the effects before it durable
// while the fence check refuses the batch. It is refused and not run:
// the transaction stays open and the batch commits as one unit.
func TestHandlerCommitCannotOutliveTheFence(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "commit.db")
	s, other := openAt(t, path), openAt(t, path)
	a, b := tok("g", 0, 1, "a"), tok("g", 0, 2, "b")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	var commitErr, claimErr error
	claimed := false
	res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx *sqlite.Tx, _ int) error {
		if err := put(ctx, tx, "zombie", "v"); err != nil {
			return err
		}
		if _, commitErr = tx.ExecContext(ctx, "COMMIT"); commitErr == nil {
			// The transaction ended and the write lock with it: another
			// process claims before this batch's check.
			_, claimErr = other.Claim(ctx, b, sink.Observed{})
			claimed = true
		}
		return nil // a handler that goes on
	})
	if claimed {
		present := false
		if v, _ := readKV(t, s, "zombie"); v != "" {
			present = true
		}
		t.Fatalf("a handler's COMMIT ran: the claim in between: %v; the batch: %+v, %v; its write visible: %v", claimErr, res, err, present)
	}
	if !errors.Is(commitErr, sqlite.ErrTxControl) {
		t.Fatalf("COMMIT in a handler: %v, want ErrTxControl", commitErr)
	}
	if err != nil || res.NextOffset != 1 {
		t.Fatalf("the batch = %+v, %v; want it applied as one unit", res, err)
	}
}

// readKV returns kv(k) as committed, "" if absent.
func readKV(t *testing.T, s *sqlite.Sink, k string) (string, error) {
	t.Helper()
	var v string
	err := s.DB().QueryRow(`SELECT v FROM kv WHERE k = ?`, k).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return v, err
}

// TestHandlerTxControlStatementsRefused: every statement that controls
// the transaction is refused with ErrTxControl, not run, whichever method
// sends it and wherever it stands in the text; the handler's returning
// that error rolls the batch back.
func TestHandlerTxControlStatementsRefused(t *testing.T) {
	ctx := t.Context()
	s := openAt(t, filepath.Join(t.TempDir(), "txc.db"))
	a := tok("g", 0, 1, "a")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	callers := map[string]func(ctx context.Context, tx *sqlite.Tx, q string) error{
		"ExecContext": func(ctx context.Context, tx *sqlite.Tx, q string) error { _, err := tx.ExecContext(ctx, q); return err },
		"QueryContext": func(ctx context.Context, tx *sqlite.Tx, q string) error {
			rows, err := tx.QueryContext(ctx, q)
			if err != nil {
				return err
			}
			return rows.Close()
		},
		"QueryRowContext": func(ctx context.Context, tx *sqlite.Tx, q string) error {
			var n int
			if err := tx.QueryRowContext(ctx, q).Scan(&n); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			return nil
		},
		"PrepareContext": func(ctx context.Context, tx *sqlite.Tx, q string) error {
			st, err := tx.PrepareContext(ctx, q)
			if err != nil {
				return err
			}
			defer st.Close()
			_, err = st.ExecContext(ctx)
			return err
		},
	}
	off := int64(0)
	for name, send := range callers {
		for _, q := range []string{"COMMIT", "commit;", " /* c */ END", "-- c\nROLLBACK", "BEGIN", "BEGIN IMMEDIATE",
			"SAVEPOINT sp", "RELEASE sp", "ROLLBACK TO sp", "SELECT 1; COMMIT", "select 1;commit;begin"} {
			var sendErr error
			_, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{off}}, func(ctx context.Context, tx *sqlite.Tx, _ int) error {
				if err := put(ctx, tx, "refused", q); err != nil {
					return err
				}
				sendErr = send(ctx, tx, q)
				return sendErr
			})
			var ee *sink.EffectError
			if !errors.Is(sendErr, sqlite.ErrTxControl) || !errors.As(err, &ee) || !errors.Is(err, sqlite.ErrTxControl) {
				t.Fatalf("%s(%q): the handler got %v and the batch %v; want both to match ErrTxControl", name, q, sendErr, err)
			}
			if v, err := readKV(t, s, "refused"); err != nil || v != "" {
				t.Fatalf("%s(%q): the refused batch's write is visible (%q, %v)", name, q, v, err)
			}
		}
	}
	// Statements that only mention one run.
	res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx *sqlite.Tx, _ int) error {
		for _, q := range []string{"SELECT 'COMMIT'", "SELECT 1 /* ; COMMIT */", "SELECT [commit] FROM (SELECT 1 AS [commit])"} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || res.Applied != 1 {
		t.Fatalf("statements that only mention COMMIT: %+v, %v", res, err)
	}
}
