package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// The ambiguous commit on SQLite (issue 44), in its in-process analogue:
// SQLite has no network between the sink and the database, so the lost
// reply is a test hook (SetAfterApplyCommit) that makes Apply return an
// error after its COMMIT succeeded. The worker retries the same batch,
// with the same token, records and command IDs, and the retry must apply
// nothing twice and lose nothing. The first commit is shown to have
// landed: the fence's NextOffset after the failed Apply.
//
// Only the timing in which the commit lands before the retry begins
// exists here (PostgreSQL's and Redis's tests also hold the request until
// the retry has read the fence): the unit holds the sink's writer lock
// and SQLite's write lock (BEGIN IMMEDIATE) from its read of the fence to
// its COMMIT, so the retry's unit begins after the first one ended. What
// stops the retry is the skip of the records below the NextOffset it
// reads inside its unit (apply's first): red without it for a batch
// without IDs; with IDs the IDs, reloaded (the cache is dropped when a
// commit fails), find both records applied, and only both removed make
// it red.
func TestCommitReplyLost(t *testing.T) {
	for _, withIDs := range []bool{false, true} {
		t.Run("ids="+strconv.FormatBool(withIDs), func(t *testing.T) {
			ctx := t.Context()
			s := openAt(t, filepath.Join(t.TempDir(), "lost.db"))
			tk := tok("g-lost-reply", 1, 1, "m")
			if _, err := s.Claim(ctx, tk, sink.Observed{}); err != nil {
				t.Fatal(err)
			}
			lost := errors.New("the reply was lost (test hook, after the COMMIT succeeded)")
			cuts := 0
			armed := false
			sqlite.SetAfterApplyCommit(s, func() error {
				if !armed {
					return nil
				}
				armed = false
				cuts++
				return lost
			})
			offs := []int64{1, 2}
			batch := sink.Batch{Offsets: offs}
			if withIDs {
				batch.IDs = []string{"cmd-1", "cmd-2"}
			}
			appendX := func(ctx context.Context, tx *sqlite.Tx, i int) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES (?, 'x') ON CONFLICT (k) DO UPDATE SET v = kv.v || excluded.v`,
					fmt.Sprint("k", offs[i]))
				return err
			}
			armed = true
			_, err := s.Apply(ctx, tk, batch, appendX)
			if cuts != 1 {
				t.Fatalf("the hook failed %d commits, want 1 (the fault did not happen)", cuts)
			}
			if !errors.Is(err, lost) || errors.Is(err, sink.ErrFenced) {
				t.Fatalf("Apply whose commit was reported failed: %v, want the hook's error and not sink.ErrFenced", err)
			}
			fenceNext := func() int64 {
				fs, err := s.Fences(ctx)
				if err != nil || len(fs) != 1 {
					t.Fatalf("Fences = %+v, %v; want one", fs, err)
				}
				return fs[0].NextOffset
			}
			if next := fenceNext(); next != 3 {
				t.Fatalf("NextOffset after the failed Apply = %d, want 3: the first commit did not land", next)
			}

			res, err := s.Apply(ctx, tk, batch, appendX)
			vals := make([]string, 0, len(offs))
			for _, o := range offs {
				var v string
				if err := s.DB().QueryRowContext(ctx, `SELECT v FROM kv WHERE k = ?`, fmt.Sprint("k", o)).Scan(&v); err != nil {
					t.Fatal(err)
				}
				vals = append(vals, fmt.Sprintf("k%d=%q", o, v))
			}
			if err != nil || res.Applied != 0 || res.NextOffset != 3 {
				t.Fatalf("retried Apply = %+v, %v; want nothing applied, NextOffset 3; kv after: %v", res, err, vals)
			}
			t.Logf("the retry: %+v", res)
			for i, o := range offs {
				if vals[i] != fmt.Sprintf("k%d=%q", o, "x") {
					t.Fatalf("applied twice: kv after the retry: %v, want each x (exactly once)", vals)
				}
			}
			if next := fenceNext(); next != 3 {
				t.Fatalf("NextOffset after the retry = %d, want 3", next)
			}
		})
	}
}
