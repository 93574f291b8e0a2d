package postgres

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
)

// The checkpoint with gaps (sink.Features.Gaps, docs/postgres.md#gaps).
//
// A scope's done spans above its watermark are in rows of <prefix>_done,
// one row per lane batch (from the start of its first span to the end of
// its last, with all its spans encoded when it has several: spans.go),
// and the fence row's gapped flag says that the scope may have some. The lanes of a tenure (a lane's Apply) never update the
// fence row: each lane reads the fence and the spans its batch overlaps
// (a plain read, no lock, on a connection that goes back to the pool
// before the effects run), runs its effects in a transaction that begins
// at their first statement (laneTx), then guards against the other units
// of the tenure that share records with it (laneGuard: advisory locks on
// its records, and the read again), and then, in one statement
// pipelined with COMMIT, takes the
// fence row FOR SHARE, checks the holder (and that the watermark did not
// move over its offsets) and inserts its spans, raising when the check
// fails so that the COMMIT does not run. Share locks do not conflict with
// each other, and a lane holds one only while the server runs that
// pipeline; a Claim (FOR UPDATE) waits only for lanes that are
// committing, never for a running handler, and a lane that checks after a
// Claim committed sees the new holder and rolls back.
//
// The guard is what keeps a record from being applied by two units of
// one tenure that both read it as not done (a late attempt and a retry
// of another shape, or a dead letter and an apply of one record): the
// done rows cannot refuse that themselves, since one row covers a whole
// lane batch, and the rows of interleaved lanes' batches have ranges
// that overlap while their spans do not. Units that share a record share
// a lock, so the second to take it reads the first one's row, and runs
// again without the record.
//
// The watermark (the fence row's next_offset) rises lazily, under the
// fence row's exclusive lock: on every claim, and in a compaction that
// every compactEvery-th lane batch of a scope tries after its commit,
// with FOR UPDATE and a lock_timeout of compactLockWait (it gives up,
// counted and logged, when lanes keep the share lock that long; FOR
// UPDATE NOWAIT gave up 10 times in 12 with 16 lanes). A compaction
// raises the watermark over the spans that touch it, deletes their rows
// (folding their duplicate counts into the fence's), and prunes the
// command IDs below the new horizon.

// compactEvery is how many lane batches of a scope (in one Sink) pass
// between two compaction attempts.
const compactEvery = 32

// compactLockWait is how long a compaction waits for the fence row's
// exclusive lock (lock_timeout) before it gives up.
const compactLockWait = 100 * time.Millisecond

// gapQueries is the SQL of the checkpoint with gaps.
type gapQueries struct {
	done string // the done spans table, qualified and quoted

	laneRead, laneCommit, setGapped  string
	spans, spansList, store, advance string
	lockCompact                      string
}

func newGapQueries(schema, prefix string, q queries) gapQueries {
	g := gapQueries{done: pgx.Identifier{schema, prefix + "_done"}.Sanitize()}
	// A lane's first read, one statement (one snapshot): the fence and
	// the rows whose spans may overlap [$4, $5), the batch's range (the
	// rows of the scope above the watermark are the batches since its
	// last compaction: a few per lane).
	g.laneRead = fmt.Sprintf(`SELECT f.epoch, f.member, f.next_offset, f.ids_version, f.gapped, f.topic_id,
		coalesce(s.froms, '{}'), coalesce(s.tos, '{}'), coalesce(s.spans, '{}')
		FROM %[1]s f LEFT JOIN LATERAL (
			SELECT array_agg(from_off) AS froms, array_agg(to_off) AS tos, array_agg(spans) AS spans
			FROM %[2]s WHERE grp = $1 AND topic = $2 AND part = $3 AND to_off > $4 AND from_off < $5
		) s ON true
		WHERE f.grp = $1 AND f.topic = $2 AND f.part = $3`, q.fences, g.done)
	// A lane's check and write, one statement: the fence row FOR SHARE,
	// the batch's row [$6, $7) (dups $8, spans $9) inserted only if tok
	// holds it and the watermark is not above the row's first span;
	// unless it was inserted it raises (fenceCheckMarker), so that the
	// COMMIT pipelined behind it does not run.
	g.laneCommit = fmt.Sprintf(`WITH f AS (
			SELECT epoch, member, next_offset FROM %[1]s WHERE grp = $1 AND topic = $2 AND part = $3 FOR SHARE
		), ins AS (
			INSERT INTO %[2]s (grp, topic, part, from_off, to_off, dups, spans)
			SELECT $1, $2, $3, $6, $7, $8, $9::bytea FROM f
			WHERE f.epoch = $4 AND f.member = $5 AND f.next_offset <= $6
			RETURNING 1
		)
		SELECT (CASE WHEN count(*) = 1 THEN '1' ELSE '`+fenceCheckMarker+`' END)::int FROM ins`, q.fences, g.done)
	g.setGapped = fmt.Sprintf(`UPDATE %s SET gapped = true WHERE grp = $1 AND topic = $2 AND part = $3 AND epoch = $4 AND member = $5`, q.fences)
	g.spans = fmt.Sprintf(`SELECT from_off, to_off, dups, spans FROM %s WHERE grp = $1 AND topic = $2 AND part = $3`, g.done)
	g.spansList = fmt.Sprintf(`SELECT grp, topic, part, from_off, to_off, dups, spans FROM %s ORDER BY grp, topic, part`, g.done)
	// Storing a checkpoint under the fence row's lock: the watermark $4,
	// the rows below it (or all, $5) deleted and their duplicates
	// folded in, the gapped flag $6, the IDs version moved by $7.
	g.store = fmt.Sprintf(`WITH d AS (
			DELETE FROM %[2]s WHERE grp = $1 AND topic = $2 AND part = $3 AND (to_off <= $4 OR $5) RETURNING dups
		)
		UPDATE %[1]s SET next_offset = $4, gapped = $6, ids_version = ids_version + $7,
			duplicates = duplicates + (SELECT coalesce(sum(dups), 0)::bigint FROM d)
		WHERE grp = $1 AND topic = $2 AND part = $3`, q.fences, g.done)
	// A plain Apply's advance on a gapped scope: the compare-and-set of
	// Apply (holder, next_offset $6 and IDs version $11 as read) that
	// also deletes the rows below the new watermark $7.
	g.advance = fmt.Sprintf(`WITH d AS (
			DELETE FROM %[2]s WHERE grp = $1 AND topic = $2 AND part = $3 AND to_off <= $7 RETURNING dups
		)
		UPDATE %[1]s SET next_offset = $7, gapped = $8, ids_version = ids_version + $9,
			duplicates = duplicates + $10 + (SELECT coalesce(sum(dups), 0)::bigint FROM d)
		WHERE grp = $1 AND topic = $2 AND part = $3 AND epoch = $4 AND member = $5 AND next_offset = $6 AND ids_version = $11`, q.fences, g.done)
	g.lockCompact = fmt.Sprintf(`SELECT epoch, member, next_offset, ids_version FROM %s
		WHERE grp = $1 AND topic = $2 AND part = $3 FOR UPDATE`, q.fences)
	return g
}

