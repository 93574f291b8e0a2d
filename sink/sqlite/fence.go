package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
	"github.com/workrouter/workrouter/sink/internal/spantext"
)

// History entry kinds (the same as the sink package's).
const (
	// KindClaim marks a [HistoryEntry] of an accepted claim.
	KindClaim = fenceadmin.KindClaim
	// KindReset marks a [HistoryEntry] of an admin reset.
	KindReset = fenceadmin.KindReset
)

// HistoryEntry is one row of a scope's history, see [Sink.History]; At is
// the wall clock of the writing process.
type HistoryEntry = fenceadmin.Entry

// holderToken builds the stored holder of scope from its row's columns; a
// cleared holder (epoch -1) is the zero token.
func holderToken(scope epochs.Scope, epoch int64, member string) epochs.Token {
	if epoch < 0 {
		return epochs.Token{}
	}
	return epochs.Token{Group: scope.Group, Topic: scope.Topic, Partition: scope.Partition, Epoch: int32(epoch), Member: member}
}

// fenceRow is a scope's stored fence as read inside a transaction.
type fenceRow struct {
	found         bool
	holder        epochs.Token
	epoch         int64 // as stored (-1 when cleared)
	member        string
	nextOffset    int64
	topicID       string
	proofRequired bool
	idsVersion    int64 // bumped by every Apply with IDs that commits (cmdids)
	duplicates    int64 // sink.Fence.Duplicates
	spans         int64 // how many done spans the scope has (sink.Fence.Done)
}

// fence returns the row as a sink.Fence of scope.
func (r fenceRow) fence(scope epochs.Scope) sink.Fence {
	return sink.Fence{Scope: scope, Holder: r.holder, NextOffset: r.nextOffset, TopicID: r.topicID,
		ProofRequired: r.proofRequired, Duplicates: r.duplicates}
}

// readFence reads scope's fence row inside tx.
func (s *Sink) readFence(ctx context.Context, tx *sql.Tx, scope epochs.Scope) (fenceRow, error) {
	var r fenceRow
	err := tx.StmtContext(ctx, s.selFence).QueryRowContext(ctx, scope.Group, scope.Topic, scope.Partition).
		Scan(&r.epoch, &r.member, &r.nextOffset, &r.topicID, &r.proofRequired, &r.idsVersion, &r.duplicates, &r.spans)
	if errors.Is(err, sql.ErrNoRows) {
		return fenceRow{}, nil
	}
	if err != nil {
		return fenceRow{}, err
	}
	r.found = true
	r.holder = holderToken(scope, r.epoch, r.member)
	return r, nil
}

