package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// dropVersion7 turns a current schema into version 6's tables (the
// migration tests of older versions call it first): the fences with a
// proof floor (proof_below), the history without proven.
func dropVersion7(t testing.TB, schema string) {
	t.Helper()
	adminExec(t, "ALTER TABLE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" ADD COLUMN proof_below bigint NOT NULL DEFAULT 0")
	adminExec(t, "ALTER TABLE "+pgx.Identifier{schema, "workrouter_history"}.Sanitize()+" DROP COLUMN proven")
}

// dropVersion5 turns a current schema into version 4's tables (the
// migration tests of older versions call it first): no done spans table,
// no gapped flag, no history done column.
func dropVersion5(t testing.TB, schema string) {
	t.Helper()
	dropVersion7(t, schema)
	adminExec(t, "DROP TABLE "+pgx.Identifier{schema, "workrouter_done"}.Sanitize())
	adminExec(t, "ALTER TABLE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" DROP COLUMN gapped")
	adminExec(t, "ALTER TABLE "+pgx.Identifier{schema, "workrouter_history"}.Sanitize()+" DROP COLUMN done")
}

// gapBatch is a lane batch whose records cover only themselves.
func gapBatch(offs ...int64) sink.Batch {
	return sink.Batch{Offsets: offs, From: offs}
}

func noopEffect(context.Context, pgx.Tx, int) error { return nil }

// rawFence reads tok's scope's fence row as stored: next_offset, gapped,
// ids_version, and the number of done rows.
func rawFence(t testing.TB, schema string, scope epochs.Scope) (next int64, gapped bool, version int64, rows int64) {
	t.Helper()
	adminQueryRow(t, "SELECT next_offset, gapped, ids_version, (SELECT count(*) FROM "+pgx.Identifier{schema, "workrouter_done"}.Sanitize()+
		" WHERE grp = $1 AND topic = $2 AND part = $3) FROM "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+
		" WHERE grp = $1 AND topic = $2 AND part = $3", []any{scope.Group, scope.Topic, scope.Partition}, &next, &gapped, &version, &rows)
	return
}

// TestMigrateFromVersion4: Open migrates a version 4 schema (no done
// spans, no gapped flag) in place, and lanes work at once; a read-only
// Open refuses to migrate it.
func TestMigrateFromVersion4(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	ctx := t.Context()
	s := openSink(t, schema, nil)
	a := tokenOf(testScope(t), 3, "m-3")
	mustClaim(t, s, a)
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0, 1}, IDs: []string{"x", "y"}}, noopEffect); err != nil {
		t.Fatal(err)
	}
	s.Close()
	dropVersion5(t, schema)
	adminExec(t, "UPDATE "+pgx.Identifier{schema, "workrouter_schema"}.Sanitize()+" SET version = 4")

	s = migrated(t, schema, 4)
	cp, err := s.Claim(ctx, tokenOf(a.Scope(), 4, "m-4"), sink.Observed{})
	if err != nil || cp.NextOffset != 2 || len(cp.Done) != 0 {
		t.Fatalf("Claim after migration = %+v, %v, want watermark 2", cp, err)
	}
	b := tokenOf(a.Scope(), 4, "m-4")
	res, err := s.Apply(ctx, b, sink.Batch{Offsets: []int64{5, 6}, From: []int64{5, 6}, IDs: []string{"x", "z"}}, noopEffect)
	if err != nil || res.Applied != 1 || len(res.Duplicates) != 1 {
		t.Fatalf("a lane's Apply after migration = %+v, %v, want x a duplicate of offset 0", res, err)
	}
	if fs, err := s.Fences(ctx); err != nil || len(fs) != 1 || fs[0].NextOffset != 2 || len(fs[0].Done) != 1 || fs[0].Done[0] != (sink.Span{From: 5, To: 7}) || fs[0].Duplicates != 1 {
		t.Fatalf("fences after migration = %+v, %v", fs, err)
	}
}