// gapState is a Sink's in-process state of the lanes: per scope, the
// lock that orders a lane's load of the command IDs with the other lanes'
// additions to the cache, and the count of lane batches that paces the
// compactions; and the metrics.
type gapState struct {
	mu     sync.Mutex
	scopes map[epochs.Scope]*laneScope

	compactions map[string]int64     // by outcome, under mu
	spans       map[epochs.Scope]int // the last count each scope's claim or compaction found, under mu
}

// laneScope is gapState's per-scope part.
type laneScope struct {
	ids     sync.Mutex // held across a lane's load of the IDs, and by Add
	batches int        // lane batches committed, under gapState.mu
}

// Compaction outcomes, the label of the compactions counter.
const (
	compactDone    = "compacted" // the watermark rose, or rows were deleted
	compactNothing = "nothing"   // no span touched the watermark
	compactBusy    = "busy"      // lanes held the fence row compactLockWait: given up, tried again compactEvery batches later
	compactFenced  = "fenced"    // the tenure no longer holds the scope
	compactError   = "error"     // the database failed; logged
)

func newGapState() *gapState {
	g := &gapState{
		scopes:      make(map[epochs.Scope]*laneScope),
		compactions: make(map[string]int64),
		spans:       make(map[epochs.Scope]int),
	}
	for _, o := range []string{compactDone, compactNothing, compactBusy, compactFenced, compactError} {
		g.compactions[o] = 0
	}
	return g
}

func (g *gapState) scope(sc epochs.Scope) *laneScope {
	g.mu.Lock()
	defer g.mu.Unlock()
	ls := g.scopes[sc]
	if ls == nil {
		ls = &laneScope{}
		g.scopes[sc] = ls
	}
	return ls
}

// tick counts a committed lane batch of sc and reports whether a
// compaction is due.
func (g *gapState) tick(sc epochs.Scope) bool {
	ls := g.scope(sc)
	g.mu.Lock()
	defer g.mu.Unlock()
	ls.batches++
	return ls.batches%compactEvery == 0
}

// observe records that sc has spans done spans above its watermark.
func (g *gapState) observe(sc epochs.Scope, spans int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.spans[sc] = spans
}

// count counts a compaction that ended with outcome.
func (g *gapState) count(outcome string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.compactions[outcome]++
}

// GapStats are a Sink's counts of its checkpoints with gaps in this
// process (a lane's [Sink.Apply]): package sink/postgres/postgresprom
// exports them as Prometheus series.
type GapStats struct {
	// Compactions counts the compactions lanes attempted, by outcome:
	// "compacted" (the watermark rose, or rows were deleted), "nothing"
	// (no span touched the watermark), "busy" (lanes held the fence row:
	// given up, tried again later), "fenced" (the tenure no longer holds
	// the scope), "error" (the database failed; logged). Every outcome is
	// present, at zero until it happens.
	Compactions map[string]int64
	// Spans is, per scope, how many done spans lie above its watermark,
	// as the scope's last claim or compaction in this process found them.
	Spans map[epochs.Scope]int
}

// GapStats returns a copy of the Sink's counts of its checkpoints with
// gaps.
func (s *Sink) GapStats() GapStats {
	g := s.gaps
	g.mu.Lock()
	defer g.mu.Unlock()
	return GapStats{Compactions: maps.Clone(g.compactions), Spans: maps.Clone(g.spans)}
}

// readCheckpoint reads scope's done spans in tx and returns the
// checkpoint they make above the fence row's next_offset next (merged,
// the watermark raised over those that touch it, spans below it
// ignored), how many rows there are, and the duplicates they count.
func (s *Sink) readCheckpoint(ctx context.Context, tx pgx.Tx, scope epochs.Scope, next int64) (sink.Checkpoint, int, int64, error) {
	rows, err := tx.Query(ctx, s.q.gap.spans, scope.Group, scope.Topic, scope.Partition)
	if err != nil {
		return sink.Checkpoint{NextOffset: next}, 0, 0, err
	}
	var (
		from, to, d, dups int64
		enc               []byte
		n                 int
		sps               []sink.Span
	)
	_, err = pgx.ForEachRow(rows, []any{&from, &to, &d, &enc}, func() error {
		var err error
		sps, err = decodeSpans(sps, from, to, enc)
		dups += d
		n++
		return err
	})
	return checkpointOf(next, sps), n, dups, err
}

// checkpointOf returns the checkpoint of watermark next and the done
// spans sps (of any number of rows: sorted here, merged by Add).
func checkpointOf(next int64, sps []sink.Span) sink.Checkpoint {
	slices.SortFunc(sps, func(a, b sink.Span) int { return cmp.Compare(a.From, b.From) })
	cp := sink.Checkpoint{NextOffset: next}
	for _, sp := range sps {
		cp.Add(sp.From, sp.To)
	}
	return cp
}

