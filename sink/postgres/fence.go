package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
	"github.com/workrouter/workrouter/sink/internal/spantext"
)

// maxAttempts bounds how often Apply runs a batch again after a retryable
// conflict (deadlock, serialization failure, or NextOffset moved under the
// same token by a concurrent Apply).
const maxAttempts = 8

// holderToken turns a stored holder into a token: zero for a reset holder
// (member empty) or a missing row.
func holderToken(scope epochs.Scope, epoch int32, member string) epochs.Token {
	if member == "" {
		return epochs.Token{}
	}
	return epochs.Token{Group: scope.Group, Topic: scope.Topic, Partition: scope.Partition, Epoch: epoch, Member: member}
}

// fenceRow is a scope's fence row as read inside a transaction.
type fenceRow struct {
	epoch         int32 // as stored: -1 after a reset
	member        string
	holder        epochs.Token // zero when nobody holds the scope
	nextOffset    int64
	topicID       string
	proofRequired bool
	duplicates    int64 // sink.Fence.Duplicates
	gapped        bool  // the scope may have done spans (gaps.go)
	idsVersion    int64 // the command IDs' version (cmdids)
}

// fence returns the row as the sink.Fence of scope.
func (r fenceRow) fence(scope epochs.Scope) sink.Fence {
	return sink.Fence{Scope: scope, Holder: r.holder, NextOffset: r.nextOffset, TopicID: r.topicID,
		ProofRequired: r.proofRequired, Duplicates: r.duplicates}
}

// lockFence reads scope's fence row inside tx and locks it (SELECT … FOR
// UPDATE) until tx ends. A missing row is pgx.ErrNoRows.
func (s *Sink) lockFence(ctx context.Context, tx pgx.Tx, scope epochs.Scope) (fenceRow, error) {
	var r fenceRow
	err := tx.QueryRow(ctx, s.q.fenceLock, scope.Group, scope.Topic, scope.Partition).
		Scan(&r.epoch, &r.member, &r.nextOffset, &r.topicID, &r.proofRequired, &r.duplicates, &r.gapped, &r.idsVersion)
	if err != nil {
		return fenceRow{}, err
	}
	r.holder = holderToken(scope, r.epoch, r.member)
	return r, nil
}

// rollback ends tx without the caller's ctx, which may be cancelled: a
// rollback must still reach the server (or pgx closes the connection).
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// Claim makes tok the holder of its scope and returns the scope's
// NextOffset, following [sink.Sink.Claim], in one transaction: it inserts
// the row of a new scope (no holder, at obs.LogStart), locks the row, and
// decides as the contract says — [sink.Fence.CheckClaim] (the holder,
// and the proof after a reset), the log's continuity ([sink.CheckLog]) —
// then stores tok and appends a "claim" row to the history. A refused
// claim changes nothing and returns a *[sink.FencedError] with the stored
// holder, a *[sink.ProofRequiredError], or a *[sink.LogChangedError]. Claim
// never waits for a running Apply's handler (only for an Apply that is
// between its fence UPDATE and COMMIT). It may be called from any
// goroutine.
//
// The checkpoint it returns is compacted: the done spans that touch the
// watermark raised it, their rows deleted, in the claim's transaction,
// and the log check compares [sink.Checkpoint.End] with obs.LogEnd.
func (s *Sink) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return s.claim(ctx, tok, obs, false)
}

// Features returns the sink's features: command IDs within
// [Config.DedupeWindow], gaps and dead letters ([sink.Features]). It may
// be called from any goroutine.
func (s *Sink) Features() sink.Features {
	return sink.Features{DedupeWindow: s.window, Gaps: true, DeadLetters: true}
}