// begin takes the in-process writer lock and starts a writing transaction
// (BEGIN IMMEDIATE: SQLite's write lock is held from here to the end).
// The returned release function rolls back unless the transaction was
// committed, and releases the writer lock.
func (s *Sink) begin(ctx context.Context, op string) (*sql.Tx, func(), error) {
	if err := s.writable(op); err != nil {
		return nil, nil, err
	}
	if err := s.lockWriter(ctx); err != nil {
		return nil, nil, s.wrap(ctx, op, err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		s.unlockWriter()
		return nil, nil, s.wrap(ctx, op, err)
	}
	return tx, func() {
		_ = tx.Rollback() // no-op (sql.ErrTxDone) after a commit
		s.unlockWriter()
	}, nil
}

// commit commits tx, checking ctx first so that a cancelled call never
// reports a commit it may not have made.
func (s *Sink) commit(ctx context.Context, tx *sql.Tx, op string) error {
	if err := ctx.Err(); err != nil {
		return s.wrap(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return s.wrap(ctx, op, err)
	}
	return nil
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// Claim makes tok the holder of its scope and returns the scope's
// NextOffset, following [sink.Sink.Claim]. In one writing transaction it
// reads the fence row; if tok may not take the scope over (see
// [epochs.Token.CanClaim]) it fails with a *[sink.FencedError]; without
// a current obs.Proof when the row asks a proof of tok
// ([sink.Fence.CheckClaim]: after a reset) with a
// *[sink.ProofRequiredError]; if the log
// under the checkpoint changed with a *[sink.LogChangedError]; each
// changing nothing. Otherwise it stores tok (adopting obs.TopicID if the
// row has none), appends a claim row to the history, and commits. An
// invalid tok fails with an error matching [epochs.ErrInvalidToken]; a
// cancelled ctx with one matching its error; an expired busy timeout with
// [ErrBusy]. Claim may be called from any goroutine.
func (s *Sink) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return s.claim(ctx, tok, obs)
}

// claim is Claim. The log check compares the end of the done spans with
// the log end ([sink.CheckLog]).
func (s *Sink) claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	if err := tok.Validate(); err != nil {
		return sink.Checkpoint{}, err
	}
	op := "claim " + tok.String()
	tx, done, err := s.begin(ctx, op)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	defer done()
	scope := tok.Scope()
	row, err := s.readFence(ctx, tx, scope)
	if err != nil {
		return sink.Checkpoint{}, s.wrap(ctx, op, err)
	}
	fence := row.fence(scope)
	if err := tx.StmtContext(ctx, s.selVersion).QueryRowContext(ctx, scope.Group, scope.Topic, scope.Partition).Scan(&fence.Version); err != nil {
		return sink.Checkpoint{}, s.wrap(ctx, op, err)
	}
	takeover, err := fence.CheckClaim(tok, obs)
	if err != nil {
		if errors.Is(err, sink.ErrFenced) {
			s.log.Debug("claim fenced", "token", tok.String(), "stored", row.holder.String())
			return sink.Checkpoint{}, err
		}
		return sink.Checkpoint{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	stored, err := s.checkpointOf(ctx, tx, scope, row)
	if err != nil {
		return sink.Checkpoint{}, s.wrap(ctx, op, err)
	}
	cp, topicID, err := sink.CheckLog(scope, row.found, row.topicID, stored, obs)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	next := cp.NextOffset
	if takeover {
		// As a reset of the earlier incarnation's holder, audited, then
		// the claim; a takeover sets the proof requirement for good.
		if _, err := tx.StmtContext(ctx, s.insHistory).ExecContext(ctx, scope.Group, scope.Topic, scope.Partition, KindReset, row.epoch, row.member,
			stored.NextOffset, fenceadmin.TakeoverReason, now(), row.topicID, obs.TakeoverDetail(tok), spantext.Format(stored.Done), false); err != nil {
			return sink.Checkpoint{}, s.wrap(ctx, op, err)
		}
		if _, err := tx.StmtContext(ctx, s.requireProof).ExecContext(ctx, scope.Group, scope.Topic, scope.Partition); err != nil {
			return sink.Checkpoint{}, s.wrap(ctx, op, err)
		}
		s.log.Warn("fence taken over by a proven claim below its holder", "scope", scope.String(), "cleared_holder", row.holder.String(),
			"claim", tok.String(), "group_epoch", obs.Proof.GroupEpoch)
	}
	if _, err := tx.StmtContext(ctx, s.upsertFence).ExecContext(ctx,
		scope.Group, scope.Topic, scope.Partition, tok.Epoch, tok.Member, next, topicID); err != nil {
		return sink.Checkpoint{}, s.wrap(ctx, op, err)
	}
	if _, err := tx.StmtContext(ctx, s.insHistory).ExecContext(ctx,
		scope.Group, scope.Topic, scope.Partition, KindClaim, tok.Epoch, tok.Member, next, "", now(), topicID, "", spantext.Format(cp.Done), fence.ProvenBy(obs)); err != nil {
		return sink.Checkpoint{}, s.wrap(ctx, op, err)
	}
	if err := s.commit(ctx, tx, op); err != nil {
		return sink.Checkpoint{}, err
	}
	return cp, nil
}

// Apply applies batch b of tok's scope, following [sink.Sink.Apply], in
// one writing transaction: it reads the fence row and fails with a
// *[sink.FencedError] unless tok is exactly the holder; then, on a scope
// without done spans and for a serial batch, it skips the offsets below
// NextOffset, looks b.IDs up (if any) in the scope's retained IDs (a
// per-Sink cache, valid when it mirrors the IDs version the fence row
// carries, else reloaded from <prefix>_command_ids inside the
// transaction), runs effect for each remaining record that is not a
// duplicate with the transaction's *[Tx] (which refuses Commit, Rollback
// and transaction-control statements), sets NextOffset to the last
// offset + 1 with an update conditional on the holder and the NextOffset
// it read (which also bumps the IDs version and counts the duplicates
// with IDs), stores the applied IDs as one row and deletes the rows below
// the horizon when due (an index range on (scope, last_off)), and
// commits. A lane's batch (b.From), or any batch on a scope with done
// spans, also reads the scope's done spans, skips the records the
// checkpoint contains, adds [b.From[i], b.Offsets[i]+1) of every record
// not skipped (a serial batch raises the watermark past itself and drops
// the spans below it), and writes the changed rows of <prefix>_done_spans
// and the span count with the same conditional update; its result's
// NextOffset is the exact watermark. If every offset is skipped it writes
// nothing. A fence refusal, an effect error (a *[sink.EffectError]) or a
// cancelled ctx rolls it all back and records nothing; a malformed batch
// fails with [sink.ErrBadBatch] before anything runs; an expired busy
// timeout fails with [ErrBusy] (nothing applied; retry).
//
// SQLite has one writer: concurrent batches, lanes' included, serialize
// on its write lock, effects included (see the package documentation).
// Apply may be called from any goroutine; effect is called on the
// calling goroutine and must not call the sink's methods or use
// [Sink.DB].
func (s *Sink) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*Tx]) (sink.Result, error) {
	if err := sink.CheckBatch(tok, b, effect, s.Features()); err != nil {
		return sink.Result{}, err
	}
	return s.apply(ctx, tok, b, effect)
}

// Features returns the sink's features: command IDs within
// [Config.DedupeWindow], gaps and dead letters ([sink.Features]). It may
// be called from any goroutine.
func (s *Sink) Features() sink.Features {
	return sink.Features{DedupeWindow: s.cfg.DedupeWindow, Gaps: true, DeadLetters: true}
}

// apply is Apply after its checks; a lane's batch, and a batch on a
// scope with done spans, go on in applyChecked.
func (s *Sink) apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*Tx]) (sink.Result, error) {
	offsets, ids := b.Offsets, b.IDs
	op := "apply " + tok.String()
	tx, done, err := s.begin(ctx, op)
	if err != nil {
		return sink.Result{}, err
	}
	defer done()
	scope := tok.Scope()
	row, err := s.readFence(ctx, tx, scope)
	if err != nil {
		return sink.Result{}, s.wrap(ctx, op, err)
	}
	if !tok.Holds(row.holder) {
		s.log.Debug("apply fenced", "token", tok.String(), "stored", row.holder.String())
		return sink.Result{}, &sink.FencedError{Op: sink.OpApply, Stored: row.holder, Offered: tok}
	}
	if b.From != nil || row.spans > 0 {
		// A lane's batch, or a gapped scope: skip the done spans too.
		return s.applyChecked(ctx, tx, op, tok, row, offsets, b.From, ids, effect)
	}
	first, _ := slices.BinarySearch(offsets, row.nextOffset)
	if first == len(offsets) {
		// A pure replay: the holder is verified, nothing to write.
		return sink.Result{Skipped: len(offsets), NextOffset: row.nextOffset}, nil
	}
	var dup []bool // by index: a duplicate, not run
	if ids != nil {
		if dup, err = s.duplicates(ctx, tx, scope, row.idsVersion, offsets, ids, first); err != nil {
			return sink.Result{}, s.wrap(ctx, op+": look up command IDs", err)
		}
	}
	htx := &Tx{tx: tx}
	var out sink.Result
	for i := first; i < len(offsets); i++ {
		if err := ctx.Err(); err != nil {
			return sink.Result{}, s.wrap(ctx, op, err)
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
	}
	next := offsets[len(offsets)-1] + 1
	upd, args := s.updNext, []any{next, scope.Group, scope.Topic, scope.Partition, row.epoch, row.member, row.nextOffset}
	if ids != nil {
		upd = s.updNextOnce
		args = []any{next, len(out.Duplicates), scope.Group, scope.Topic, scope.Partition, row.epoch, row.member, row.nextOffset, row.idsVersion}
	}
	res, err := tx.StmtContext(ctx, upd).ExecContext(ctx, args...)
	if err != nil {
		return sink.Result{}, s.wrap(ctx, op, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return sink.Result{}, s.wrap(ctx, op, err)
	} else if n != 1 {
		// Cannot happen while the write lock is held, unless an effect
		// wrote the fence table itself: refuse rather than guess.
		stored := row.holder
		if again, err := s.readFence(ctx, tx, scope); err == nil {
			stored = again.holder
		}
		s.log.Warn("apply fenced at the conditional update (did an effect write the fence table?)",
			"token", tok.String(), "stored", stored.String())
		return sink.Result{}, &sink.FencedError{Op: sink.OpApply, Stored: stored, Offered: tok}
	}
	var applied cmdids.Row
	if ids != nil {
		applied = appliedRow(offsets, ids, first, dup)
	}
	if err := s.commitWithIDs(ctx, tx, op, scope, row, next, applied, ids != nil); err != nil {
		return sink.Result{}, err
	}
	out.Applied, out.Skipped, out.NextOffset = len(offsets)-first-len(out.Duplicates), first, next
	return out, nil
}

// appliedRow returns the row of the IDs of the records from index first on
// that are not duplicates and carry an ID.
func appliedRow(offsets []int64, ids []string, first int, dup []bool) cmdids.Row {
	var r cmdids.Row
	for i := first; i < len(offsets); i++ {
		if !dup[i] && ids[i] != "" {
			r.Offs = append(r.Offs, offsets[i])
			r.IDs = append(r.IDs, ids[i])
			r.Last = offsets[i]
		}
	}
	return r
}

// duplicates returns which records of the batch, from index first on, are
// duplicates: an ID seen earlier in the batch, or one the scope applied
// within the window. It looks the IDs up in the cache, first loading the
// scope's rows into it if it does not mirror version (the fence row's,
// read in tx: under the write lock, the rows are that version's).
func (s *Sink) duplicates(ctx context.Context, tx *sql.Tx, scope epochs.Scope, version int64, offsets []int64, ids []string, first int) ([]bool, error) {
	dup := make([]bool, len(offsets))
	plan := cmdids.PlanBatch(ids, first)
	for _, i := range plan.InBatch {
		dup[i] = true
	}
	if len(plan.Lookup) == 0 {
		return dup, nil
	}
	found := func(i int, applied int64) { dup[i] = cmdids.IsDuplicate(offsets[i], applied, s.cfg.DedupeWindow) }
	if s.ids.Lookup(scope, version, ids, plan.Lookup, found) {
		return dup, nil
	}
	rows, err := tx.StmtContext(ctx, s.selIDs).QueryContext(ctx, scope.Group, scope.Topic, scope.Partition)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var loaded []cmdids.Row
	for rows.Next() {
		var (
			first, last int64
			data        []byte
		)
		if err := rows.Scan(&first, &last, &data); err != nil {
			return nil, err
		}
		offs, rowIDs, err := cmdids.Decode(first, data)
		if err != nil {
			return nil, err
		}
		loaded = append(loaded, cmdids.Row{Last: last, Offs: offs, IDs: rowIDs})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	s.ids.Load(scope, version, loaded)
	s.ids.Lookup(scope, version, ids, plan.Lookup, found)
	return dup, nil
}

// Fences returns the stored fence of every scope in the database, sorted by
// group, topic and partition, with its done spans (one statement, so one
// snapshot); a scope whose holder was reset has a zero Holder. It
// implements [fenceadmin.Lister]. It reads without taking the write lock, and
// may be called from any goroutine.
func (s *Sink) Fences(ctx context.Context) ([]sink.Fence, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT f.grp, f.topic, f.part, f.epoch, f.member, f.next_offset, f.topic_id, f.proof_required, f.duplicates,"+
		" (SELECT coalesce(max(h.seq), 0) FROM "+s.history+" h WHERE h.grp = f.grp AND h.topic = f.topic AND h.part = f.part),"+
		" d.from_off, d.to_off FROM "+s.fences+" f LEFT JOIN "+s.doneSpans+" d ON d.grp = f.grp AND d.topic = f.topic AND d.part = f.part"+
		" ORDER BY f.grp, f.topic, f.part, d.from_off")
	if err != nil {
		return nil, s.wrap(ctx, "fences", err)
	}
	defer rows.Close()
	var out []sink.Fence
	for rows.Next() {
		var (
			f        sink.Fence
			epoch    int64
			member   string
			from, to sql.NullInt64
		)
		if err := rows.Scan(&f.Scope.Group, &f.Scope.Topic, &f.Scope.Partition, &epoch, &member, &f.NextOffset, &f.TopicID, &f.ProofRequired, &f.Duplicates,
			&f.Version, &from, &to); err != nil {
			return nil, s.wrap(ctx, "fences", err)
		}
		f.Holder = holderToken(f.Scope, epoch, member)
		if n := len(out); n > 0 && out[n-1].Scope == f.Scope {
			out[n-1].Done = append(out[n-1].Done, sink.Span{From: from.Int64, To: to.Int64})
			continue
		}
		if from.Valid {
			f.Done = []sink.Span{{From: from.Int64, To: to.Int64}}
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "fences", err)
	}
	return out, nil
}

// ResetFence resets a scope's fence following [fenceadmin.Resetter], in one
// transaction: it compares the row with req.Expect (holder, NextOffset,
// topic ID), clears the holder (stored as epoch -1, member ""), keeps or
// moves NextOffset and the topic ID as req says, requires a proof of
// membership from every later claim (it stores [fenceadmin.AfterReset]),
// and appends a reset row carrying
// req.Reason, req.Detail and the cleared holder to the history. It returns
// the fence as it was before. It fails with an error matching
// [ErrNoReason] for an empty reason, [epochs.ErrInvalidToken] for an
// invalid scope, [sink.ErrNotFound] for a scope the database does not know
// and [fenceadmin.ErrConflict] when the fence is not req.Expect. It may be
// called from any goroutine, but only by an operator: it lifts the fence.
func (s *Sink) ResetFence(ctx context.Context, req fenceadmin.ResetRequest) (sink.Fence, error) {
	scope := req.Scope
	if err := scope.Validate(); err != nil {
		return sink.Fence{}, err
	}
	op := "reset " + scope.String()
	if strings.TrimSpace(req.Reason) == "" {
		return sink.Fence{}, fmt.Errorf("sqlite: %s: %w", op, ErrNoReason)
	}
	tx, done, err := s.begin(ctx, op)
	if err != nil {
		return sink.Fence{}, err
	}
	defer done()
	row, err := s.readFence(ctx, tx, scope)
	if err != nil {
		return sink.Fence{}, s.wrap(ctx, op, err)
	}
	if !row.found {
		return sink.Fence{}, fmt.Errorf("sqlite: %s: %w", op, sink.ErrNotFound)
	}
	before := row.fence(scope)
	stored, err := s.checkpointOf(ctx, tx, scope, row)
	if err != nil {
		return sink.Fence{}, s.wrap(ctx, op, err)
	}
	before.Done = stored.Done
	if e := req.Expect; e.Holder != before.Holder || e.NextOffset != before.NextOffset || e.TopicID != before.TopicID {
		return sink.Fence{}, fmt.Errorf("sqlite: %s: %w: expected holder %s at %d on %q, found %s at %d on %q", op, fenceadmin.ErrConflict,
			e.Holder, e.NextOffset, e.TopicID, before.Holder, before.NextOffset, before.TopicID)
	}
	after := fenceadmin.AfterReset(before, req)
	next, topicID := after.NextOffset, after.TopicID
	if _, err := tx.StmtContext(ctx, s.resetFence).ExecContext(ctx, next, topicID, len(after.Done), scope.Group, scope.Topic, scope.Partition); err != nil {
		return sink.Fence{}, s.wrap(ctx, op, err)
	}
	if err := s.storeSpans(ctx, tx, scope, stored.Done, after.Done); err != nil {
		return sink.Fence{}, s.wrap(ctx, op, err)
	}
	epoch, member := int64(-1), ""
	if !row.holder.IsZero() {
		epoch, member = row.epoch, row.member
	}
	if _, err := tx.StmtContext(ctx, s.insHistory).ExecContext(ctx,
		scope.Group, scope.Topic, scope.Partition, KindReset, epoch, member, next, req.Reason, now(), topicID, req.Detail, spantext.Format(after.Done), false); err != nil {
		return sink.Fence{}, s.wrap(ctx, op, err)
	}
	if err := s.commit(ctx, tx, op); err != nil {
		return sink.Fence{}, err
	}
	s.log.Warn("fence reset", "scope", scope.String(), "cleared_holder", before.Holder.String(),
		"next_offset_before", before.NextOffset, "next_offset", next, "topic_id", topicID, "reason", req.Reason)
	return before, nil
}

// History returns the accepted claims and the resets of scope, in the
// order they were committed (ascending Seq), each claim with the done
// spans it returned and each reset with those it kept (HistoryEntry.Done,
// stored as text, [spantext.Format]); nil for a scope never claimed.
// It fails with an error matching [epochs.ErrInvalidToken] for an invalid
// scope. It may be called from any goroutine.
func (s *Sink) History(ctx context.Context, scope epochs.Scope) ([]HistoryEntry, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	op := "history " + scope.String()
	rows, err := s.db.QueryContext(ctx, "SELECT seq, kind, epoch, member, next_offset, reason, at, topic_id, detail, done, proven FROM "+s.history+
		" WHERE grp = ? AND topic = ? AND part = ? ORDER BY seq", scope.Group, scope.Topic, scope.Partition)
	if err != nil {
		return nil, s.wrap(ctx, op, err)
	}
	defer rows.Close()
	var out []HistoryEntry
	for rows.Next() {
		var (
			e      HistoryEntry
			epoch  int64
			member string
			at     string
			done   string
		)
		if err := rows.Scan(&e.Seq, &e.Kind, &epoch, &member, &e.NextOffset, &e.Reason, &at, &e.TopicID, &e.Detail, &done, &e.Proven); err != nil {
			return nil, s.wrap(ctx, op, err)
		}
		if e.Done, err = spantext.Parse(done); err != nil {
			return nil, s.wrap(ctx, op, err)
		}
		e.Token = holderToken(scope, epoch, member)
		if e.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return nil, s.wrap(ctx, op, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, op, err)
	}
	return out, nil
}

// commitWithIDs records the command IDs a batch applied (applied, with
// ids: the batch carried IDs) in tx, prunes the scope's IDs below the
// dedupe horizon when next makes it due, and commits tx; then it tells
// the scope's cache of IDs what was committed (or, if the commit's outcome
// is unknown, drops it). The serial and the lanes' Apply end with it.
func (s *Sink) commitWithIDs(ctx context.Context, tx *sql.Tx, op string, scope epochs.Scope, row fenceRow, next int64, applied cmdids.Row, ids bool) error {
	horizon := cmdids.Horizon(next, s.cfg.DedupeWindow)
	prune := cmdids.PruneDue(row.nextOffset, next, s.cfg.DedupeWindow)
	if ids {
		if len(applied.IDs) > 0 {
			if _, err := tx.StmtContext(ctx, s.insIDs).ExecContext(ctx, scope.Group, scope.Topic, scope.Partition,
				applied.Offs[0], applied.Last, cmdids.Encode(applied.Offs[0], applied.Offs, applied.IDs)); err != nil {
				return s.wrap(ctx, op+": record command IDs", err)
			}
		}
		if prune {
			if _, err := tx.StmtContext(ctx, s.pruneIDs).ExecContext(ctx, scope.Group, scope.Topic, scope.Partition, horizon); err != nil {
				return s.wrap(ctx, op+": prune command IDs", err)
			}
		}
	}
	err := s.commit(ctx, tx, op)
	if err == nil && s.afterApplyCommit != nil {
		if herr := s.afterApplyCommit(); herr != nil {
			err = s.wrap(ctx, op+": commit", herr)
		}
	}
	if err != nil {
		if ids {
			s.ids.Drop(scope) // the commit may have happened
		}
		return err
	}
	if ids {
		s.ids.Committed(scope, row.idsVersion, applied, prune, horizon)
	}
	return nil
}