// storeCheckpoint stores, in tx that holds scope's fence row FOR UPDATE,
// the watermark next, deleting the rows below it (all rows if all) and
// folding their duplicates into the fence's, the gapped flag, and moves
// the IDs version on if bump (lanes may have recorded IDs without moving
// it).
func (s *Sink) storeCheckpoint(ctx context.Context, tx pgx.Tx, scope epochs.Scope, next int64, all, gapped, bump bool) error {
	_, err := tx.Exec(ctx, s.q.gap.store, scope.Group, scope.Topic, scope.Partition, next, all, gapped, b2i(bump))
	return err
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// deadLetterInsert is the effect of a lane's DeadLetter: the dead
// letter's row, its ID out.
type deadLetterInsert struct {
	rec     sink.DeadRecord
	headers string
	id      int64
}

// applyGapped is Apply of a lane's batch, and a lane's DeadLetter when dl
// is not nil.
func (s *Sink) applyGapped(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[pgx.Tx], dl *deadLetterInsert) (sink.Result, error) {
	op := "apply gapped " + tok.String()
	if dl != nil {
		op = fmt.Sprintf("dead letter gapped %s@%d", tok, dl.rec.Offset)
	}
	if err := s.writable(op); err != nil {
		return sink.Result{}, err
	}
	flagged := false
	for attempt := 1; ; attempt++ {
		if err := s.check(ctx, op); err != nil {
			return sink.Result{}, err
		}
		res, again, err := s.laneAttempt(ctx, op, tok, b, effect, dl)
		if again == laneFlag && flagged {
			// Marked, yet read unmarked: only a plain call of the same
			// tenure clears the flag (when no span is left).
			return sink.Result{}, fmt.Errorf("postgres: %s: %w: the scope's gapped flag was cleared after this batch set it", op, ErrConflict)
		}
		if again == laneFlag {
			// The scope is not marked gapped: mark it, in a transaction
			// of its own (before any span exists), and run again.
			flagged = true
			if err := s.setGapped(ctx, op, tok); err != nil {
				return res, err
			}
			attempt--
			continue
		}
		if again == laneDone && err == nil && res.Applied+len(res.Duplicates) > 0 && s.gaps.tick(tok.Scope()) {
			// After the batch's connection went back to the pool.
			s.compact(ctx, tok)
		}
		if again == laneDone || attempt == maxAttempts {
			return res, err
		}
		s.log.Debug("postgres sink: lane conflict, running the batch again", "token", tok.String(), "attempt", attempt, "err", err)
	}
}

// laneAttempt outcomes: done (res, err final), again (a conflict: run
// the batch again), flag (mark the scope gapped first).
const (
	laneDone = iota
	laneAgain
	laneFlag
)

// setGapped marks tok's scope gapped, if tok holds it.
func (s *Sink) setGapped(ctx context.Context, op string, tok epochs.Token) error {
	tag, err := s.pool.Exec(ctx, s.q.gap.setGapped, tok.Group, tok.Topic, tok.Partition, tok.Epoch, tok.Member)
	if err != nil {
		return wrap(ctx, op+": mark gapped", err)
	}
	if tag.RowsAffected() != 1 {
		stored, err := s.readHolder(ctx, tok)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return wrap(ctx, op+": read fence", err)
		}
		return s.fenced(tok, stored)
	}
	return nil
}

