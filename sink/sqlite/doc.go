// Package sqlite is the embedded, durable fenced sink of workrouter: it
// stores every scope's fence (holder token and NextOffset, docs/design.md#protocol) in
// an SQLite database file, next to the tables the handlers write, so that a
// batch's effects and its new NextOffset commit in one SQLite transaction.
// It uses modernc.org/sqlite, a pure-Go driver (no cgo).
//
// # Use with a consumer
//
// Open a [Sink] on a file, create the handlers' tables through [Sink.DB],
// and hand the sink to a worker as a sink.Sink[*sqlite.Tx]. Handlers receive
// the *[Tx] of the fenced unit — the statement methods of *sql.Tx, minus
// Commit and Rollback, which it refuses ([ErrTxControl]), as it refuses
// statements such as COMMIT, ROLLBACK, BEGIN and SAVEPOINT — and write
// ordinary SQL through it:
//
//	snk, err := sqlite.Open(ctx, sqlite.Config{Path: "/var/lib/ledger/ledger.db"})
//	if err != nil { ... }
//	defer snk.Close()
//	_, err = snk.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS balances(
//		account TEXT PRIMARY KEY, cents INTEGER NOT NULL)`)
//	w, err := consumer.New(ctx, consumer.Config[*sqlite.Tx]{
//		Brokers: brokers, Group: "ledger", Topic: "postings",
//		Sink: snk,
//		Handlers: map[string]consumer.Handler[*sqlite.Tx]{
//			"post": func(ctx context.Context, tx *sqlite.Tx, cmd consumer.Command) error {
//				_, err := tx.ExecContext(ctx, `INSERT INTO balances VALUES(?, ?)
//					ON CONFLICT(account) DO UPDATE SET cents = cents + excluded.cents`,
//					string(cmd.Key), amount(cmd))
//				return err
//			},
//		},
//	})
//
// Handlers must write only through the tx they are given (never through
// [Sink.DB], which is outside the fenced unit and, for writes, would wait
// for the sink's own write lock) and must not call the sink's methods.
//
// # Several processes, one file
//
// Any number of processes (and any number of [Sink] values in one process)
// may open the same file: the database runs in WAL mode, so readers never
// block, and every writing transaction starts with BEGIN IMMEDIATE, which
// takes SQLite's single write lock at once and waits for it up to
// [Config.BusyTimeout]. The fence read and the conditional NextOffset update
// of an Apply therefore happen under one write lock: a claim by another
// process cannot slip between them. Within one process, writers also queue on
// an in-process lock, so they do not poll SQLite's busy handler. If the busy
// timeout still expires, the call fails with an error matching [ErrBusy]:
// a transient failure that the consumer retries, never a fenced outcome.
// A process paused inside a writing transaction (SIGSTOP, a debugger, a
// frozen VM) keeps the write lock while it is paused: the fence holds (its
// batch was checked under that lock, and nobody can write before it
// commits or dies), but every other writer, the claim of the worker that
// takes its partitions over included, waits and fails with [ErrBusy]
// until it resumes or its process ends. On SQLite a pause past the
// session timeout therefore delays the takeover rather than risking a
// late write; a sink whose lock is not tied to a process (PostgreSQL,
// Redis) takes over at once.
// The file must be on a local file system (WAL needs shared memory; network
// file systems are not supported by SQLite's WAL mode).
//
// # Reading a sink without changing it
//
// Tools that only inspect a sink (the CLI's fences list and history, and
// status) open it with [Config.ReadOnly]: nothing is created, no schema,
// no journal-mode switch, no -wal or -shm file left behind, and a file
// without the sink's tables fails with [ErrNoSchema].
//
// # Durability
//
// Connections run with PRAGMA synchronous=FULL: every commit is synced to the
// WAL file before Claim, Apply or ResetFence returns, so a claim or a batch
// that was acknowledged survives an operating-system crash or a power loss,
// not only a process crash. The cheaper synchronous=NORMAL may roll the last
// commits back on power loss: the fence and the effects of a batch would
// still vanish together (the next tenure would resume at the older
// NextOffset and re-apply those records, if Kafka still retains them), but
// whatever read the lost state in between (readers of the handlers' tables,
// downstream systems, an operator's reset) would have seen writes that later
// disappeared. FULL costs one fsync of the WAL per transaction, which is why
// batching (consumer.Config.MaxBatch) matters for throughput.
//
// # Lanes: what concurrency can and cannot buy on SQLite
//
// The sink implements [sink.Features].Gaps, the checkpoint with gaps that
// consumer.Config.KeyConcurrency needs (docs/design.md#gaps): each
// a lane's [Sink.Apply] is one writing transaction that checks the fence,
// skips the done offsets, runs the lane's effects and writes the new
// watermark and done spans, so every rule of the fence holds for lanes.
// But SQLite has one writer: the lanes' transactions serialize on its
// write lock, and a handler's I/O inside the transaction (an HTTP call,
// a 1 ms wait) serializes with them. Lanes therefore cannot multiply the
// throughput of a slow handler here, as they do on the memory sink and
// PostgreSQL; they only overlap the Go-side work of one lane (decoding,
// the next batch's preparation) with another's commit (BenchmarkGapLanes
// measures it; the figures are in docs/performance.md).
//
// Use lanes with SQLite for their ordering (a slow key does not hold up
// the others of its partition only when the handlers are fast), not for
// slow handlers: for those, use PostgreSQL, or do the slow I/O outside
// the sink (an outbox).
//
// # Tables
//
// The sink owns seven tables, named by [Config.Prefix] (default "workrouter"):
// <prefix>_fences (one row per scope: holder epoch and member, NextOffset,
// topic ID, the reset's proof requirement, see
// [sink.Fence]), <prefix>_history (one row per accepted claim and per
// reset, see [Sink.History]), <prefix>_dead_letters and <prefix>_dl_audit
// (the dead letters and their state changes), <prefix>_command_ids (the
// command IDs [Sink.Apply] with command IDs applied within [Config.DedupeWindow], by
// scope, with their offsets), <prefix>_done_spans (the done spans above
// a gapped scope's NextOffset, one row each, deleted as the watermark
// passes them; the fence row counts them, so a scope without gaps reads
// none) and <prefix>_schema (the
// schema version, [SchemaVersion]). They are created together, in one
// transaction, by the first Open, which also migrates a database of
// version 1 to 4 in place; an existing table of one of those names with
// other columns, or another version, makes Open fail with an error
// matching [ErrSchema].
package sqlite