// claimedGapped opens a sink in a fresh schema and claims a test scope
// with Claim as token a; ctx ends with the test or after 20 s.
func claimedGapped(t *testing.T) (*Sink, context.Context, epochs.Token) {
	t.Helper()
	s := openSink(t, newTestSchema(t), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	a := tokenOf(testScope(t), 1, "a")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	return s, ctx, a
}

// lanesAtOnce applies one batch (offset lane) in each of lanes lanes of
// a's scope at once, and fails t unless every lane's effect reached its
// barrier while all the others were there too: before runs first, then
// the effect waits for every lane's, then after runs. It returns when
// every batch has committed, and checks the scope's watermark is lanes.
func lanesAtOnce(t *testing.T, s *Sink, a epochs.Token, lanes int, before, after func(ctx context.Context, tx pgx.Tx, lane int) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	var (
		arrived sync.WaitGroup
		all     = make(chan struct{})
		wg      sync.WaitGroup
	)
	arrived.Add(lanes)
	go func() { arrived.Wait(); close(all) }()
	errs := make([]error, lanes)
	for lane := range lanes {
		wg.Go(func() {
			effect := func(ctx context.Context, tx pgx.Tx, i int) error {
				if before != nil {
					if err := before(ctx, tx, lane); err != nil {
						return err
					}
				}
				arrived.Done()
				select {
				case <-all:
				case <-ctx.Done():
					return fmt.Errorf("lane %d: the other lanes' effects never ran alongside: %w", lane, ctx.Err())
				}
				if after != nil {
					return after(ctx, tx, lane)
				}
				return nil
			}
			_, errs[lane] = s.Apply(ctx, a, gapBatch(int64(lane)), effect)
		})
	}
	wg.Wait()
	for lane, err := range errs {
		if err != nil {
			t.Fatalf("lane %d: %v", lane, err)
		}
	}
	if cp, err := s.Claim(ctx, a, sink.Observed{}); err != nil || cp.NextOffset != int64(lanes) || len(cp.Done) != 0 {
		t.Fatalf("Claim after the lanes = %+v, %v, want watermark %d", cp, err, lanes)
	}
}

// TestGapsLanesOverlap: the effects of N lanes of one scope run at the
// same time, each in its own transaction: every effect waits until all N
// have written, which lanes that serialized on the fence row (FOR UPDATE
// for the whole transaction) could never do.
func TestGapsLanesOverlap(t *testing.T) {
	t.Parallel()
	const lanes = 6 // the test pool has 6 connections
	s := openSink(t, newTestSchema(t), nil)
	lanesAtOnce(t, s, tokenOf(testScope(t), 1, "a"), lanes, func(ctx context.Context, tx pgx.Tx, lane int) error {
		_, err := tx.Exec(ctx, `INSERT INTO kv (k, v) VALUES ($1, 'x')`, fmt.Sprint("lane-", lane))
		return err
	}, nil)
}

// TestGapsHandlerWaitHoldsNoConnection: a lane's transaction begins at
// its handler's first statement, so handlers that wait on other I/O
// before they write hold no connection while they wait: twice as many
// lanes as the pool has connections all wait at once, then write, and
// every write commits with its batch's span.
func TestGapsHandlerWaitHoldsNoConnection(t *testing.T) {
	t.Parallel()
	const lanes = 12 // the test pool has 6 connections
	s := openSink(t, newTestSchema(t), nil)
	lanesAtOnce(t, s, tokenOf(testScope(t), 1, "a"), lanes, nil, func(ctx context.Context, tx pgx.Tx, lane int) error {
		_, err := tx.Exec(ctx, upsertKV, fmt.Sprint("wait-", lane), "x")
		return err
	})
	for lane := range lanes {
		if _, ok, err := getKV(t.Context(), s, fmt.Sprint("wait-", lane)); err != nil || !ok {
			t.Fatalf("lane %d's write: found %v, %v", lane, ok, err)
		}
	}
}

// TestGapsFailedBeginFailsTheBatch: a handler whose first statement
// could not begin the lane's transaction fails the batch even when it
// ignores the error: nothing of the batch is recorded.
func TestGapsFailedBeginFailsTheBatch(t *testing.T) {
	t.Parallel()
	s, ctx, a := claimedGapped(t)
	var began error
	_, err := s.Apply(ctx, a, gapBatch(0), func(ctx context.Context, tx pgx.Tx, i int) error {
		gone, stop := context.WithCancel(ctx)
		stop()
		_, began = tx.Exec(gone, upsertKV, "ignored", "x")
		return nil // the error ignored
	})
	if !errors.Is(began, context.Canceled) {
		t.Fatalf("the handler's statement: %v, want context.Canceled (the fault did not happen)", began)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a lane's Apply after a failed begin: %v, want the begin's error", err)
	}
	if cp, err := s.Claim(ctx, a, sink.Observed{}); err != nil || cp.NextOffset != 0 || len(cp.Done) != 0 {
		t.Fatalf("Claim after the failed batch = %+v, %v, want nothing recorded", cp, err)
	}
}

// TestGapsClaimDoesNotWaitForHandler: a lane whose handler is blocked
// (a paused worker) does not hold the fence row, so a newer tenure's
// claim lands at once; the lane's batch is then fenced, nothing of it
// committed.
func TestGapsClaimDoesNotWaitForHandler(t *testing.T) {
	t.Parallel()
	s := openSink(t, newTestSchema(t), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	scope := testScope(t)
	a, b := tokenOf(scope, 1, "a"), tokenOf(scope, 2, "b")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	inEffect, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(ctx, a, gapBatch(4), func(ctx context.Context, tx pgx.Tx, i int) error {
			if _, err := tx.Exec(ctx, upsertKV, "zombie", "landed"); err != nil {
				return err
			}
			close(inEffect)
			<-release
			return nil
		})
		done <- err
	}()
	<-inEffect
	if _, err := s.Claim(ctx, b, sink.Observed{}); err != nil {
		t.Fatalf("Claim while a lane's handler runs: %v", err)
	}
	close(release)
	if err := <-done; !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("the lane's batch after the claim: %v, want fenced", err)
	}
	if _, ok, err := getKV(ctx, s, "zombie"); err != nil || ok {
		t.Fatalf("the zombie lane's write: found %v, %v; want nothing committed", ok, err)
	}
}