// laneAttempt is one attempt of a lane's batch: the fence and the
// batch's spans read on a connection that goes back to the pool before
// the effects run, the effects in a laneTx (a transaction that begins at
// their first use of it), and the check and write pipelined with COMMIT
// in that transaction, or in one begun in the same pipeline when the
// effects did not use it. The read and the check need not share a
// transaction: under PostgreSQL's default READ COMMITTED every statement
// sees its own snapshot anyway, and the check (laneCommit) takes the
// fence row FOR SHARE and verifies all the read told the effects.
func (s *Sink) laneAttempt(ctx context.Context, op string, tok epochs.Token, b sink.Batch, effect sink.Effect[pgx.Tx], dl *deadLetterInsert) (res sink.Result, again int, err error) {
	scope := tok.Scope()
	n := len(b.Offsets)
	v, again, err := s.readLane(ctx, op, tok, b)
	if err != nil {
		return res, again, err
	}
	cp, skip, dup := v.cp, v.skip, v.dup
	res.Skipped, res.NextOffset = v.skipped, cp.NextOffset
	if v.skipped == n {
		// A replay (or an empty batch): nothing to apply, nothing to write.
		return res, laneDone, nil
	}
	if !v.gapped {
		return res, laneFlag, nil
	}

	htx := &laneTx{pool: s.pool, ctx: ctx}
	defer htx.release(ctx)
	var (
		dups    []int
		applied cmdids.Row
	)
	for i := range n {
		if skip[i] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return sink.Result{}, laneDone, fmt.Errorf("postgres: %s: %w", op, err)
		}
		if dup != nil && dup[i] {
			dups = append(dups, i)
		} else {
			if dl != nil {
				err = s.insertDeadLetter(ctx, htx, tok, v.topicID, dl)
			} else {
				err = effect(ctx, htx, i)
			}
			if err != nil {
				kind := laneDone
				if retryable(err) && ctx.Err() == nil {
					kind = laneAgain
				}
				if dl != nil {
					return sink.Result{}, kind, wrap(ctx, op, err)
				}
				return sink.Result{}, kind, &sink.EffectError{Index: i, Offset: b.Offsets[i], Err: err, TxHealthy: txHealthy(htx)}
			}
			if b.IDs != nil && b.IDs[i] != "" {
				applied.Offs = append(applied.Offs, b.Offsets[i])
				applied.IDs = append(applied.IDs, b.IDs[i])
				applied.Last = b.Offsets[i]
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return sink.Result{}, laneDone, fmt.Errorf("postgres: %s: %w", op, err)
	}

	if htx.err != nil {
		// The effects could not begin the transaction (and may have
		// ignored the error): nothing of the batch may be recorded.
		return sink.Result{}, retryKind(htx.err), wrap(ctx, op, htx.err)
	}

	conn, begin, err := htx.commitConn(ctx)
	if err != nil {
		return sink.Result{}, laneDone, wrap(ctx, op, err)
	}
	if !begin {
		if err := s.txEnded(conn, op); err != nil {
			return sink.Result{}, laneDone, err
		}
	}
	// The guard against units of the tenure that share records with this
	// one (BEGIN in front if the effects did not begin the transaction):
	// their locks, and the read again, which decides the spans to record.
	cp, sps, kind, err := s.laneGuard(ctx, conn, begin, op, tok, b, skip)
	if err != nil {
		return sink.Result{}, kind, err
	}
	if s.laneGuarded != nil {
		s.laneGuarded() // tests: another unit's guard while this one holds its locks
	}

	// The check and the write (the fence row FOR SHARE, the spans), the
	// IDs' row and COMMIT, in one round trip: the share lock is held
	// while the server runs them, never across a round trip.
	end := &pgx.Batch{}
	end.Queue(s.q.gap.laneCommit, scope.Group, scope.Topic, scope.Partition, tok.Epoch, tok.Member,
		sps[0].From, sps[len(sps)-1].To, int64(len(dups)), encodeSpans(sps))
	if len(applied.IDs) > 0 {
		end.Queue(s.q.idInsert, scope.Group, scope.Topic, scope.Partition, applied.Offs[0], applied.Last,
			cmdids.Encode(applied.Offs[0], applied.Offs, applied.IDs))
	}
	end.Queue("commit")
	failed, err := sendAll(ctx, conn, end)
	switch {
	case err == nil:
	case failed == 0 && fenceCheckFailed(err):
		// Fenced, or the watermark rose over the batch's offsets (a
		// plain Apply of the same tenure applied them meanwhile: run
		// again on the new state).
		kind, err := s.laneFailedCheck(ctx, conn, tok, op, v.next)
		return sink.Result{}, kind, err
	case failed == 0 && isSpanConflict(err):
		// Another unit recorded a row that ends where this one's does
		// (the table's key; the guard stops units that share a record
		// before they get here): run again, it reads that span as done.
		return sink.Result{}, laneAgain, fmt.Errorf("postgres: %s: %w: a span of the batch was recorded by another attempt: %w", op, ErrConflict, err)
	case isServerError(err) && failed < end.Len():
		// The server refused a statement: the rest, COMMIT included,
		// was skipped.
		return sink.Result{}, retryKind(err), wrap(ctx, op+": record spans", err)
	default:
		// The pipeline was sent, COMMIT with it: it may have run.
		if b.IDs != nil {
			s.ids.Drop(scope)
		}
		return sink.Result{}, laneDone, commitError(ctx, op, err)
	}
	if conn.PgConn().TxStatus() != 'I' {
		return sink.Result{}, laneDone, commitError(ctx, op, fmt.Errorf("%w: the server reports transaction status %q after COMMIT", ErrConflict, conn.PgConn().TxStatus()))
	}
	if len(applied.IDs) > 0 {
		ls := s.gaps.scope(scope)
		ls.ids.Lock()
		s.ids.Add(scope, applied)
		ls.ids.Unlock()
	}
	for _, sp := range sps {
		cp.Add(sp.From, sp.To)
	}
	res.Applied, res.Duplicates, res.NextOffset = n-v.skipped-len(dups), dups, cp.NextOffset
	return res, laneDone, nil
}

// laneView is what a lane's read tells its attempt: the fence row's
// watermark, IDs version, gapped flag and topic ID, the checkpoint the
// batch's range overlaps, which records of the batch it holds (skip),
// and, for a gapped scope with records to apply, which are duplicates.
type laneView struct {
	next, idsVersion int64
	gapped           bool
	topicID          string
	cp               sink.Checkpoint
	skip             []bool
	skipped          int
	dup              []bool
}

// readLane reads what a lane's attempt at b needs, on a connection held
// only for the read and, when the cache is older than the IDs version
// read, the load of the command IDs. It refuses tok (sink.ErrFenced)
// when it does not hold the scope.
func (s *Sink) readLane(ctx context.Context, op string, tok epochs.Token, b sink.Batch) (v laneView, again int, err error) {
	scope := tok.Scope()
	n := len(b.Offsets)
	lo, hi := laneRange(b)
	rc, err := s.pool.Acquire(ctx)
	if err != nil {
		return v, laneDone, wrap(ctx, op, err)
	}
	defer release(ctx, rc)
	f, err := scanLaneRead(rc.QueryRow(ctx, s.q.gap.laneRead, scope.Group, scope.Topic, scope.Partition, lo, hi), scope, lo, hi)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return v, laneDone, s.fenced(tok, epochs.Token{})
	case err != nil:
		return v, retryKind(err), wrap(ctx, op+": read fence", err)
	}
	if !tok.Holds(f.holder) {
		return v, laneDone, s.fenced(tok, f.holder)
	}
	v.next, v.idsVersion, v.gapped, v.topicID, v.cp = f.next, f.idsVersion, f.gapped, f.topicID, f.cp
	v.skip = make([]bool, n)
	for i, off := range b.Offsets {
		if v.cp.Contains(off) {
			v.skip[i] = true
			v.skipped++
		}
	}
	if v.skipped < n && v.gapped && b.IDs != nil {
		if v.dup, err = s.laneDuplicates(ctx, rc, scope, v.idsVersion, b.Offsets, b.IDs, v.skip); err != nil {
			return v, retryKind(err), wrap(ctx, op+": look up command IDs", err)
		}
	}
	return v, laneDone, nil
}

// laneRange returns the range of offsets [lo, hi) a lane's batch b
// covers: from its first record's From to the end of its last record.
func laneRange(b sink.Batch) (lo, hi int64) {
	if n := len(b.Offsets); n > 0 {
		return b.From[0], b.Offsets[n-1] + 1
	}
	return 0, 0
}

// laneFence is what gapQueries.laneRead returns: the fence row, and the
// checkpoint that its watermark and the done spans overlapping the
// range read make.
type laneFence struct {
	holder           epochs.Token
	next, idsVersion int64
	gapped           bool
	topicID          string
	cp               sink.Checkpoint
}

// scanLaneRead scans r, the result of gapQueries.laneRead of scope's
// range [lo, hi): pgx.ErrNoRows if the scope has no fence row.
func scanLaneRead(r pgx.Row, scope epochs.Scope, lo, hi int64) (laneFence, error) {
	var (
		f          laneFence
		epoch      int32
		member     string
		froms, tos []int64
		encs       [][]byte
	)
	if err := r.Scan(&epoch, &member, &f.next, &f.idsVersion, &f.gapped, &f.topicID, &froms, &tos, &encs); err != nil {
		return f, err
	}
	f.holder = holderToken(scope, epoch, member)
	if len(encs) != len(froms) || len(tos) != len(froms) {
		return f, fmt.Errorf("%d, %d and %d values for the done rows", len(froms), len(tos), len(encs))
	}
	var (
		sps, row []sink.Span
		err      error
	)
	for i := range froms {
		if row, err = decodeSpans(row[:0], froms[i], tos[i], encs[i]); err != nil {
			return f, err
		}
		for _, sp := range row {
			if sp.To > lo && sp.From < hi {
				sps = append(sps, sp) // only those the range overlaps
			}
		}
	}
	f.cp = checkpointOf(f.next, sps)
	return f, nil
}

