package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
)

// errRowMoved is what storeCheckpoint returns when the fence row's
// conditional update matched no row; it matches sink.ErrFenced, and the
// caller reports a *sink.FencedError.
var errRowMoved = fmt.Errorf("sqlite: the fence row changed under the write lock: %w", sink.ErrFenced)

// applyChecked is the rest of Apply for a lane's batch (from not nil) and
// for a serial batch on a scope with done spans (from nil: the records in
// a span are skipped, and the watermark is raised past the batch), inside
// tx, after the fence check of row. It commits tx.
func (s *Sink) applyChecked(ctx context.Context, tx *sql.Tx, op string, tok epochs.Token, row fenceRow, offsets, from []int64, ids []string, effect sink.Effect[*Tx]) (sink.Result, error) {
	scope := tok.Scope()
	cp, err := s.checkpointOf(ctx, tx, scope, row)
	if err != nil {
		return sink.Result{}, s.wrap(ctx, op, err)
	}
	before := cp.Clone()
	first, _ := slices.BinarySearch(offsets, cp.NextOffset)
	skip := make([]bool, len(offsets)) // done already: skipped, never run
	for i := range offsets {
		skip[i] = i < first || cp.Contains(offsets[i])
	}
	var dup []bool // by index: a duplicate, not run
	if ids != nil && first < len(offsets) {
		if dup, err = s.duplicates(ctx, tx, scope, row.idsVersion, offsets, ids, first); err != nil {
			return sink.Result{}, s.wrap(ctx, op+": look up command IDs", err)
		}
	}
	htx := &Tx{tx: tx}
	var out sink.Result
	changed := false
	for i := first; i < len(offsets); i++ {
		if err := ctx.Err(); err != nil {
			return sink.Result{}, s.wrap(ctx, op, err)
		}
		if skip[i] {
			out.Skipped++
			continue
		}
		changed = true
		if from != nil {
			cp.Add(from[i], offsets[i]+1)
		}
		if dup != nil && dup[i] {
			out.Duplicates = append(out.Duplicates, i)
			continue
		}
		if err := effect(ctx, htx, i); err != nil {
			eerr := &sink.EffectError{Index: i, Offset: offsets[i], Err: err, TxHealthy: !fromDatabase(err)}
			if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
				return sink.Result{}, fmt.Errorf("sqlite: %s: %w: %w", op, cerr, eerr)
			}
			return sink.Result{}, eerr
		}
		out.Applied++
	}
	out.Skipped += first
	if from == nil && first < len(offsets) {
		cp.Raise(offsets[len(offsets)-1] + 1)
		changed = true
	}
	if !changed {
		// A pure replay: the holder is verified, nothing to write.
		out.NextOffset = cp.NextOffset
		return out, nil
	}
	if err := s.storeCheckpoint(ctx, tx, scope, row, before, cp, ids != nil, len(out.Duplicates)); err != nil {
		if errors.Is(err, sink.ErrFenced) {
			s.log.Warn("apply fenced at the conditional update (did an effect write the fence table?)", "token", tok.String())
			return sink.Result{}, &sink.FencedError{Op: sink.OpApply, Stored: row.holder, Offered: tok}
		}
		return sink.Result{}, s.wrap(ctx, op, err)
	}
	var applied cmdids.Row
	if ids != nil {
		notRun := make([]bool, len(offsets))
		for i := range notRun {
			notRun[i] = skip[i] || dup != nil && dup[i]
		}
		applied = appliedRow(offsets, ids, first, notRun)
	}
	if err := s.commitWithIDs(ctx, tx, op, scope, row, cp.NextOffset, applied, ids != nil); err != nil {
		return sink.Result{}, err
	}
	out.NextOffset = cp.NextOffset
	return out, nil
}

// checkpointOf returns scope's checkpoint, read in tx: the fence row's
// NextOffset and, when the row counts done spans, their rows. Stored spans
// that break the invariants of sink.Checkpoint, or are not as many as the
// row counts, fail with an error matching [sink.ErrBadCheckpoint].
func (s *Sink) checkpointOf(ctx context.Context, tx *sql.Tx, scope epochs.Scope, row fenceRow) (sink.Checkpoint, error) {
	cp := sink.Checkpoint{NextOffset: row.nextOffset}
	if row.spans == 0 {
		return cp, nil
	}
	rows, err := tx.StmtContext(ctx, s.selSpans).QueryContext(ctx, scope.Group, scope.Topic, scope.Partition)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	defer rows.Close()
	cp.Done = make([]sink.Span, 0, row.spans)
	for rows.Next() {
		var sp sink.Span
		if err := rows.Scan(&sp.From, &sp.To); err != nil {
			return sink.Checkpoint{}, err
		}
		cp.Done = append(cp.Done, sp)
	}
	if err := rows.Err(); err != nil {
		return sink.Checkpoint{}, err
	}
	if int64(len(cp.Done)) != row.spans {
		return sink.Checkpoint{}, fmt.Errorf("%w: %s: the fence row counts %d done spans, %s holds %d", sink.ErrBadCheckpoint, scope, row.spans, s.doneSpans, len(cp.Done))
	}
	if err := cp.Valid(); err != nil {
		return sink.Checkpoint{}, fmt.Errorf("%s: %w", scope, err)
	}
	return cp, nil
}

// storeCheckpoint writes the checkpoint after (read as before from row)
// in tx: the fence row's NextOffset and span count (bumping the IDs
// version when ids, adding dups to the duplicates), with an update
// conditional on the holder, NextOffset and IDs version of row (it fails
// with errRowMoved, matching sink.ErrFenced, if it matches no row), and
// the span rows that changed.
func (s *Sink) storeCheckpoint(ctx context.Context, tx *sql.Tx, scope epochs.Scope, row fenceRow, before, after sink.Checkpoint, ids bool, dups int) error {
	bump := 0
	if ids {
		bump = 1
	}
	res, err := tx.StmtContext(ctx, s.updCheckpoint).ExecContext(ctx, after.NextOffset, len(after.Done), bump, dups,
		scope.Group, scope.Topic, scope.Partition, row.epoch, row.member, row.nextOffset, row.idsVersion)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != 1 {
		return errRowMoved
	}
	return s.storeSpans(ctx, tx, scope, before.Done, after.Done)
}

// storeSpans turns scope's span rows from old into new in tx: it deletes
// the spans of old that new does not hold, then inserts those of new that
// old did not hold (both ascending, so one merge pass).
func (s *Sink) storeSpans(ctx context.Context, tx *sql.Tx, scope epochs.Scope, old, new []sink.Span) error {
	var del, ins []sink.Span
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || i < len(old) && old[i].From < new[j].From:
			del = append(del, old[i])
			i++
		case i == len(old) || new[j].From < old[i].From:
			ins = append(ins, new[j])
			j++
		default: // the same From
			if old[i].To != new[j].To {
				del, ins = append(del, old[i]), append(ins, new[j])
			}
			i++
			j++
		}
	}
	if len(del) > 0 {
		st := tx.StmtContext(ctx, s.delSpan)
		for _, sp := range del {
			if _, err := st.ExecContext(ctx, scope.Group, scope.Topic, scope.Partition, sp.From); err != nil {
				return err
			}
		}
	}
	if len(ins) > 0 {
		st := tx.StmtContext(ctx, s.insSpan)
		for _, sp := range ins {
			if _, err := st.ExecContext(ctx, scope.Group, scope.Topic, scope.Partition, sp.From, sp.To); err != nil {
				return err
			}
		}
	}
	return nil
}
