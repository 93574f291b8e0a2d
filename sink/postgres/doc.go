// Package postgres is the PostgreSQL backend of the workrouter fenced-sink
// contract ([sink.Sink]), built on pgx. Handlers receive a [pgx.Tx] and
// write ordinary SQL inside the fenced unit: the batch's effects, the fence
// check and the new NextOffset commit in one PostgreSQL transaction, or not
// at all (docs/design.md#protocol).
//
// # Usage
//
// Open a [Sink] once per process and hand it to the consumer:
//
//	s, err := postgres.Open(ctx, postgres.Config{DSN: "postgres://app@db:5432/app"})
//	if err != nil { … }
//	defer s.Close()
//	w, err := consumer.New(ctx, consumer.Config[pgx.Tx]{
//		Brokers: brokers, Group: "ledger", Topic: "postings",
//		Sink: s,
//		Handlers: map[string]consumer.Handler[pgx.Tx]{
//			"post": func(ctx context.Context, tx pgx.Tx, cmd consumer.Command) error {
//				_, err := tx.Exec(ctx, `INSERT INTO postings(id, body) VALUES ($1, $2)`, cmd.Key, cmd.Payload)
//				return err
//			},
//		},
//	})
//
// A handler must only write through tx (never through another connection:
// that write would not be fenced) and must not commit or roll tx back:
// [pgx.Tx.Commit] and [pgx.Tx.Rollback] on the handed-out tx fail with
// [ErrTxControl], and so does a statement that ends or changes the
// transaction (COMMIT, ROLLBACK, BEGIN, SAVEPOINT, SET TRANSACTION …) sent
// through it, which is not run; a batch whose transaction a handler ended
// through tx.Conn() fails with it before its fence check is sent.
// Savepoints ([pgx.Tx.Begin]) are fine. An effect may run
// more than once for the same record (the sink re-runs a batch whose
// transaction hit a deadlock or serialization failure), which is safe
// because only the committed run is visible.
//
// # Tables
//
// [Open] creates, on first use and in one transaction guarded by an
// advisory lock (several processes may open concurrently), seven tables in
// [Config.Schema], named after [Config.Prefix] (default "workrouter"):
//
//   - <prefix>_fences: one row per scope — holder epoch and member,
//     next_offset, topic ID, the reset's proof requirement
//     (see [sink.Fence]), the command IDs' version and duplicates count,
//     and the gapped flag (the scope may have done spans). A reset holder
//     is stored as epoch -1, member empty.
//   - <prefix>_history: one row per accepted claim (written in the claim's
//     transaction) and per admin reset (the audit row); see [Sink.History].
//   - <prefix>_dead_letters and <prefix>_dl_audit: the dead letters and
//     their state changes.
//   - <prefix>_command_ids: the command IDs [Sink.Apply] with command IDs applied
//     within [Config.DedupeWindow], by scope, with their offsets.
//   - <prefix>_done: the done spans above a gapped scope's watermark
//     (a lane's [Sink.Apply]), one row per lane batch (its spans encoded in
//     one column), keyed by (scope, the end of its last span).
//   - <prefix>_schema: the schema version (6).
//
// Open migrates a schema of version 1 to 5 in place. An existing table of
// the same name with other columns, or another schema version, makes Open
// fail with [ErrSchema] and create nothing.
//
// # Round trips and pipelining
//
// A tenure's first Apply through a Sink costs the round trips the same
// writes cost without a fence (BEGIN, the handler's own statements,
// COMMIT): BEGIN and the fence read (a plain SELECT, no lock) go in one
// pipeline, and the conditional UPDATE of the fence row — made to raise
// when it matches no row — goes in one pipeline with COMMIT, so that a
// fenced batch's COMMIT never runs. Its later ones cost one fewer: the
// Sink keeps the view the tenure's last commit left (NextOffset and the
// IDs version), skips the read, and begins the transaction in one round
// trip with the handler's first statement (or with the UPDATE and COMMIT
// if it ran none); the UPDATE requires the view, so a view another
// process made stale fails it, the batch rolls back, and it runs again
// on the read. A tenure superseded through this Sink, or one it has no
// view of, is still refused by the read before any effect runs; one
// superseded by another process since its last apply runs its effects
// (rolled back, never visible) before the UPDATE refuses them; if one of
// them fails instead (on a row the new holder wrote), the fence is read
// before the error is returned, and the refusal is the fence's. A
// replay, a claim, a reset, a dead letter and a lane's apply of the
// scope go back to the read. Only a
// refused batch pays one more round trip, to roll back and read the
// stored holder for its [sink.FencedError]. The fence row is only locked
// by that final UPDATE, so a handler that blocks (or a worker that is
// paused) in the middle of a batch does not hold it, and a newer tenure's
// Claim goes through at once; the UPDATE then matches no row, and the
// stale batch is rolled back. The first use of a statement on a
// connection costs pgx one more round trip to prepare it. The work is not
// the same: the read (first Apply) and the UPDATE are more statements,
// the UPDATE a second row written per transaction: at batch 1 the fence
// costs CPU on the server and the client that larger batches spread out
// (BenchmarkFenceCost; the figures are in docs/performance.md).
//
// Handlers that issue several statements per command should pipeline them
// with [pgx.Batch] and tx.SendBatch: the whole batch costs one round trip.
// Statement preparation is cached per connection by pgx. The tx a handler
// receives refuses every call (pgx.ErrTxClosed) once its Apply has
// returned.
//
// # Checkpoints with gaps
//
// The sink implements [sink.Features].Gaps for a consumer with lanes
// (consumer.Config.KeyConcurrency; docs/postgres.md#gaps). The lanes of
// one scope must not serialize on its fence row, so a lane's transaction
// never updates it: a lane's [Sink.Apply] reads the fence and the done
// spans its batch overlaps (no lock, outside the transaction), runs the
// effects, takes advisory locks on the batch's records and reads the
// spans again (the guard: of the units of a tenure that share a record,
// such as a late attempt and its retry, one applies it, and the others
// run again without it), and then sends one statement — the fence row
// FOR SHARE, the holder check, the insert of the batch's spans into
// <prefix>_done, raising when the check fails — in one pipeline with
// COMMIT. Share locks
// do not conflict with each other, and they are held only while the
// server runs that pipeline: a Claim (FOR UPDATE) waits for lanes that
// are committing, never for a lane's handler, and every lane that checks
// after it sees the new holder. A lane's result carries the watermark it
// read, which rises lazily: every claim compacts (raises next_offset over
// the spans that touch it and deletes their rows), and so does a short
// transaction that every 32nd lane batch of a scope runs after its
// commit, waiting at most 100 ms for the fence row and giving up,
// counted ([Sink.GapStats], exported by package postgresprom as
// workrouter_postgres_gap_compactions_total{outcome="busy"}) and logged,
// when lanes keep it.
//
// A lane holds a connection of the pool only while it talks to the
// database: its first read goes back to the pool before the handler runs,
// the handler's transaction begins at its first statement (a handler
// that waits on an HTTP call before it writes holds no connection while
// it waits), and the guard begins one itself when the handler ran no
// statement. A handler that waits after a statement
// holds its connection through the wait: then set pool_max_conns in the
// DSN to at least the lanes a process runs (partitions × KeyConcurrency),
// or the pool serializes them (pgxpool's default is max(4, CPUs)).
//
// With command IDs, a lane's duplicates are the IDs the scope applied
// before the tenure, by this lane, and by the tenure's other lanes whose
// batches committed before the lookup: a resend carries its command's
// key, and so lands in the lane of the original. Two records of one ID
// and different keys in two lanes at once may both be applied. The
// lanes record their IDs without moving the fence row's IDs version;
// the claims and plain calls on a gapped scope move it or read the
// table, so no cache misses a lane's IDs.
//
// The plain calls stay correct on a gapped scope: they skip the records
// in a done span, raise the watermark past their batch and over the
// spans it then touches ([sink.Checkpoint.Raise]), and clear the flag
// when no span is left. A scope that never had lanes is not flagged, and
// its plain Applies cost what they did (the flag rides on the fence read).
//
// # Idle-in-transaction timeout
//
// A worker process that is paused (GC, a frozen VM, SIGSTOP) in the middle
// of a batch keeps its transaction open, and with it the row locks its
// effects took (an Apply's pause never holds the fence row's lock: the
// UPDATE that takes it and COMMIT reach the server in one pipeline, which
// it runs back to back). The sink
// therefore sets idle_in_transaction_session_timeout
// ([Config.IdleInTxTimeout], default 30s) on the sessions it opens: the
// server ends such a session after the timeout, rolling its transaction
// back and releasing its locks. The paused worker then gets a connection
// error when it wakes, never a committed stale write. When you pass your
// own [Config.Pool], set that parameter on it yourself (Open logs a warning
// if it is missing).
//
// # Outcomes
//
// A fenced Claim or Apply returns a *[sink.FencedError] (matching
// [sink.ErrFenced]): final for that tenure. Everything else is transient and
// never matches sink.ErrFenced, including a COMMIT whose outcome is unknown
// because the connection dropped ([ErrOutcomeUnknown]): the consumer
// retries the batch, and since the stored NextOffset skips offsets already
// applied, a batch that did commit is a no-op the second time.
//
// All methods of a [Sink] are safe for concurrent use by any number of
// goroutines and processes.
package postgres