// laneLockRecords is the most records a lane's unit locks one by one
// (laneLocks); a unit with more locks its whole scope. It is the
// consumer's default MaxBatch, so that lanes of the default batch size
// never wait for each other's guards.
const laneLockRecords = 256

// laneLockSet is the advisory locks of a lane's unit (laneLocks).
type laneLockSet struct {
	exclusive bool     // the scope's lock in exclusive mode, and no record's
	scope     [2]int32 // the scope's lock
	a, b      []int32  // the records' locks (a[i], b[i]), ascending
}

// laneLocks returns the advisory locks that a unit of a lane of scope
// which applies (or finds duplicate) the records at offs takes before
// its guard's read (laneGuard): the scope's lock shared and one lock per
// record, or, for more than laneLockRecords records, the scope's lock
// exclusive (the lock table holds one entry per lock until the
// transaction ends, and it is the server's, shared by all its sessions).
// Two units that share a record therefore always have a lock in common,
// in modes that conflict; units that do not may too (a hash collision, or
// a unit that locks its scope), which only makes one wait for the other's
// COMMIT. The keys are PostgreSQL's two-int4 kind, hashed from the sink's
// schema and prefix, the scope and the offset; the record's key holds its
// offset's low 32 bits.
func (s *Sink) laneLocks(scope epochs.Scope, offs []int64) laneLockSet {
	h := fnv.New64a()
	for _, p := range []string{s.schema, s.prefix, scope.Group, scope.Topic} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(scope.Partition)))
	base := h.Sum64()
	sk := mix64(base ^ 0x73636f7065) // "scope"
	l := laneLockSet{scope: [2]int32{int32(sk >> 32), int32(sk)}}
	if len(offs) > laneLockRecords {
		l.exclusive = true
		return l
	}
	type key struct{ a, b int32 }
	keys := make([]key, len(offs))
	for i, o := range offs {
		keys[i] = key{int32(mix64(base+uint64(o>>32)) >> 32), int32(uint32(o))}
	}
	slices.SortFunc(keys, func(x, y key) int { return cmp.Or(cmp.Compare(x.a, y.a), cmp.Compare(x.b, y.b)) })
	keys = slices.Compact(keys)
	l.a, l.b = make([]int32, len(keys)), make([]int32, len(keys))
	for i, k := range keys {
		l.a[i], l.b[i] = k.a, k.b
	}
	return l
}

// mix64 is SplitMix64's finalizer: every bit of x moves about half the
// bits of the result.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// laneLock takes a lane unit's advisory locks (laneLockSet) in the order
// of its arrays ($1[i], $2[i]), one statement: the first, the scope's, in
// share mode if $3 (else exclusive), the others exclusive. A function
// scan returns an array's elements in order, and the aggregate takes
// each row's lock before it reads the next.
const laneLock = `SELECT count(CASE WHEN k.n = 1 AND $3 THEN pg_advisory_xact_lock_shared(k.a, k.b) ELSE pg_advisory_xact_lock(k.a, k.b) END)
	FROM unnest($1::int4[], $2::int4[]) WITH ORDINALITY AS k(a, b, n)`

// laneGuard is the first pipeline of a lane's end, on conn, in the
// transaction of its effects (BEGIN leads the pipeline if they ran no
// statement): the unit's advisory locks (laneLocks: the scope's, then the
// records' in ascending order, so that units wait for each other in one
// order) and gapQueries.laneRead again. Two units of the scope that share
// a record have a lock in common, so the one that takes it second reads,
// here, what the first committed (PostgreSQL releases a transaction's
// locks after its commit is visible, and the read is a statement after
// the locks): if a record this unit ran, dead-lettered or found a
// duplicate is done now, the attempt runs again (laneAgain, a conflict;
// the release rolls it back), and its next read skips the record. So of
// the units that read a record as not done, one commits it; the others
// run again. It returns the checkpoint the read makes and the spans to
// record: the parts of the unit's records' spans ([From[i],
// Offsets[i]+1)) that it does not contain. A tok that no longer holds
// the scope is refused here.
func (s *Sink) laneGuard(ctx context.Context, conn *pgx.Conn, begin bool, op string, tok epochs.Token, b sink.Batch, skip []bool) (sink.Checkpoint, []sink.Span, int, error) {
	scope := tok.Scope()
	lo, hi := laneRange(b)
	var offs []int64
	for i, o := range b.Offsets {
		if !skip[i] {
			offs = append(offs, o)
		}
	}
	l := s.laneLocks(scope, offs)
	p := &pgx.Batch{}
	if begin {
		p.Queue("begin")
	}
	p.Queue(laneLock, append([]int32{l.scope[0]}, l.a...), append([]int32{l.scope[1]}, l.b...), !l.exclusive)
	p.Queue(s.q.gap.laneRead, scope.Group, scope.Topic, scope.Partition, lo, hi)
	br := conn.SendBatch(ctx, p)
	var err error
	for range p.Len() - 1 {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	var f laneFence
	if err == nil {
		f, err = scanLaneRead(br.QueryRow(), scope, lo, hi)
	}
	if cerr := br.Close(); err == nil || errors.Is(err, pgx.ErrNoRows) && cerr != nil {
		err = cerr
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return sink.Checkpoint{}, nil, laneDone, s.fenced(tok, epochs.Token{})
	case err != nil:
		return sink.Checkpoint{}, nil, retryKind(err), wrap(ctx, op+": lock the batch's records, read fence", err)
	}
	if !tok.Holds(f.holder) {
		return sink.Checkpoint{}, nil, laneDone, s.fenced(tok, f.holder)
	}
	var sps []sink.Span
	for i, o := range b.Offsets {
		if skip[i] {
			continue
		}
		if f.cp.Contains(o) {
			return sink.Checkpoint{}, nil, laneAgain, fmt.Errorf("postgres: %s: %w: offset %d, which this attempt ran, was done by another unit of the tenure meanwhile", op, ErrConflict, o)
		}
		// The parts of the record's span that are not done.
		for _, sp := range undone(&f.cp, b.From[i], o+1) {
			if k := len(sps) - 1; k >= 0 && sps[k].To == sp.From {
				sps[k].To = sp.To
				continue
			}
			sps = append(sps, sp)
		}
	}
	return f.cp, sps, laneDone, nil
}

// laneFailedCheck is the end of a lane's attempt whose check raised (its
// transaction is aborted): it rolls back, reads the fence row, and
// returns tok's refusal with the stored holder, or a conflict to run the
// batch again if tok still holds the scope (the watermark moved over the
// batch). Two round trips: the connection may not have the read prepared,
// and an aborted transaction prepares nothing.
func (s *Sink) laneFailedCheck(ctx context.Context, conn *pgx.Conn, tok epochs.Token, op string, read int64) (int, error) {
	if _, err := conn.Exec(ctx, "rollback"); err != nil {
		return laneDone, wrap(ctx, op+": rollback", err)
	}
	var (
		epoch  int32
		member string
		next   int64
	)
	err := conn.QueryRow(ctx, s.q.fenceRead, tok.Group, tok.Topic, tok.Partition).Scan(&epoch, &member, &next, new(int64), new(bool))
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return laneDone, wrap(ctx, op+": read fence", err)
	}
	stored := holderToken(tok.Scope(), epoch, member)
	if errors.Is(err, pgx.ErrNoRows) || !tok.Holds(stored) {
		return laneDone, s.fenced(tok, stored)
	}
	return laneAgain, fmt.Errorf("postgres: %s: %w: the watermark moved from %d to %d, over the batch", op, ErrConflict, read, next)
}