// claim is Claim, and Claim when gapped: it returns the scope's
// whole checkpoint, compacted (gaps.go).
func (s *Sink) claim(ctx context.Context, tok epochs.Token, obs sink.Observed, gapped bool) (sink.Checkpoint, error) {
	defer s.views.drop(tok.Scope()) // view.go
	if err := tok.Validate(); err != nil {
		return sink.Checkpoint{}, err
	}
	op := "claim " + tok.String()
	if err := s.check(ctx, op); err != nil {
		return sink.Checkpoint{}, err
	}
	if err := s.writable(op); err != nil {
		return sink.Checkpoint{}, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return sink.Checkpoint{}, wrap(ctx, op, err)
	}
	defer rollback(ctx, tx)
	start, startTopic := int64(0), ""
	if obs.TopicID != "" {
		start, startTopic = max(obs.LogStart, 0), obs.TopicID
	}
	tag, err := tx.Exec(ctx, s.q.claimInsert, tok.Group, tok.Topic, tok.Partition, start, startTopic)
	if err != nil {
		return sink.Checkpoint{}, wrap(ctx, op, err)
	}
	inserted := tag.RowsAffected() == 1
	row, err := s.lockFence(ctx, tx, tok.Scope())
	if err != nil {
		return sink.Checkpoint{}, wrap(ctx, op+": read fence", err)
	}
	fence := row.fence(tok.Scope())
	if err := tx.QueryRow(ctx, s.q.fenceVersion, tok.Group, tok.Topic, tok.Partition).Scan(&fence.Version); err != nil {
		return sink.Checkpoint{}, wrap(ctx, op+": read fence version", err)
	}
	takeover, err := fence.CheckClaim(tok, obs)
	if err != nil {
		if errors.Is(err, sink.ErrFenced) {
			s.log.Debug("postgres sink: claim fenced", "offered", tok.String(), "stored", row.holder.String())
			return sink.Checkpoint{}, err
		}
		return sink.Checkpoint{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	// The done spans, read under the lock (no lane of the scope is
	// between its check and its COMMIT now), the watermark raised over
	// those that touch it.
	cp, spans, _, err := s.readCheckpoint(ctx, tx, tok.Scope(), row.nextOffset)
	if err != nil {
		return sink.Checkpoint{}, wrap(ctx, op+": read done spans", err)
	}
	_, topicID, err := sink.CheckLog(tok.Scope(), !inserted, row.topicID, cp, obs)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	if takeover {
		// As a reset of the earlier incarnation's holder, audited, then
		// the claim; a takeover sets the proof requirement for good.
		if _, err := tx.Exec(ctx, s.q.resetAudit, tok.Group, tok.Topic, tok.Partition, row.epoch, row.member, cp.NextOffset, fenceadmin.TakeoverReason,
			row.topicID, obs.TakeoverDetail(tok), spantext.Format(cp.Done)); err != nil {
			return sink.Checkpoint{}, wrap(ctx, op+": audit the takeover", err)
		}
		if _, err := tx.Exec(ctx, s.q.requireProof, tok.Group, tok.Topic, tok.Partition); err != nil {
			return sink.Checkpoint{}, wrap(ctx, op, err)
		}
		s.log.Warn("postgres sink: fence taken over by a proven claim below its holder", "scope", tok.Scope().String(), "cleared", row.holder.String(),
			"claim", tok.String(), "group_epoch", obs.Proof.GroupEpoch)
	}
	if _, err := tx.Exec(ctx, s.q.claimUpdate, tok.Group, tok.Topic, tok.Partition, tok.Epoch, tok.Member, topicID); err != nil {
		return sink.Checkpoint{}, wrap(ctx, op, err)
	}
	if spans > 0 || row.gapped || gapped {
		// Compact, keep the scope gapped for a claim with lanes (or while
		// spans remain), and move the IDs version on if lanes may have
		// recorded IDs without moving it (gaps.go).
		if err := s.storeCheckpoint(ctx, tx, tok.Scope(), cp.NextOffset, false, gapped || len(cp.Done) > 0, row.gapped); err != nil {
			return sink.Checkpoint{}, wrap(ctx, op+": compact done spans", err)
		}
	}
	if _, err := tx.Exec(ctx, s.q.claimHistory, tok.Group, tok.Topic, tok.Partition, tok.Epoch, tok.Member, cp.NextOffset, topicID, spantext.Format(cp.Done),
		fence.ProvenBy(obs)); err != nil {
		return sink.Checkpoint{}, wrap(ctx, op+": history", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return sink.Checkpoint{}, wrap(ctx, op+": commit", err)
	}
	s.gaps.observe(tok.Scope(), len(cp.Done))
	return cp, nil
}

// Apply applies a batch of records of tok's scope in one transaction,
// following [sink.Sink.Apply]: in the round trip that begins the
// transaction it reads the fence row without locking it, and refuses at
// once (nothing run) unless tok is exactly the holder; it skips offsets
// below NextOffset, runs effect for each remaining record index in order
// with the transaction, and then sends, in one round trip, an UPDATE of
// NextOffset conditioned on the holder being tok and NextOffset unchanged,
// made to raise when it matches no row, and COMMIT. That UPDATE is the
// authoritative fence check: if it matched no row, the server skips the
// COMMIT, and Apply rolls back, reads the stored holder (one more round
// trip, only then) and returns a *[sink.FencedError]. A batch thus costs
// the round trips of the same writes without a fence: BEGIN, the
// effects', COMMIT (docs/performance.md).
//
// An effect error rolls back and returns a *[sink.EffectError]. A batch
// whose transaction hit a deadlock or serialization failure is run again
// (effects may therefore run more than once). A COMMIT whose outcome is
// unknown returns an error matching [ErrOutcomeUnknown] — never
// [sink.ErrFenced] — and retrying the same batch is safe. A cancelled ctx
// returns an error matching it, with nothing applied.
//
// With b.IDs (a serial batch): the early fence read also returns the fence row's IDs
// version; the batch's IDs are looked up in the scope's retained IDs (a
// per-Sink cache, used when it mirrors that version, else loaded from
// <prefix>_command_ids in the transaction); the effects of the records
// that are not duplicates run in order; then the conditional UPDATE of
// the fence row (the authoritative check, which also requires the IDs
// version read and bumps it), the insert of the applied IDs as one row,
// when due the delete of the rows whose last offset is
// below the new horizon (an index range on (scope, last_off)), and COMMIT
// go in one round trip. Two attempts that looked up the same version
// cannot both commit: the version is part of the fenced compare-and-set.
// A refusal, an effect error, a conflict or a cancelled ctx rolls it all
// back and records nothing; a batch run again after a conflict decides
// its duplicates again.
//
// A lane's batch (b.From) is applied in one transaction that does not update the fence row: a plain read of
// the fence and of the done spans the batch overlaps (an early refusal
// unless tok holds the scope), the effects of the records not done (and,
// with b.IDs, not duplicates) in order in a transaction that begins with
// their first statement, then the guard, in one round trip: advisory
// locks on the batch's records (on its scope, for more than 256 records)
// and the read again, so that a record another unit of the tenure
// committed since the first read (a late attempt, a retry of another
// shape, a dead letter) makes the batch run again without it; then, in
// one pipeline, one statement that takes the fence row FOR SHARE, checks
// that tok still holds it and that the watermark is not above the
// batch's first new span, and inserts the batch's spans (the parts of
// [From[i], Offsets[i]+1) that the guard's read does not hold) or
// raises, the IDs' row, and COMMIT. A batch thus costs the round trips
// of its handler's statements plus three. Any number of a tenure's
// lanes' batches run concurrently for one scope; of those that share
// a record, one applies it. The share lock is held only while the server
// runs the last pipeline, the advisory locks from the guard to COMMIT. A
// refusal returns a *[sink.FencedError]; a watermark that moved over the
// batch, a record done by another unit meanwhile, a deadlock or a
// serialization failure run the batch again; an effect error returns a
// *[sink.EffectError]; a COMMIT of unknown outcome [ErrOutcomeUnknown].
//
// The result's NextOffset is a watermark the transaction saw, possibly
// lower than the scope's: the watermark rises lazily (on claims and in
// compactions that every 32nd lane batch of a scope tries after its
// commit, giving up when lanes hold the fence row for 100 ms).
//
// With b.IDs, a record is a duplicate when its ID was applied in the
// scope within the window by an earlier tenure, by a serial Apply with IDs, by
// this lane, or by another lane of this tenure whose batch committed
// before this one looked it up. Two records with one command ID in two
// lanes running at once (different keys) may both be applied: a resend
// has its command's key, and so its lane. The lanes do not prune the IDs;
// the compactions and the serial Applies with IDs do.
//
// Apply may be called from any goroutine; effect is called on the calling
// goroutine, with a pgx.Tx that must not be used after effect returns.
func (s *Sink) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[pgx.Tx]) (sink.Result, error) {
	if b.From != nil {
		defer s.views.drop(tok.Scope()) // view.go: the scope is gapped
	}
	if err := sink.CheckBatch(tok, b, effect, s.Features()); err != nil {
		return sink.Result{}, err
	}
	if b.From != nil {
		return s.applyGapped(ctx, tok, b, effect, nil)
	}
	return s.apply(ctx, tok, b.Offsets, b.IDs, effect)
}

// apply is Apply of a serial batch, with command IDs when ids is not nil.
func (s *Sink) apply(ctx context.Context, tok epochs.Token, offsets []int64, ids []string, effect sink.Effect[pgx.Tx]) (sink.Result, error) {
	op := "apply " + tok.String()
	if err := s.writable(op); err != nil {
		return sink.Result{}, err
	}
	for attempt := 1; ; attempt++ {
		if err := s.check(ctx, op); err != nil {
			return sink.Result{}, err
		}
		gen := s.views.gen(tok.Scope()) // before the attempt begins (view.go)
		res, retry, err := s.applyAttempt(ctx, tok, offsets, ids, effect, gen)
		if err != nil {
			s.views.drop(tok.Scope()) // the next attempt reads the fence
		}
		if !retry || attempt == maxAttempts {
			return res, err
		}
		s.log.Debug("postgres sink: apply conflict, running the batch again", "token", tok.String(), "attempt", attempt, "err", err)
	}
}

// applyAttempt is one attempt of Apply (with IDs when ids is not
// nil). retry reports a conflict after which the batch should be run
// again.
//
// Its round trips: BEGIN and the fence read in one pipeline; the effects'
// own; the checked advance (with the row of IDs and the prune of an Apply with IDs) and
// COMMIT in one pipeline. A checked advance that matches no row raises,
// so the server skips the COMMIT queued behind it; only then does a third
// pipeline (ROLLBACK and the fence read) learn the stored holder.
func (s *Sink) applyAttempt(ctx context.Context, tok epochs.Token, offsets []int64, ids []string, effect sink.Effect[pgx.Tx], gen uint64) (res sink.Result, retry bool, err error) {
	op := "apply " + tok.String()
	if v, ok := s.views.get(tok); ok {
		if res, retry, err, used := s.applyOnView(ctx, tok, offsets, ids, effect, v, gen); used {
			return res, retry, err
		}
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, false, wrap(ctx, op, err)
	}
	defer release(ctx, c)
	conn := c.Conn()

	// BEGIN and the early refusal (a plain read, no lock) in one round
	// trip.
	var (
		epoch      int32
		member     string
		next       int64
		idsVersion int64
		gapped     bool
	)
	begin := &pgx.Batch{}
	begin.BeginTx(pgx.TxOptions{})
	begin.Queue(s.q.fenceRead, tok.Group, tok.Topic, tok.Partition)
	br := conn.SendBatch(ctx, begin)
	tx := br.Tx()
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&epoch, &member, &next, &idsVersion, &gapped)
	}
	if cerr := br.Close(); err == nil || errors.Is(err, pgx.ErrNoRows) && cerr != nil {
		err = cerr
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return res, false, s.fenced(tok, epochs.Token{})
	case err != nil:
		return res, retryable(err), wrap(ctx, op+": begin, read fence", err)
	}
	if stored := holderToken(tok.Scope(), epoch, member); !tok.Holds(stored) {
		return res, false, s.fenced(tok, stored)
	}
	if gapped {
		// The scope has done spans (a worker with lanes held it): the
		// plain batch skips them too (gaps.go).
		return s.applyOnGapped(ctx, tx, tok, offsets, ids, effect, next, idsVersion)
	}

	first, _ := slices.BinarySearch(offsets, next)
	if first == len(offsets) {
		// A replay: nothing to apply, nothing to write.
		return sink.Result{Skipped: first, NextOffset: next}, false, nil
	}
	var (
		dup    []bool // by index: a duplicate, not run
		loaded bool   // the cache was loaded in this transaction
	)
	if ids != nil {
		if dup, loaded, err = s.duplicates(ctx, tx, tok.Scope(), idsVersion, offsets, ids, first); err != nil {
			return res, retryable(err) && ctx.Err() == nil, wrap(ctx, op+": look up command IDs", err)
		}
		if loaded {
			// What the load read may be newer than idsVersion (another
			// statement, another snapshot): keep it only if this
			// transaction's compare-and-set on the version commits.
			defer func() {
				if err != nil {
					s.ids.Drop(tok.Scope())
				}
			}()
		}
	}
	htx := &handlerTx{Tx: tx}
	defer htx.done.Store(true)
	dups, retry, err := s.runEffects(ctx, op, htx, offsets, first, dup, effect)
	if err != nil {
		return res, retry, err
	}
	return s.commitBatch(ctx, conn, false, tok, offsets, ids, first, dup, dups, next, idsVersion, gen)
}