// TestGapsCompaction: lane batches do not move the fence row's
// next_offset; every compactEvery-th batch compacts (the watermark rises
// over the spans that touch it, their rows are deleted), and a
// compaction that finds a lane holding the fence row gives up, counted,
// changing nothing.
func TestGapsCompaction(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	ctx := t.Context()
	scope := testScope(t)
	a := tokenOf(scope, 1, "a")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	// Offset 0 is left for last: nothing touches the watermark.
	for o := int64(1); o < compactEvery; o++ {
		if _, err := s.Apply(ctx, a, gapBatch(o), noopEffect); err != nil {
			t.Fatal(err)
		}
	}
	if next, gapped, _, rows := rawFence(t, schema, scope); next != 0 || !gapped || rows != compactEvery-1 {
		t.Fatalf("after %d lane batches: next_offset %d, gapped %v, %d rows; want 0, true, %d", compactEvery-1, next, gapped, rows, compactEvery-1)
	}
	if fs, err := s.Fences(ctx); err != nil || fs[0].NextOffset != 0 || len(fs[0].Done) != 1 || fs[0].Done[0] != (sink.Span{From: 1, To: compactEvery}) {
		t.Fatalf("Fences = %+v, %v; want one merged span [1, %d)", fs, err, compactEvery)
	}
	// The compactEvery-th batch fills offset 0: its compaction raises
	// the watermark over everything.
	if _, err := s.Apply(ctx, a, gapBatch(0), noopEffect); err != nil {
		t.Fatal(err)
	}
	if next, _, _, rows := rawFence(t, schema, scope); next != compactEvery || rows != 0 {
		t.Fatalf("after the compaction: next_offset %d, %d rows; want %d, 0", next, rows, compactEvery)
	}
	compactions := func(outcome string) float64 {
		return float64(s.GapStats().Compactions[outcome])
	}
	if got := compactions(compactDone); got != 1 {
		t.Fatalf("compactions %s = %v, want 1", compactDone, got)
	}

	// A lane holding the fence row (FOR SHARE, between its check and its
	// COMMIT): the compaction gives up.
	if _, err := s.Apply(ctx, a, gapBatch(compactEvery+1), noopEffect); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, a, gapBatch(compactEvery), noopEffect); err != nil {
		t.Fatal(err)
	}
	tx, err := admin(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" WHERE grp = $1 FOR SHARE", scope.Group); err != nil {
		t.Fatal(err)
	}
	s.compact(ctx, a)
	if got := compactions(compactBusy); got != 1 {
		t.Fatalf("compactions %s = %v, want 1", compactBusy, got)
	}
	if next, _, _, rows := rawFence(t, schema, scope); next != compactEvery || rows != 2 {
		t.Fatalf("after a compaction given up: next_offset %d, %d rows; want %d, 2 (unchanged)", next, rows, compactEvery)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	s.compact(ctx, a)
	if next, _, _, rows := rawFence(t, schema, scope); next != compactEvery+2 || rows != 0 || compactions(compactDone) != 2 {
		t.Fatalf("after the next compaction: next_offset %d, %d rows, %v compacted; want %d, 0, 2", next, rows, compactions(compactDone), compactEvery+2)
	}
	// A compaction by a fenced tenure changes nothing.
	b := tokenOf(scope, 2, "b")
	if _, err := s.Claim(ctx, b, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	s.compact(ctx, a)
	if got := compactions(compactFenced); got != 1 {
		t.Fatalf("compactions %s = %v, want 1", compactFenced, got)
	}
	if got, ok := s.GapStats().Spans[scope]; !ok || got != 0 {
		t.Fatalf("GapStats().Spans[scope] = %v (present %v), want 0", got, ok)
	}
}

// TestGapsPlainScopeUnflagged: a scope that never had lanes is not
// gapped, so serial Applies cost what they did, and neither is one only
// claimed; a lane's first batch marks it, and a claim that finds no span
// clears it again (and moves the IDs version on: lanes may have recorded
// IDs without moving it).
func TestGapsPlainScopeUnflagged(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	ctx := t.Context()
	scope := testScope(t)
	a := tokenOf(scope, 1, "a")
	mustClaim(t, s, a)
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0, 1}}, noopEffect); err != nil {
		t.Fatal(err)
	}
	if _, gapped, _, _ := rawFence(t, schema, scope); gapped {
		t.Fatal("a plain scope is gapped")
	}
	b := tokenOf(scope, 2, "b")
	if _, err := s.Claim(ctx, b, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, gapped, _, _ := rawFence(t, schema, scope); gapped {
		t.Fatal("a claim marked the scope gapped")
	}
	if _, err := s.Apply(ctx, b, gapBatch(2), noopEffect); err != nil {
		t.Fatal(err)
	}
	_, gapped, v0, _ := rawFence(t, schema, scope)
	if !gapped {
		t.Fatal("a lane's batch did not mark the scope gapped")
	}
	mustClaim(t, s, tokenOf(scope, 3, "c"))
	if next, gapped, v1, rows := rawFence(t, schema, scope); gapped || next != 3 || rows != 0 || v1 != v0+1 {
		t.Fatalf("after a claim: next_offset %d, gapped %v, ids_version %d (was %d), %d rows; want 3, false, %d, 0", next, gapped, v1, v0, rows, v0+1)
	}
}