// undone returns the parts of [from, to) that cp does not contain.
func undone(cp *sink.Checkpoint, from, to int64) []sink.Span {
	from = max(from, cp.NextOffset)
	var out []sink.Span
	for _, sp := range cp.Done {
		if from >= to {
			break
		}
		if sp.To <= from {
			continue
		}
		if sp.From >= to {
			break
		}
		if sp.From > from {
			out = append(out, sink.Span{From: from, To: sp.From})
		}
		from = sp.To
	}
	if from < to {
		out = append(out, sink.Span{From: from, To: to})
	}
	return out
}

// retryKind is laneAgain for a deadlock or serialization failure.
func retryKind(err error) int {
	if retryable(err) {
		return laneAgain
	}
	return laneDone
}

// isSpanConflict reports a unique violation of the done spans' key.
func isSpanConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.TableName != "" && pgErr.TableName[len(pgErr.TableName)-len("_done"):] == "_done"
}

// laneDuplicates returns which records of a lane's batch are duplicates
// (see a lane's Apply): an ID seen earlier in the batch, or one the cache
// holds within the window. A cache older than version is loaded from
// the table through q (the connection of the lane's read) first, under
// the scope's lane lock, which Add takes too: a row a lane committed is
// either in what the load reads, or added after the load.
func (s *Sink) laneDuplicates(ctx context.Context, q querier, scope epochs.Scope, version int64, offsets []int64, ids []string, skip []bool) ([]bool, error) {
	dup := make([]bool, len(offsets))
	seen := make(map[string]struct{}, len(ids))
	var lookup []int
	for i, id := range ids {
		if skip[i] || id == "" {
			continue
		}
		if _, ok := seen[id]; ok {
			dup[i] = true
			continue
		}
		seen[id] = struct{}{}
		lookup = append(lookup, i)
	}
	if len(lookup) == 0 {
		return dup, nil
	}
	found := func(i int, applied int64) { dup[i] = cmdids.IsDuplicate(offsets[i], applied, s.window) }
	if s.ids.LookupSince(scope, version, ids, lookup, found) {
		return dup, nil
	}
	ls := s.gaps.scope(scope)
	ls.ids.Lock()
	defer ls.ids.Unlock()
	if s.ids.LookupSince(scope, version, ids, lookup, found) {
		return dup, nil
	}
	all, err := s.loadIDs(ctx, q, scope)
	if err != nil {
		return nil, err
	}
	s.ids.Load(scope, version, all)
	s.ids.LookupSince(scope, version, ids, lookup, found)
	return dup, nil
}

// querier runs a query: a pgx.Tx, or a connection outside one.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// loadIDs reads scope's stored command IDs through q.
func (s *Sink) loadIDs(ctx context.Context, q querier, scope epochs.Scope) ([]cmdids.Row, error) {
	rows, err := q.Query(ctx, s.q.idSelect, scope.Group, scope.Topic, scope.Partition)
	if err != nil {
		return nil, err
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
	return all, err
}

// compact tries, in a short transaction of its own, to raise tok's
// scope's watermark over the done spans that touch it: FOR UPDATE on the
// fence row, waiting at most compactLockWait (given up, counted, when
// lanes hold it that long), the holder
// check, the rows below the new watermark deleted, and the command IDs
// below the new horizon pruned. It never fails the lane that calls it:
// it logs and counts.
func (s *Sink) compact(ctx context.Context, tok epochs.Token) {
	scope := tok.Scope()
	outcome, err := s.compactOnce(ctx, tok)
	s.gaps.count(outcome)
	switch {
	case err != nil:
		s.log.Warn("postgres sink: compaction of a gapped checkpoint failed; the next one retries", "scope", scope.String(), "err", err)
	case outcome == compactBusy:
		s.log.Debug("postgres sink: compaction given up, a lane holds the fence row; the next one retries", "scope", scope.String())
	}
}

func (s *Sink) compactOnce(ctx context.Context, tok epochs.Token) (string, error) {
	scope := tok.Scope()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return compactError, err
	}
	defer rollback(ctx, tx)
	var (
		epoch         int32
		member        string
		next, version int64
	)
	// Wait for the lanes between their check and their COMMIT, but not
	// long: lanes keep taking the share lock, and a compaction that
	// waits them out is better given up and tried again.
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", compactLockWait.Milliseconds())); err != nil {
		return compactError, err
	}
	err = tx.QueryRow(ctx, s.q.gap.lockCompact, scope.Group, scope.Topic, scope.Partition).Scan(&epoch, &member, &next, &version)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
		return compactBusy, nil
	case errors.Is(err, pgx.ErrNoRows):
		return compactFenced, nil
	case err != nil:
		return compactError, err
	}
	if !tok.Holds(holderToken(scope, epoch, member)) {
		return compactFenced, nil
	}
	cp, _, _, err := s.readCheckpoint(ctx, tx, scope, next)
	if err != nil {
		return compactError, err
	}
	if cp.NextOffset == next {
		// Nothing to delete: every row ends above the watermark (rows
		// are inserted above it, and every raise deletes those it
		// passes). Rows are not rewritten, so their spans stay as the
		// lanes recorded them.
		s.gaps.observe(scope, len(cp.Done))
		return compactNothing, nil
	}
	prune := cmdids.PruneDue(next, cp.NextOffset, s.window)
	horizon := cmdids.Horizon(cp.NextOffset, s.window)
	if err := s.storeCheckpoint(ctx, tx, scope, cp.NextOffset, false, true, prune); err != nil {
		return compactError, err
	}
	if prune {
		if _, err := tx.Exec(ctx, s.q.idPrune, scope.Group, scope.Topic, scope.Partition, horizon); err != nil {
			return compactError, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		s.ids.Drop(scope)
		return compactError, err
	}
	if prune {
		s.ids.Committed(scope, version, cmdids.Row{}, true, horizon)
	}
	s.gaps.observe(scope, len(cp.Done))
	return compactDone, nil
}