// applyOnView is an attempt of Apply (with or without IDs) on tok's view
// (view.go): no early read; the effects' transaction begins at their
// first statement, or with the checked advance and COMMIT if they ran
// none. used is false, with nothing done, when the batch needs the early
// read: a replay (nothing to write, so nothing would check the holder),
// or IDs the cache does not hold at the view's version.
func (s *Sink) applyOnView(ctx context.Context, tok epochs.Token, offsets []int64, ids []string, effect sink.Effect[pgx.Tx], v view, gen uint64) (res sink.Result, retry bool, err error, used bool) {
	op := "apply " + tok.String()
	first, _ := slices.BinarySearch(offsets, v.next)
	if first == len(offsets) {
		return res, false, nil, false
	}
	var dup []bool
	if ids != nil {
		var ok bool
		if dup, ok = s.cachedDuplicates(tok.Scope(), v.idsVersion, offsets, ids, first); !ok {
			return res, false, nil, false
		}
	}
	ltx := &laneTx{pool: s.pool, ctx: ctx}
	defer ltx.release(ctx)
	dups, retry, err := s.runEffects(ctx, op, ltx, offsets, first, dup, effect)
	if err != nil {
		// The effects ran without the early read: a tenure fenced since
		// the view may fail on what the new holder wrote (a duplicate
		// key, a lock timeout). Roll back and read the fence, so that a
		// superseded tenure is refused as fenced, not as a failed effect.
		ltx.release(ctx)
		if ferr := s.fencedSinceView(ctx, tok); ferr != nil {
			return res, false, ferr, true
		}
		return res, retry, err, true
	}
	if ltx.err != nil {
		// The transaction could not begin (the effects may have ignored
		// the error): nothing was written.
		return res, retryable(ltx.err) && ctx.Err() == nil, wrap(ctx, op, ltx.err), true
	}
	conn, begin, err := ltx.commitConn(ctx)
	if err != nil {
		return res, retryable(err) && ctx.Err() == nil, wrap(ctx, op+": acquire", err), true
	}
	res, retry, err = s.commitBatch(ctx, conn, begin, tok, offsets, ids, first, dup, dups, v.next, v.idsVersion, gen)
	return res, retry, err, true
}