// TestGapsLaneIDsSeenByLaterPlainTenure: IDs recorded by lanes (which do
// not move the IDs version) are duplicates for a later plain tenure in
// another process whose cache of the scope predates them.
func TestGapsLaneIDsSeenByLaterPlainTenure(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	ctx := t.Context()
	p1, p2 := openSink(t, schema, nil), openSink(t, schema, nil)
	scope := testScope(t)
	a, b, c := tokenOf(scope, 1, "a"), tokenOf(scope, 2, "b"), tokenOf(scope, 3, "c")
	mustClaim(t, p2, a)
	// p2's cache holds the scope (one ID) at the version this leaves.
	if res, err := p2.Apply(ctx, a, sink.Batch{Offsets: []int64{0}, IDs: []string{"w"}}, noopEffect); err != nil || res.Applied != 1 {
		t.Fatalf("an Apply with IDs = %+v, %v", res, err)
	}
	if _, err := p1.Claim(ctx, b, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if res, err := p1.Apply(ctx, b, sink.Batch{Offsets: []int64{1, 2}, From: []int64{1, 2}, IDs: []string{"x", "y"}}, noopEffect); err != nil || res.Applied != 2 {
		t.Fatalf("a lane's Apply = %+v, %v", res, err)
	}
	mustClaim(t, p2, c)
	res, err := p2.Apply(ctx, c, sink.Batch{Offsets: []int64{3, 4, 5}, IDs: []string{"x", "w", "z"}}, noopEffect)
	if err != nil || res.Applied != 1 || len(res.Duplicates) != 2 {
		t.Fatalf("an Apply with IDs by the next tenure = %+v, %v; want x (a lane's) and w duplicates", res, err)
	}
}

// TestGapsLaneSeesOwnIDs: a resend of a command in the same lane (the
// same key) is a duplicate in the lane's next batch, from the cache the
// lane's commit added to, and across a compaction that pruned nothing.
func TestGapsLaneSeesOwnIDs(t *testing.T) {
	t.Parallel()
	s := openSink(t, newTestSchema(t), nil)
	ctx := t.Context()
	a := tokenOf(testScope(t), 1, "a")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	for o := int64(0); o < 2*compactEvery; o += 2 {
		id := fmt.Sprint("cmd-", o)
		res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{o}, From: []int64{o}, IDs: []string{id}}, noopEffect)
		if err != nil || res.Applied != 1 {
			t.Fatalf("a lane's Apply(%d, %s) = %+v, %v", o, id, res, err)
		}
		res, err = s.Apply(ctx, a, sink.Batch{Offsets: []int64{o + 1}, From: []int64{o + 1}, IDs: []string{id}}, noopEffect)
		if err != nil || res.Applied != 0 || len(res.Duplicates) != 1 {
			t.Fatalf("a lane's Apply(%d, %s) resent = %+v, %v, want a duplicate", o+1, id, res, err)
		}
	}
	if fs, err := s.Fences(ctx); err != nil || fs[0].NextOffset != 2*compactEvery || fs[0].Duplicates != compactEvery {
		t.Fatalf("Fences = %+v, %v; want watermark %d and %d duplicates", fs, err, 2*compactEvery, compactEvery)
	}
}

// TestGapsLaneRetriesWhenWatermarkMoves: a plain Apply of the same
// tenure that applies a lane's offsets while the lane's handler runs
// moves the watermark over them; the lane's check sees it and runs the
// batch again, which skips them: every record is applied once.
func TestGapsLaneRetriesWhenWatermarkMoves(t *testing.T) {
	t.Parallel()
	s, ctx, a := claimedGapped(t)
	appendOnce := func(ctx context.Context, tx pgx.Tx, i int) error {
		_, err := tx.Exec(ctx, appendKV, "k", "x")
		return err
	}
	inEffect, release := make(chan struct{}), make(chan struct{})
	runs := 0
	done := make(chan error, 1)
	var res sink.Result
	go func() {
		var err error
		res, err = s.Apply(ctx, a, gapBatch(0), func(ctx context.Context, tx pgx.Tx, i int) error {
			runs++
			if runs == 1 {
				close(inEffect)
				<-release
			}
			return appendOnce(ctx, tx, i)
		})
		done <- err
	}()
	<-inEffect
	if r, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0}}, appendOnce); err != nil || r.Applied != 1 {
		t.Fatalf("plain Apply of the lane's offset = %+v, %v", r, err)
	}
	close(release)
	if err := <-done; err != nil || res.Applied != 0 || res.Skipped != 1 {
		t.Fatalf("the lane's batch = %+v, %v; want its record skipped after a retry", res, err)
	}
	if v, _, err := getKV(ctx, s, "k"); err != nil || v != "x" {
		t.Fatalf("kv(k) = %q, %v; want x, applied once", v, err)
	}
}

// TestGapsSameBatchTwiceAtOnce: two attempts of one lane batch in flight
// at once (a retry after an unknown commit outcome while the first still
// runs) cannot both commit: the second one's guard waits for the first
// one's lock on the record, reads its row, and its run again skips the
// record (the table's key, (scope, end), would refuse the second row too).
func TestGapsSameBatchTwiceAtOnce(t *testing.T) {
	t.Parallel()
	s := openSink(t, newTestSchema(t), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	a := tokenOf(testScope(t), 1, "a")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	var (
		started sync.WaitGroup
		both    = make(chan struct{})
		mu      sync.Mutex
		runs    int
	)
	started.Add(2)
	go func() { started.Wait(); close(both) }()
	effect := func(ctx context.Context, tx pgx.Tx, i int) error {
		mu.Lock()
		runs++
		first := runs <= 2
		mu.Unlock()
		if first {
			started.Done()
			<-both // both attempts read the record as not done
		}
		_, err := tx.Exec(ctx, appendKV, "k", "x")
		return err
	}
	results := make([]sink.Result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { results[i], errs[i] = s.Apply(ctx, a, gapBatch(7), effect) })
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("attempt %d: %v", i, errs[i])
		}
	}
	if n := results[0].Applied + results[1].Applied; n != 1 {
		t.Fatalf("results %+v: applied %d times, want once", results, n)
	}
	if v, _, err := getKV(ctx, s, "k"); err != nil || v != "x" {
		t.Fatalf("kv(k) = %q, %v; want x, applied once", v, err)
	}
}