// deadLetterLane is DeadLetter of a lane's record (rec.Lane): the
// transaction of a lane's Apply with one record at rec.Offset covering
// [rec.From, rec.Offset+1), whose effect is the dead letter's row (the
// topic ID is rec.TopicID, or the scope's). A record already done is a
// replay: Stored is false.
func (s *Sink) deadLetterLane(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	from := rec.From
	hs := make([]header, len(rec.Headers))
	for i, h := range rec.Headers {
		hs[i] = header{h.Key, h.Value}
	}
	headers, err := json.Marshal(hs)
	if err != nil {
		return sink.DeadLetterResult{}, fmt.Errorf("postgres: dead letter %s@%d: headers: %w", tok, rec.Offset, err)
	}
	dl := &deadLetterInsert{rec: rec, headers: string(headers)}
	b := sink.Batch{Offsets: []int64{rec.Offset}, From: []int64{from}}
	res, err := s.applyGapped(ctx, tok, b, func(context.Context, pgx.Tx, int) error { return nil }, dl)
	var fe *sink.FencedError
	if errors.As(err, &fe) {
		fe.Op = sink.OpDeadLetter
	}
	if err != nil {
		return sink.DeadLetterResult{}, err
	}
	if res.Applied == 0 {
		return sink.DeadLetterResult{NextOffset: res.NextOffset}, nil
	}
	return sink.DeadLetterResult{ID: dl.id, Stored: true, NextOffset: res.NextOffset}, nil
}

// insertDeadLetter inserts dl's row in tx, on topicID unless the record
// names its own.
func (s *Sink) insertDeadLetter(ctx context.Context, tx pgx.Tx, tok epochs.Token, topicID string, dl *deadLetterInsert) error {
	rec := dl.rec
	if rec.TopicID != "" {
		topicID = rec.TopicID
	}
	return tx.QueryRow(ctx, s.q.dlInsert, tok.Group, tok.Topic, tok.Partition, topicID, rec.Offset, rec.Key, rec.Value, dl.headers,
		rec.Timestamp, rec.Reason, rec.Error, rec.Attempts, tok.Epoch, tok.Member).Scan(&dl.id)
}