// fencedSinceView reads tok's fence row (a plain read on a pooled
// connection) and returns tok's refusal if another holder (or none)
// stores it now; nil if tok holds it or the read fails (the caller keeps
// its own error).
func (s *Sink) fencedSinceView(ctx context.Context, tok epochs.Token) error {
	stored, err := s.readHolder(ctx, tok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s.fenced(tok, epochs.Token{})
	case err != nil:
		return nil
	}
	if !tok.Holds(stored) {
		return s.fenced(tok, stored)
	}
	return nil
}

// readHolder reads the holder that tok's fence row stores, with a plain
// read on a pooled connection; pgx.ErrNoRows (and the zero epoch and
// member's token) if the scope has no row.
func (s *Sink) readHolder(ctx context.Context, tok epochs.Token) (epochs.Token, error) {
	var (
		epoch  int32
		member string
	)
	err := s.pool.QueryRow(ctx, s.q.fenceRead, tok.Group, tok.Topic, tok.Partition).Scan(&epoch, &member, new(int64), new(int64), new(bool))
	return holderToken(tok.Scope(), epoch, member), err
}

// txHealthy reports whether tx, the transaction an effect just failed in,
// is still sound (sink.EffectError.TxHealthy): a statement that failed
// aborts a PostgreSQL transaction and a lost connection closes it, so a
// transaction still in progress on an open connection means the effect's
// error did not come from the sink. A lane's transaction that never began
// is sound; one that could not begin is not.
func txHealthy(tx pgx.Tx) bool {
	if lt, ok := tx.(*laneTx); ok {
		if lt.err != nil {
			return false
		}
		if lt.Tx == nil {
			return true
		}
		tx = lt.Tx
	}
	c := tx.Conn()
	return c != nil && !c.IsClosed() && c.PgConn().TxStatus() == 'T'
}