// TestGapsAfterPlainClaim: lanes of a tenure that claimed with the plain
// Claim mark the scope gapped themselves (before their first span), so
// that a later plain tenure skips their spans.
func TestGapsAfterPlainClaim(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	ctx := t.Context()
	scope := testScope(t)
	a := tokenOf(scope, 1, "a")
	mustClaim(t, s, a)
	if res, err := s.Apply(ctx, a, gapBatch(3), noopEffect); err != nil || res.Applied != 1 {
		t.Fatalf("a lane's Apply after a plain claim = %+v, %v", res, err)
	}
	if next, gapped, _, rows := rawFence(t, schema, scope); next != 0 || !gapped || rows != 1 {
		t.Fatalf("after a lane batch: next_offset %d, gapped %v, %d rows; want 0, true, 1", next, gapped, rows)
	}
	b := tokenOf(scope, 2, "b")
	if next := mustClaim(t, s, b); next != 0 {
		t.Fatalf("plain claim = %d, want 0", next)
	}
	res, err := s.Apply(ctx, b, sink.Batch{Offsets: []int64{0, 1, 2, 3, 4}}, noopEffect)
	if err != nil || res.Applied != 4 || res.Skipped != 1 || res.NextOffset != 5 {
		t.Fatalf("plain Apply over the lane's span = %+v, %v; want 4 applied, offset 3 skipped", res, err)
	}
	// A stale token's lane is refused before it marks anything.
	if _, err := s.Apply(ctx, a, gapBatch(9), noopEffect); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("a stale lane: %v, want fenced", err)
	}
	if _, gapped, _, rows := rawFence(t, schema, scope); gapped || rows != 0 {
		t.Fatalf("after the plain Apply: gapped %v, %d rows; want false, 0", gapped, rows)
	}
}

// TestGapsReadOnly: a read-only sink lists a gapped scope's spans, and
// its gapped writing methods fail with ErrReadOnly.
func TestGapsReadOnly(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	w := openSink(t, schema, nil)
	ctx := t.Context()
	tok := tokenOf(testScope(t), 4, "m")
	if _, err := w.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Apply(ctx, tok, gapBatch(2, 5), noopEffect); err != nil {
		t.Fatal(err)
	}
	r := openSink(t, schema, func(c *Config) { c.ReadOnly = true })
	fs, err := r.Fences(ctx)
	if err != nil || len(fs) != 1 || len(fs[0].Done) != 2 || fs[0].Done[0] != (sink.Span{From: 2, To: 3}) || fs[0].Done[1] != (sink.Span{From: 5, To: 6}) {
		t.Fatalf("read-only Fences = %+v, %v; want the spans [2, 3) and [5, 6)", fs, err)
	}
	if _, err := r.Claim(ctx, tokenOf(tok.Scope(), 5, "m"), sink.Observed{}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Claim: %v, want ErrReadOnly", err)
	}
	if _, err := r.Apply(ctx, tok, gapBatch(0), noopEffect); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("a lane's Apply: %v, want ErrReadOnly", err)
	}
	if _, err := r.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 0, Reason: "r", Error: "e"}.InLane(0)); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("a lane's DeadLetter: %v, want ErrReadOnly", err)
	}
}