// applyOnGapped is the rest of a plain serial Apply (with IDs when ids is not
// nil) attempt on a gapped scope, after the early read (next, version)
// and holder check: the records in a done span are skipped as replays,
// the IDs are looked up in the table (the cache may miss what lanes
// recorded), and the advance is Apply's compare-and-set that also raises
// the watermark over the spans the batch's end touches and deletes the
// rows below it ([sink.Checkpoint.Raise]), clearing the gapped flag when
// no span is left (and then moving the IDs version on).
func (s *Sink) applyOnGapped(ctx context.Context, tx pgx.Tx, tok epochs.Token, offsets []int64, ids []string, effect sink.Effect[pgx.Tx], next, version int64) (res sink.Result, retry bool, err error) {
	op := "apply " + tok.String()
	scope := tok.Scope()
	cp, _, _, err := s.readCheckpoint(ctx, tx, scope, next)
	if err != nil {
		return res, retryable(err), wrap(ctx, op+": read done spans", err)
	}
	skip := make([]bool, len(offsets))
	skipped := 0
	for i, off := range offsets {
		if cp.Contains(off) {
			skip[i] = true
			skipped++
		}
	}
	if skipped == len(offsets) {
		return sink.Result{Skipped: skipped, NextOffset: cp.NextOffset}, false, nil
	}
	var dup []bool
	if ids != nil {
		rows, err := s.loadIDs(ctx, tx, scope)
		if err != nil {
			return res, retryable(err) && ctx.Err() == nil, wrap(ctx, op+": look up command IDs", err)
		}
		at := make(map[string]int64)
		for _, r := range rows {
			for i, id := range r.IDs {
				if p, ok := at[id]; !ok || r.Offs[i] > p {
					at[id] = r.Offs[i]
				}
			}
		}
		dup = make([]bool, len(offsets))
		seen := make(map[string]struct{})
		for i, id := range ids {
			if skip[i] || id == "" {
				continue
			}
			if _, ok := seen[id]; ok {
				dup[i] = true
				continue
			}
			seen[id] = struct{}{}
			if p, ok := at[id]; ok && cmdids.IsDuplicate(offsets[i], p, s.window) {
				dup[i] = true
			}
		}
	}
	htx := &handlerTx{Tx: tx}
	defer htx.done.Store(true)
	var (
		dups    []int
		applied cmdids.Row
	)
	for i := range offsets {
		if skip[i] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return res, false, fmt.Errorf("postgres: %s: %w", op, err)
		}
		if dup != nil && dup[i] {
			dups = append(dups, i)
			continue
		}
		if err := effect(ctx, htx, i); err != nil {
			return res, retryable(err) && ctx.Err() == nil, &sink.EffectError{Index: i, Offset: offsets[i], Err: err, TxHealthy: txHealthy(htx)}
		}
		if ids != nil && ids[i] != "" {
			applied.Offs = append(applied.Offs, offsets[i])
			applied.IDs = append(applied.IDs, ids[i])
			applied.Last = offsets[i]
		}
	}
	if err := ctx.Err(); err != nil {
		return res, false, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if err := s.txEnded(tx.Conn(), op); err != nil {
		return res, false, err
	}
	after := cp.Clone()
	after.Raise(offsets[len(offsets)-1] + 1)
	gapped := len(after.Done) > 0
	bump := ids != nil || !gapped
	batch := &pgx.Batch{}
	batch.Queue(s.q.gap.advance, scope.Group, scope.Topic, scope.Partition, tok.Epoch, tok.Member, next, after.NextOffset,
		gapped, b2i(bump), int64(len(dups)), version)
	prune := ids != nil && cmdids.PruneDue(next, after.NextOffset, s.window)
	if len(applied.IDs) > 0 {
		batch.Queue(s.q.idInsert, scope.Group, scope.Topic, scope.Partition, applied.Offs[0], applied.Last,
			cmdids.Encode(applied.Offs[0], applied.Offs, applied.IDs))
	}
	if prune {
		batch.Queue(s.q.idPrune, scope.Group, scope.Topic, scope.Partition, cmdids.Horizon(after.NextOffset, s.window))
	}
	br := tx.SendBatch(ctx, batch)
	tag, err := br.Exec()
	for range batch.Len() - 1 {
		if err != nil {
			break
		}
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, retryable(err) && ctx.Err() == nil, wrap(ctx, op+": advance fence", err)
	}
	if tag.RowsAffected() != 1 {
		var (
			epoch  int32
			member string
			cur    int64
		)
		err = tx.QueryRow(ctx, s.q.fenceRead, tok.Group, tok.Topic, tok.Partition).Scan(&epoch, &member, &cur, new(int64), new(bool))
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return res, false, wrap(ctx, op+": read fence", err)
		}
		stored := holderToken(scope, epoch, member)
		if errors.Is(err, pgx.ErrNoRows) || !tok.Holds(stored) {
			return res, false, s.fenced(tok, stored)
		}
		return res, true, fmt.Errorf("postgres: %s: %w: the checkpoint moved during the batch (NextOffset %d, read %d)", op, ErrConflict, cur, next)
	}
	if err = tx.Commit(ctx); err != nil {
		s.ids.Drop(scope)
		return res, false, commitError(ctx, op, err)
	}
	// The IDs version moved (or lanes' IDs may be missing from the
	// cache): the next Apply with IDs loads.
	s.ids.Drop(scope)
	return sink.Result{Applied: len(offsets) - skipped - len(dups), Skipped: skipped, NextOffset: after.NextOffset,
		Duplicates: dups}, false, nil
}

// deadLetterOnGapped is the rest of a plain DeadLetter on a gapped
// scope, in tx that holds the fence row (row) FOR UPDATE after the
// holder check: a record in a done span is a replay (nothing stored);
// otherwise the row is stored and the watermark raised to rec.Offset+1
// and over the spans that then touch it ([sink.Checkpoint.Raise]), the
// rows below it deleted.
func (s *Sink) deadLetterOnGapped(ctx context.Context, tx pgx.Tx, tok epochs.Token, row fenceRow, rec sink.DeadRecord, headers string) (sink.DeadLetterResult, error) {
	op := fmt.Sprintf("dead letter %s@%d", tok, rec.Offset)
	scope := tok.Scope()
	cp, _, _, err := s.readCheckpoint(ctx, tx, scope, row.nextOffset)
	if err != nil {
		return sink.DeadLetterResult{}, wrap(ctx, op+": read done spans", err)
	}
	if cp.Contains(rec.Offset) {
		return sink.DeadLetterResult{NextOffset: cp.NextOffset}, nil
	}
	dl := &deadLetterInsert{rec: rec, headers: headers}
	if err := s.insertDeadLetter(ctx, tx, tok, row.topicID, dl); err != nil {
		return sink.DeadLetterResult{}, wrap(ctx, op, err)
	}
	cp.Raise(rec.Offset + 1)
	gapped := len(cp.Done) > 0
	if err := s.storeCheckpoint(ctx, tx, scope, cp.NextOffset, false, gapped, !gapped); err != nil {
		return sink.DeadLetterResult{}, wrap(ctx, op+": advance fence", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return sink.DeadLetterResult{}, commitError(ctx, op, err)
	}
	s.ids.Drop(scope)
	return sink.DeadLetterResult{ID: dl.id, Stored: true, NextOffset: cp.NextOffset}, nil
}

// mergeDone adds to fences the done spans of their scopes, read in tx
// (the same snapshot as the fences): each fence's NextOffset becomes the
// watermark raised over the spans that touch it, Done the spans above
// it, merged, and Duplicates counts the lanes' duplicates not compacted
// yet.
func (s *Sink) mergeDone(ctx context.Context, tx pgx.Tx, fences []sink.Fence) error {
	rows, err := tx.Query(ctx, s.q.gap.spansList)
	if err != nil {
		return err
	}
	index := make(map[epochs.Scope]int, len(fences))
	for i, f := range fences {
		index[f.Scope] = i
	}
	var (
		sc             epochs.Scope
		from, to, dups int64
		enc            []byte
		spans          = make(map[int][]sink.Span)
	)
	_, err = pgx.ForEachRow(rows, []any{&sc.Group, &sc.Topic, &sc.Partition, &from, &to, &dups, &enc}, func() error {
		k, ok := index[sc]
		if !ok {
			return nil // spans are never stored without their fence row
		}
		var err error
		spans[k], err = decodeSpans(spans[k], from, to, enc)
		fences[k].Duplicates += dups
		return err
	})
	if err != nil {
		return err
	}
	for k, sps := range spans {
		cp := checkpointOf(fences[k].NextOffset, sps)
		fences[k].NextOffset, fences[k].Done = cp.NextOffset, cp.Done
	}
	return nil
}