// runEffects runs effect for the records of offsets from index first on
// that are not duplicates (dup, nil without IDs), in order, on tx, and
// returns the duplicates' indexes.
func (s *Sink) runEffects(ctx context.Context, op string, tx pgx.Tx, offsets []int64, first int, dup []bool, effect sink.Effect[pgx.Tx]) (dups []int, retry bool, err error) {
	for i := first; i < len(offsets); i++ {
		if err := ctx.Err(); err != nil {
			return nil, false, fmt.Errorf("postgres: %s: %w", op, err)
		}
		if dup != nil && dup[i] {
			dups = append(dups, i)
			continue
		}
		if err := effect(ctx, tx, i); err != nil {
			return nil, retryable(err) && ctx.Err() == nil, &sink.EffectError{Index: i, Offset: offsets[i], Err: err, TxHealthy: txHealthy(tx)}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("postgres: %s: %w", op, err)
	}
	return dups, false, nil
}

// commitBatch ends an attempt whose effects ran in the transaction open
// on conn (or, with begin, in none yet: BEGIN leads the pipeline) on the
// fence as read or viewed (next, idsVersion): the authoritative check,
// the row of IDs and the prune of an Apply with IDs, and COMMIT in one round trip. On
// success it records the view the commit left, unless the scope's view
// was dropped since gen (view.go).
func (s *Sink) commitBatch(ctx context.Context, conn *pgx.Conn, begin bool, tok epochs.Token, offsets []int64, ids []string,
	first int, dup []bool, dups []int, next, idsVersion int64, gen uint64) (res sink.Result, retry bool, err error) {
	op := "apply " + tok.String()
	if !begin {
		if err := s.txEnded(conn, op); err != nil {
			return res, false, err
		}
	}
	// The authoritative check: advance NextOffset only if tok still holds
	// the scope, no other Apply moved NextOffset meanwhile and the scope
	// has no gaps, else raise (the COMMIT behind it is then skipped and
	// the transaction aborted). the row of IDs and the prune of an Apply with IDs ride in
	// the same round trip, and roll back with the rest if the check
	// fails.
	newNext := offsets[len(offsets)-1] + 1
	var (
		applied cmdids.Row
		horizon = cmdids.Horizon(newNext, s.window)
		prune   = cmdids.PruneDue(next, newNext, s.window)
		end     = &pgx.Batch{}
		check   = 0 // the index of the check in end
	)
	if begin {
		end.BeginTx(pgx.TxOptions{})
		check = 1
	}
	if ids == nil {
		end.Queue(s.q.advanceCheck, tok.Group, tok.Topic, tok.Partition, tok.Epoch, tok.Member, next, newNext)
	} else {
		// The advance is also the IDs version's compare-and-set.
		end.Queue(s.q.advanceOnceCheck, tok.Group, tok.Topic, tok.Partition, tok.Epoch, tok.Member, next, newNext, idsVersion, int64(len(dups)))
		applied = appliedRow(offsets, ids, first, dup)
		if len(applied.IDs) > 0 {
			end.Queue(s.q.idInsert, tok.Group, tok.Topic, tok.Partition, applied.Offs[0], applied.Last,
				cmdids.Encode(applied.Offs[0], applied.Offs, applied.IDs))
		}
		if prune {
			end.Queue(s.q.idPrune, tok.Group, tok.Topic, tok.Partition, horizon)
		}
	}
	end.Queue("commit")
	failed, err := sendAll(ctx, conn, end)
	switch {
	case err == nil:
	case failed == check && fenceCheckFailed(err):
		return s.afterFailedCheck(ctx, conn, tok, op, next)
	case isServerError(err) && failed < end.Len():
		// The server refused a statement: everything after it up to
		// the pipeline's end, the COMMIT included, was skipped.
		if failed == end.Len()-1 {
			return res, retryable(err) && ctx.Err() == nil, wrap(ctx, op+": commit (rolled back)", err)
		}
		return res, retryable(err) && ctx.Err() == nil, wrap(ctx, op+": advance fence", err)
	default:
		// The pipeline was sent, COMMIT with it: it may have run.
		if ids != nil {
			s.ids.Drop(tok.Scope())
		}
		return res, false, commitError(ctx, op, err)
	}
	if st := conn.PgConn().TxStatus(); st != 'I' {
		// Not expected: COMMIT answered, yet a transaction is open (the
		// release rolls it back).
		if ids != nil {
			s.ids.Drop(tok.Scope())
		}
		return res, false, commitError(ctx, op, fmt.Errorf("the server reports transaction status %q after COMMIT", st))
	}
	if ids != nil {
		s.ids.Committed(tok.Scope(), idsVersion, applied, prune, horizon)
		idsVersion++
	}
	if s.afterCommit != nil {
		s.afterCommit() // tests: a claim racing the reply
	}
	s.views.set(view{tok: tok, next: newNext, idsVersion: idsVersion}, gen)
	return sink.Result{Applied: len(offsets) - first - len(dups), Skipped: first, NextOffset: newNext,
		Duplicates: dups}, false, nil
}

// afterFailedCheck is the end of an attempt whose checked advance matched
// no row (its transaction is aborted): in one round trip it rolls back and
// reads the fence row, and returns tok's refusal with the stored holder,
// or a conflict to run the batch again if tok still holds the scope but
// NextOffset (or the IDs version) moved from expected.
func (s *Sink) afterFailedCheck(ctx context.Context, conn *pgx.Conn, tok epochs.Token, op string, expected int64) (sink.Result, bool, error) {
	var (
		res        sink.Result
		epoch      int32
		member     string
		next       int64
		idsVersion int64
	)
	b := &pgx.Batch{}
	b.Queue("rollback")
	b.Queue(s.q.fenceRead, tok.Group, tok.Topic, tok.Partition)
	br := conn.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&epoch, &member, &next, &idsVersion, new(bool))
	}
	if cerr := br.Close(); err == nil || errors.Is(err, pgx.ErrNoRows) && cerr != nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return res, false, wrap(ctx, op+": read fence", err)
	}
	stored := holderToken(tok.Scope(), epoch, member)
	if errors.Is(err, pgx.ErrNoRows) || !tok.Holds(stored) {
		return res, false, s.fenced(tok, stored)
	}
	// Still the holder, but NextOffset moved: a concurrent Apply by the
	// same tenure committed first. Run again on the new state.
	return res, true, fmt.Errorf("postgres: %s: %w: NextOffset moved from %d to %d during the batch", op, ErrConflict, expected, next)
}