// TestGapsClaimRacingLanes: a new owner claims while 8 lanes of the old
// one keep applying (the claim is made after 20 of their batches
// landed). The claim's checkpoint is exactly the batches that returned
// without error, each applied once; every other batch was refused and
// wrote nothing.
func TestGapsClaimRacingLanes(t *testing.T) {
	t.Parallel()
	const lanes = 5 // the test pool has 6 connections: one for the claim
	s := openSink(t, newTestSchema(t), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	scope := testScope(t)
	a, b := tokenOf(scope, 1, "a"), tokenOf(scope, 2, "b")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	var (
		mu             sync.Mutex
		landed, fenced [][]int64
		wg             sync.WaitGroup
		enough         = make(chan struct{})
		once           sync.Once
	)
	for lane := range lanes {
		wg.Go(func() {
			for k := int64(0); ; k++ {
				offs := []int64{2*k*lanes + int64(lane), (2*k+1)*lanes + int64(lane)}
				_, err := s.Apply(ctx, a, gapBatch(offs...), func(ctx context.Context, tx pgx.Tx, i int) error {
					_, err := tx.Exec(ctx, appendKV, fmt.Sprint("o", offs[i]), "x")
					return err
				})
				mu.Lock()
				switch {
				case err == nil:
					landed = append(landed, offs)
					if len(landed) == 20 {
						once.Do(func() { close(enough) })
					}
				case errors.Is(err, sink.ErrFenced):
					fenced = append(fenced, offs)
				default:
					t.Errorf("lane %d Apply(%v): %v", lane, offs, err)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	<-enough
	got, err := s.Claim(ctx, b, sink.Observed{})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var want sink.Checkpoint
	for _, offs := range landed {
		for _, o := range offs {
			want.Add(o, o+1)
			if v, ok, err := getKV(ctx, s, fmt.Sprint("o", o)); err != nil || !ok || v != "x" {
				t.Fatalf("landed offset %d: kv = %q, %v, %v; want x, applied once", o, v, ok, err)
			}
		}
	}
	for _, offs := range fenced {
		for _, o := range offs {
			if _, ok, err := getKV(ctx, s, fmt.Sprint("o", o)); err != nil || ok {
				t.Fatalf("fenced offset %d written (%v, %v)", o, ok, err)
			}
		}
	}
	if got.NextOffset != want.NextOffset || len(got.Done) != len(want.Done) {
		t.Fatalf("Claim racing the lanes = %+v, want the %d batches that landed: %+v", got, len(landed), want)
	}
	for i := range got.Done {
		if got.Done[i] != want.Done[i] {
			t.Fatalf("Claim racing the lanes = %+v, want the %d batches that landed: %+v", got, len(landed), want)
		}
	}
	if len(fenced) != lanes {
		t.Fatalf("%d lanes refused, want all %d", len(fenced), lanes)
	}
	t.Logf("%d batches landed before the claim (watermark %d, %d spans above it), %d lanes refused after", len(landed), got.NextOffset, len(got.Done), len(fenced))
}

// TestGapsBatchRow: a lane batch whose records are not contiguous is one
// row of <prefix>_done (schema version 6) holding each of its spans; the
// offsets between them stay undone for another lane, a replay skips the
// batch's own, and a claim and Fences read every span back.
func TestGapsBatchRow(t *testing.T) {
	t.Parallel()
	s, ctx, a := claimedGapped(t)
	if res, err := s.Apply(ctx, a, gapBatch(1, 3, 4, 7), noopEffect); err != nil || res.Applied != 4 {
		t.Fatalf("lane batch [1 3 4 7] = %+v, %v; want 4 applied", res, err)
	}
	if _, _, _, rows := rawFence(t, s.schema, a.Scope()); rows != 1 {
		t.Fatalf("done rows after one lane batch = %d, want 1", rows)
	}
	// Another lane's records between the batch's spans are not done.
	var ran []int64
	offs := []int64{2, 5, 6}
	if res, err := s.Apply(ctx, a, gapBatch(offs...), putOffsets(offs, "k", "b", &ran)); err != nil || res.Applied != 3 || res.Skipped != 0 {
		t.Fatalf("lane batch [2 5 6] = %+v, %v; want 3 applied, none skipped", res, err)
	}
	if !slices.Equal(ran, offs) {
		t.Fatalf("the second lane's effects ran for %v, want %v", ran, offs)
	}
	// A replay of the first batch applies nothing.
	mustNotRun := func(context.Context, pgx.Tx, int) error {
		t.Error("the replay ran an effect")
		return nil
	}
	if res, err := s.Apply(ctx, a, gapBatch(1, 3, 4, 7), mustNotRun); err != nil || res.Skipped != 4 || res.Applied != 0 {
		t.Fatalf("replay of [1 3 4 7] = %+v, %v; want 4 skipped", res, err)
	}
	want := []sink.Span{{From: 1, To: 8}}
	if fs, err := s.Fences(ctx); err != nil || len(fs) != 1 || fs[0].NextOffset != 0 || !slices.Equal(fs[0].Done, want) {
		t.Fatalf("Fences = %+v, %v; want watermark 0 and done %v", fs, err, want)
	}
	b := tokenOf(a.Scope(), 2, "b")
	if cp, err := s.Claim(ctx, b, sink.Observed{}); err != nil || cp.NextOffset != 0 || !slices.Equal(cp.Done, want) {
		t.Fatalf("Claim = %+v, %v; want watermark 0 and done %v", cp, err, want)
	}
}

// TestMigrateFromVersion5: Open migrates a version 5 schema (one done
// row per span) in place; the old rows are read as their one span each,
// next to the new rows of several spans; a read-only Open refuses to
// migrate it.
func TestMigrateFromVersion5(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	ctx := t.Context()
	s := openSink(t, schema, nil)
	a := tokenOf(testScope(t), 3, "m-3")
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	done := pgx.Identifier{schema, "workrouter_done"}.Sanitize()
	dropVersion7(t, schema)
	adminExec(t, "ALTER TABLE "+done+" DROP COLUMN spans")
	adminExec(t, "UPDATE "+pgx.Identifier{schema, "workrouter_schema"}.Sanitize()+" SET version = 5")
	// Version 5's rows: the spans [2, 3) and [4, 6) a lane recorded.
	adminExec(t, "INSERT INTO "+done+" (grp, topic, part, from_off, to_off, dups) VALUES ($1, $2, $3, 2, 3, 1), ($1, $2, $3, 4, 6, 0)",
		a.Group, a.Topic, a.Partition)

	s = migrated(t, schema, 5)
	if res, err := s.Apply(ctx, a, gapBatch(3, 5, 7, 9), noopEffect); err != nil || res.Applied != 3 || res.Skipped != 1 {
		t.Fatalf("lane batch [3 5 7 9] after migration = %+v, %v; want 1 skipped (5, in an old row), 3 applied", res, err)
	}
	want := []sink.Span{{From: 2, To: 6}, {From: 7, To: 8}, {From: 9, To: 10}}
	if fs, err := s.Fences(ctx); err != nil || len(fs) != 1 || !slices.Equal(fs[0].Done, want) || fs[0].Duplicates != 1 {
		t.Fatalf("Fences after migration = %+v, %v; want done %v and the old row's duplicate", fs, err, want)
	}
	cp, err := s.Claim(ctx, tokenOf(a.Scope(), 4, "m-4"), sink.Observed{})
	if err != nil || cp.NextOffset != 0 || !slices.Equal(cp.Done, want) {
		t.Fatalf("Claim after migration = %+v, %v; want done %v", cp, err, want)
	}
}

// nestedUnits applies outer as a lane batch of a's scope in s and, inside
// its first effect, inner (the outer unit has read its records as not
// done; the inner one reads them, runs and commits whole before the outer
// one commits). Each unit writes kv(<unit><offset>); it returns the two
// results and the offsets each unit's effects ran for.
func nestedUnits(t *testing.T, s *Sink, ctx context.Context, a epochs.Token, outer, inner []int64) (outerRes, innerRes sink.Result, outerRan, innerRan []int64) {
	t.Helper()
	var (
		raced    bool
		innerErr error
	)
	put := putOffsets(outer, "outer", "v", &outerRan)
	outerRes, err := s.Apply(ctx, a, gapBatch(outer...), func(ctx context.Context, tx pgx.Tx, i int) error {
		if !raced {
			raced = true
			innerRes, innerErr = s.Apply(ctx, a, gapBatch(inner...), putOffsets(inner, "inner", "v", &innerRan))
		}
		return put(ctx, tx, i)
	})
	if !raced || innerErr != nil || !slices.Equal(innerRan, inner) {
		t.Fatalf("the inner unit (inside the outer one's effect: raced %v) ran %v: %v; want all of %v run", raced, innerRan, innerErr, inner)
	}
	if err != nil {
		t.Fatalf("the outer unit: %v", err)
	}
	return outerRes, innerRes, outerRan, innerRan
}

// offsetsFrom returns the n offsets from, from+step, ….
func offsetsFrom(from, step int64, n int) []int64 {
	offs := make([]int64, n)
	for i := range offs {
		offs[i] = from + int64(i)*step
	}
	return offs
}

// mustKVs asserts which of kv(<prefix><offset>) exist: those of offs in
// want, and none of the others.
func mustKVs(t *testing.T, s *Sink, prefix string, offs, want []int64) {
	t.Helper()
	for _, o := range offs {
		_, ok, err := getKV(t.Context(), s, fmt.Sprint(prefix, o))
		if err != nil {
			t.Fatal(err)
		}
		if ok != slices.Contains(want, o) {
			t.Fatalf("kv(%s%d) present = %v, want %v", prefix, o, ok, !ok)
		}
	}
}

// TestGapsOverlapLargeUnits: units with more records than lock one by
// one (laneLockRecords: they lock their scope exclusively) conflict with
// the units they share records with too, large or not: the unit that
// commits second runs again without the shared records.
func TestGapsOverlapLargeUnits(t *testing.T) {
	t.Parallel()
	large := offsetsFrom(0, 1, laneLockRecords+36) // 0..99
	for _, tc := range []struct {
		name         string
		outer, inner []int64
	}{
		{"LargeInLarge", large, large[:laneLockRecords+16]},
		{"SmallInLarge", large, []int64{50, 51}},
		{"LargeInSmall", []int64{50, 51}, large},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ctx, a := claimedGapped(t)
			outerRes, innerRes, outerRan, _ := nestedUnits(t, s, ctx, a, tc.outer, tc.inner)
			var rest []int64
			for _, o := range tc.outer {
				if !slices.Contains(tc.inner, o) {
					rest = append(rest, o)
				}
			}
			if innerRes.Applied != len(tc.inner) || outerRes.Applied != len(rest) || outerRes.Skipped != len(tc.outer)-len(rest) {
				t.Fatalf("inner %+v, outer %+v: want the inner unit's %d records applied, the outer's %d others applied and %d shared skipped (outer ran %d effects)",
					innerRes, outerRes, len(tc.inner), len(rest), len(tc.outer)-len(rest), len(outerRan))
			}
			mustKVs(t, s, "outer", tc.outer, rest)
			mustKVs(t, s, "inner", tc.inner, tc.inner)
		})
	}
}

// TestGapsInterleavedUnitsDoNotConflict: units in flight at once whose
// records interleave but are not shared (lanes of one tenure: their done
// rows' ranges overlap, their spans do not) both commit, each running its
// effects once: only shared records make units conflict.
func TestGapsInterleavedUnitsDoNotConflict(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, laneLockRecords + 8} { // locked one by one, and the scope locked
		t.Run(fmt.Sprint("records=", n), func(t *testing.T) {
			t.Parallel()
			s, ctx, a := claimedGapped(t)
			outer, inner := offsetsFrom(0, 2, n), offsetsFrom(1, 2, n)
			outerRes, innerRes, outerRan, innerRan := nestedUnits(t, s, ctx, a, outer, inner)
			if outerRes.Applied != n || innerRes.Applied != n || !slices.Equal(outerRan, outer) || !slices.Equal(innerRan, inner) {
				t.Fatalf("outer %+v ran %v, inner %+v ran %v: want each unit's records applied, its effects run once each", outerRes, outerRan, innerRes, innerRan)
			}
			if cp, err := s.Claim(ctx, a, sink.Observed{}); err != nil || cp.NextOffset != int64(2*n) || len(cp.Done) != 0 {
				t.Fatalf("Claim = %+v, %v; want watermark %d", cp, err, 2*n)
			}
		})
	}
}

// TestGapsOverlapCommitsWaitForEachOther: two units that share records
// and have both run their effects do not check at once: the second one's
// guard waits for the first one's locks (it is seen waiting on them in
// pg_locks), reads what the first committed, and runs again without the
// shared records. Without the locks both guards would read the records as
// not done, and both units would commit them.
func TestGapsOverlapCommitsWaitForEachOther(t *testing.T) {
	t.Parallel()
	s, ctx, a := claimedGapped(t)
	offs := []int64{0, 1}
	locks := s.laneLocks(a.Scope(), offs)
	var (
		guarded   = make(chan int, 2) // the units (1, 2) whose guard passed, in order
		release   = make(chan struct{})
		calls     int
		mu        sync.Mutex
		wg        sync.WaitGroup
		res       [3]sink.Result
		errs      [3]error
		ran       [3][]int64
		secondRan = make(chan struct{})
	)
	s.laneGuarded = func() {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		guarded <- n
		if n == 1 {
			<-release // the first unit holds its locks until the test lets it commit
		}
	}
	apply := func(u int) {
		res[u], errs[u] = s.Apply(ctx, a, gapBatch(offs...), putOffsets(offs, fmt.Sprint("u", u, "-"), "v", &ran[u]))
	}
	wg.Go(func() { apply(1) })
	if n := <-guarded; n != 1 {
		t.Fatalf("guard %d passed first", n)
	}
	wg.Go(func() {
		defer close(secondRan)
		apply(2)
	})
	// The second unit runs its effects (it reads the records as not done:
	// the first has not committed) and reaches its guard: it must wait there.
	waiting := false
	for !waiting {
		select {
		case n := <-guarded:
			close(release)
			wg.Wait()
			t.Fatalf("guard %d passed while the first unit held the records' locks", n)
		case <-ctx.Done():
			t.Fatal("the second unit never waited on the first one's locks")
		case <-time.After(5 * time.Millisecond):
		}
		var n int
		adminQueryRow(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 2 AND classid::bigint = $1 AND objid::bigint = $2`,
			[]any{int64(uint32(locks.a[0])), int64(uint32(locks.b[0]))}, &n)
		waiting = n == 1
	}
	close(release)
	wg.Wait()
	<-secondRan
	for u := 1; u <= 2; u++ {
		if errs[u] != nil {
			t.Fatalf("unit %d: %v", u, errs[u])
		}
	}
	if res[1].Applied != 2 || res[2].Applied != 0 || res[2].Skipped != 2 {
		t.Fatalf("units = %+v and %+v (ran %v and %v); want the first to apply both records, the second to skip them", res[1], res[2], ran[1], ran[2])
	}
	mustKVs(t, s, "u1-", offs, offs)
	mustKVs(t, s, "u2-", offs, nil)
}

// TestGapsClaimBetweenGuardAndCommit: a claim that lands after a lane's
// guard read the fence (and found tok the holder) and before its check
// fences the lane: the check in the lane's last pipeline compares the
// member and the epoch itself. Same epoch, another member, after a reset
// (the member term); the same member, a new epoch (the epoch term).
func TestGapsClaimBetweenGuardAndCommit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		old, newer [2]any // epoch, member
		reset      bool
	}{
		{"SameEpochAfterReset", [2]any{int32(5), "a"}, [2]any{int32(5), "b"}, true},
		{"SameMemberNewEpoch", [2]any{int32(1), "m"}, [2]any{int32(2), "m"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openSink(t, newTestSchema(t), nil)
			ctx := t.Context()
			old := tokenOf(testScope(t), tc.old[0].(int32), tc.old[1].(string))
			newer := tokenOf(testScope(t), tc.newer[0].(int32), tc.newer[1].(string))
			if _, err := s.Claim(ctx, old, sink.Observed{}); err != nil {
				t.Fatal(err)
			}
			landed := false
			s.laneGuarded = func() {
				if landed {
					return
				}
				landed = true
				if tc.reset {
					if _, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: old.Scope(), Expect: sink.Fence{Scope: old.Scope(), Holder: old},
						Reason: "test: " + t.Name()}); err != nil {
						t.Errorf("ResetFence: %v", err)
					}
				}
				_, err := s.Claim(ctx, newer, sink.Observed{})
				if pe := (*sink.ProofRequiredError)(nil); errors.As(err, &pe) {
					_, err = s.Claim(ctx, newer, sink.Observed{Proof: &sink.Proof{Version: pe.Version}})
				}
				if err != nil {
					t.Errorf("Claim by %s: %v", newer, err)
				}
			}
			var ran []int64
			_, err := s.Apply(ctx, old, gapBatch(0), putOffsets([]int64{0}, "k", "old", &ran))
			var fe *sink.FencedError
			if !landed || !errors.As(err, &fe) || fe.Stored != newer {
				t.Fatalf("lane of %s with %s's claim between its guard and its check (landed %v): %v, want fenced by %s", old, newer, landed, err, newer)
			}
			mustKVs(t, s, "k", []int64{0}, nil)
			if cp, err := s.Claim(ctx, newer, sink.Observed{}); err != nil || cp.NextOffset != 0 || len(cp.Done) != 0 {
				t.Fatalf("checkpoint = %+v, %v; want nothing done", cp, err)
			}
		})
	}
}

// TestGapsLaneIDsTwoSinks: two processes (two Sinks) take a scope's lanes
// in turn, sharing its command IDs through the table. The lanes record
// IDs without moving the fence row's IDs version, so a Sink's cache is
// trusted only at the version its tenure read or a later one: after the
// other process's tenure (whose claim moved the version) applied "x" in
// a lane, this process's next tenure finds its cache older than the
// version it reads, loads the table, and skips "x" as a duplicate.
func TestGapsLaneIDsTwoSinks(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	sA, sB := openSink(t, schema, nil), openSink(t, schema, nil)
	ctx := t.Context()
	scope := testScope(t)
	a, b, c := tokenOf(scope, 1, "a"), tokenOf(scope, 2, "b"), tokenOf(scope, 3, "c")
	lane := func(s *Sink, tok epochs.Token, off int64, id string) sink.Result {
		t.Helper()
		if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
			t.Fatalf("Claim(%s): %v", tok, err)
		}
		b := sink.Batch{Offsets: []int64{off}, From: []int64{off}, IDs: []string{id}}
		res, err := s.Apply(ctx, tok, b, func(ctx context.Context, tx pgx.Tx, _ int) error {
			_, err := tx.Exec(ctx, appendKV, "id-"+id, "x")
			return err
		})
		if err != nil {
			t.Fatalf("lane of %s at %d with %q: %v", tok, off, id, err)
		}
		return res
	}
	lane(sA, a, 0, "p") // sA's cache holds the scope's IDs
	_, _, v0, _ := rawFence(t, schema, scope)
	if res := lane(sB, b, 1, "x"); res.Applied != 1 {
		t.Fatalf("sB's lane = %+v, want x applied", res)
	}
	if cached, ok := sA.ids.Version(scope); !ok || cached > v0 {
		t.Fatalf("sA's cache is at version %d (%v), want at most %d: the test needs it stale", cached, ok, v0)
	}
	res := lane(sA, c, 2, "x") // the partition is back in sA's process
	if res.Applied != 0 || !slices.Equal(res.Duplicates, []int{0}) {
		t.Fatalf("sA's lane applied x, which sB's lane applied, again: %+v", res)
	}
	if v, _, err := getKV(ctx, sA, "id-x"); err != nil || v != "x" {
		t.Fatalf("kv(id-x) = %q, %v; want x, applied once", v, err)
	}
}
