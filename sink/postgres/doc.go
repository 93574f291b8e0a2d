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
// [ErrTxControl]. Savepoints ([pgx.Tx.Begin]) are fine. An effect may run
// more than once for the same record (the sink re-runs a batch whose
// transaction hit a deadlock or serialization failure), which is safe
// because only the committed run is visible.
//
// # Tables
//
// [Open] creates, on first use and in one transaction guarded by an
// advisory lock (several processes may open concurrently), six tables in
// [Config.Schema], named after [Config.Prefix] (default "workrouter"):
//
//   - <prefix>_fences: one row per scope — holder epoch and member,
//     next_offset, topic ID, the reset's proof requirement and proof floor
//     (see [sink.Fence]). A reset holder is stored as epoch -1, member
//     empty.
//   - <prefix>_history: one row per accepted claim (written in the claim's
//     transaction) and per admin reset (the audit row); see [Sink.History].
//   - <prefix>_dead_letters and <prefix>_dl_audit: the dead letters and
//     their state changes.
//   - <prefix>_command_ids: the command IDs [Sink.ApplyOnce] applied
//     within [Config.DedupeWindow], by scope, with their offsets.
//   - <prefix>_schema: the schema version (4).
//
// Open migrates a schema of version 1, 2 or 3 in place. An existing table of
// the same name with other columns, or another schema version, makes Open
// fail with [ErrSchema] and create nothing.
//
// # Round trips and pipelining
//
// One Apply costs the round trips the same writes cost without a fence
// (BEGIN, the handler's own statements, COMMIT): BEGIN and the fence read
// (a plain SELECT, no lock) go in one pipeline, and the conditional UPDATE
// of the fence row — made to raise when it matches no row — goes in one
// pipeline with COMMIT, so that a fenced batch's COMMIT never runs. Only a
// refused batch pays one more round trip, to roll back and read the
// stored holder for its [sink.FencedError]. The fence row is only locked
// by that final UPDATE, so a handler that blocks (or a worker that is
// paused) in the middle of a batch does not hold it, and a newer tenure's
// Claim goes through at once; the UPDATE then matches no row, and the
// stale batch is rolled back. The first use of a statement on a
// connection costs pgx one more round trip to prepare it.
//
// Handlers that issue several statements per command should pipeline them
// with [pgx.Batch] and tx.SendBatch: the whole batch costs one round trip.
// Statement preparation is cached per connection by pgx. The tx a handler
// receives refuses every call (pgx.ErrTxClosed) once its Apply has
// returned.
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