// sendAll sends b in one pipeline and reads every result. On an error it
// returns the index of the statement whose result carried it (b.Len()
// when only closing the batch failed).
func sendAll(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) (failed int, err error) {
	br := conn.SendBatch(ctx, b)
	failed = b.Len()
	for i := range b.Len() {
		if _, err = br.Exec(); err != nil {
			failed = i
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return failed, err
}

// fenceCheckFailed reports whether err is the raise of a checked advance
// (queries.advanceCheck) that matched no row.
func fenceCheckFailed(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, fenceCheckMarker)
}

// isServerError reports whether err is an error reply of the server (the
// statement, and the rest of its pipeline, did not run).
func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// release ends what an attempt left of c's transaction (a rollback,
// without the caller's ctx, which may be cancelled: it must still reach
// the server) and returns c to the pool, which closes it if it is broken
// or still in a transaction.
func release(ctx context.Context, c *pgxpool.Conn) {
	conn := c.Conn()
	if !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if _, err := conn.Exec(rctx, "rollback"); err != nil {
			_ = conn.Close(rctx) // an unknown state: the pool must not hand it out
		}
		cancel()
	}
	c.Release()
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
// scope's rows into it (loaded) if it does not mirror version, the fence
// row's IDs version the attempt read.
func (s *Sink) duplicates(ctx context.Context, tx pgx.Tx, scope epochs.Scope, version int64, offsets []int64, ids []string, first int) (dup []bool, loaded bool, err error) {
	if dup, ok := s.cachedDuplicates(scope, version, offsets, ids, first); ok {
		return dup, false, nil
	}
	rows, err := tx.Query(ctx, s.q.idSelect, scope.Group, scope.Topic, scope.Partition)
	if err != nil {
		return nil, false, err
	}
	var (
		rowFirst, last int64
		data           []byte
		all            []cmdids.Row
	)
	_, err = pgx.ForEachRow(rows, []any{&rowFirst, &last, &data}, func() error {
		offs, rowIDs, err := cmdids.Decode(rowFirst, data)
		if err != nil {
			return err
		}
		all = append(all, cmdids.Row{Last: last, Offs: offs, IDs: rowIDs})
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	s.ids.Load(scope, version, all)
	dup, _ = s.cachedDuplicates(scope, version, offsets, ids, first)
	return dup, true, nil
}

// cachedDuplicates is duplicates from the cache alone: ok is false when
// the cache does not mirror version and the batch has IDs to look up.
func (s *Sink) cachedDuplicates(scope epochs.Scope, version int64, offsets []int64, ids []string, first int) (dup []bool, ok bool) {
	dup = make([]bool, len(offsets))
	plan := cmdids.PlanBatch(ids, first)
	for _, i := range plan.InBatch {
		dup[i] = true
	}
	if len(plan.Lookup) == 0 {
		return dup, true
	}
	found := func(i int, applied int64) { dup[i] = cmdids.IsDuplicate(offsets[i], applied, s.window) }
	if !s.ids.Lookup(scope, version, ids, plan.Lookup, found) {
		return nil, false
	}
	return dup, true
}

// fenced logs and returns the refusal of an Apply by tok.
func (s *Sink) fenced(tok, stored epochs.Token) error {
	s.log.Debug("postgres sink: apply fenced", "offered", tok.String(), "stored", stored.String())
	return &sink.FencedError{Op: sink.OpApply, Stored: stored, Offered: tok}
}

// commitError classifies a COMMIT failure: a server-side refusal (an error
// reply, or a ROLLBACK reply) means the transaction was rolled back;
// anything else (the connection dropped, ctx cancelled while waiting for
// the reply) leaves the outcome unknown. pgconn.SafeToRetry is not used:
// pgx reports a connection that died while reading COMMIT's reply as a
// safe-to-retry "conn closed" although COMMIT was sent.
func commitError(ctx context.Context, op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.Is(err, pgx.ErrTxCommitRollback) || errors.As(err, &pgErr) {
		return wrap(ctx, op+": commit (rolled back)", err)
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("postgres: %s: commit: %w: %w (%w)", op, ErrOutcomeUnknown, cerr, err)
	}
	return fmt.Errorf("postgres: %s: commit: %w: %w", op, ErrOutcomeUnknown, err)
}

// retryable reports whether err aborted the transaction in a way that
// running it again may cure: a deadlock or a serialization failure.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// Fences returns the stored fence of every scope, sorted by group, topic
// and partition; a reset scope has a zero Holder. A gapped scope's fence
// has its done spans (Done, merged) and the watermark raised over those
// that touch it, read in the same snapshot. It implements
// [fenceadmin.Lister] and may be called from any goroutine.
func (s *Sink) Fences(ctx context.Context) ([]sink.Fence, error) {
	if err := s.check(ctx, "fences"); err != nil {
		return nil, err
	}
	// The fences and the done spans in one snapshot.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, wrap(ctx, "fences", err)
	}
	defer rollback(ctx, tx)
	rows, err := tx.Query(ctx, s.q.fenceList)
	if err != nil {
		return nil, wrap(ctx, "fences", err)
	}
	var (
		f      sink.Fence
		epoch  int32
		member string
		out    []sink.Fence
	)
	_, err = pgx.ForEachRow(rows, []any{&f.Scope.Group, &f.Scope.Topic, &f.Scope.Partition, &epoch, &member, &f.NextOffset, &f.TopicID, &f.ProofRequired, &f.Duplicates, &f.Version}, func() error {
		f.Holder = holderToken(f.Scope, epoch, member)
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, wrap(ctx, "fences", err)
	}
	if err := s.mergeDone(ctx, tx, out); err != nil {
		return nil, wrap(ctx, "fences: done spans", err)
	}
	return out, nil
}

// ResetFence resets a scope's fence following [fenceadmin.Resetter], in one
// transaction: it locks the row, compares it with req.Expect (holder,
// NextOffset, topic ID), clears the holder (stored as epoch -1, member
// empty), keeps or moves NextOffset and the topic ID as req says, requires
// a proof of membership from every later claim (it stores
// [fenceadmin.AfterReset]), and appends a "reset" row
// with req.Reason and req.Detail to the history. It returns the fence as
// it was. An empty reason fails with [ErrNoReason], an unknown scope with
// [sink.ErrNotFound], a moved fence with [fenceadmin.ErrConflict]. It may
// be called from any goroutine, but only by an operator: it lifts the
// fence.
func (s *Sink) ResetFence(ctx context.Context, req fenceadmin.ResetRequest) (sink.Fence, error) {
	scope := req.Scope
	defer s.views.drop(scope) // view.go
	if err := scope.Validate(); err != nil {
		return sink.Fence{}, err
	}
	op := "reset " + scope.String()
	if strings.TrimSpace(req.Reason) == "" {
		return sink.Fence{}, fmt.Errorf("postgres: %s: %w", op, ErrNoReason)
	}
	if err := s.check(ctx, op); err != nil {
		return sink.Fence{}, err
	}
	if err := s.writable(op); err != nil {
		return sink.Fence{}, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return sink.Fence{}, wrap(ctx, op, err)
	}
	defer rollback(ctx, tx)
	row, err := s.lockFence(ctx, tx, scope)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return sink.Fence{}, fmt.Errorf("postgres: %s: %w", op, sink.ErrNotFound)
	case err != nil:
		return sink.Fence{}, wrap(ctx, op, err)
	}
	before := row.fence(scope)
	// A gapped checkpoint as Fences shows it (the reset compares and
	// keeps that).
	cp, spans, dups, err := s.readCheckpoint(ctx, tx, scope, row.nextOffset)
	if err != nil {
		return sink.Fence{}, wrap(ctx, op+": read done spans", err)
	}
	before.NextOffset, before.Done, before.Duplicates = cp.NextOffset, cp.Done, before.Duplicates+dups
	if e := req.Expect; e.Holder != before.Holder || e.NextOffset != before.NextOffset || e.TopicID != before.TopicID {
		return sink.Fence{}, fmt.Errorf("postgres: %s: %w: expected holder %s at %d on %q, found %s at %d on %q", op, fenceadmin.ErrConflict,
			e.Holder, e.NextOffset, e.TopicID, before.Holder, before.NextOffset, before.TopicID)
	}
	after := fenceadmin.AfterReset(before, req)
	newNext, newTopic := after.NextOffset, after.TopicID
	if _, err := tx.Exec(ctx, s.q.reset, scope.Group, scope.Topic, scope.Partition, newNext, newTopic); err != nil {
		return sink.Fence{}, wrap(ctx, op, err)
	}
	if spans > 0 || row.gapped {
		// The same log keeps the spans (compacted); a new one drops them.
		if err := s.storeCheckpoint(ctx, tx, scope, newNext, req.NextOffset != nil, req.NextOffset == nil && len(after.Done) > 0, row.gapped); err != nil {
			return sink.Fence{}, wrap(ctx, op+": done spans", err)
		}
	}
	if _, err := tx.Exec(ctx, s.q.resetAudit, scope.Group, scope.Topic, scope.Partition, row.epoch, row.member, newNext, req.Reason, newTopic, req.Detail,
		spantext.Format(after.Done)); err != nil {
		return sink.Fence{}, wrap(ctx, op+": audit", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return sink.Fence{}, wrap(ctx, op+": commit", err)
	}
	s.log.Warn("postgres sink: fence reset", "scope", scope.String(), "cleared", before.Holder.String(), "next_offset_before", before.NextOffset,
		"next_offset", newNext, "topic_id", newTopic, "done_spans_before", len(before.Done), "done_spans", len(after.Done), "reason", req.Reason)
	return before, nil
}

// HistoryEntry is one row of a scope's history, see [Sink.History]; At is
// the server's transaction time of the entry.
type HistoryEntry = fenceadmin.Entry

// History returns the claims and resets of scope in order (empty for a
// scope never claimed), each claim with the done spans it returned and
// each reset with those it kept (HistoryEntry.Done, stored as text,
// [spantext.Format]). It may be called from any goroutine.
func (s *Sink) History(ctx context.Context, scope epochs.Scope) ([]HistoryEntry, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	op := "history " + scope.String()
	if err := s.check(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.q.historyList, scope.Group, scope.Topic, scope.Partition)
	if err != nil {
		return nil, wrap(ctx, op, err)
	}
	var (
		e      HistoryEntry
		epoch  int32
		member string
		done   string
		out    []HistoryEntry
	)
	_, err = pgx.ForEachRow(rows, []any{&e.Seq, &e.Kind, &epoch, &member, &e.NextOffset, &e.Reason, &e.At, &e.TopicID, &e.Detail, &done, &e.Proven}, func() error {
		e.Token = holderToken(scope, epoch, member)
		var err error
		if e.Done, err = spantext.Parse(done); err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, wrap(ctx, op, err)
	}
	return out, nil
}

// errRow is a pgx.Row whose Scan returns err.
type errRow struct{ err error }

// Scan returns the row's error.
func (r errRow) Scan(...any) error { return r.err }
