package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
)

// ErrConfig is matched by the errors [Open] returns for an invalid [Config]
// or a Path that cannot be used as the sink's database (missing directory,
// no permission, not an SQLite database).
var ErrConfig = errors.New("sqlite: invalid config")

// ErrSchema is matched by the errors [Open] returns when the database holds
// a table named like one of the sink's tables but with other columns, a
// schema version other than the one this package writes, or an incomplete
// set of the sink's tables. The error names the table.
var ErrSchema = errors.New("sqlite: conflicting schema")

// ErrBusy is matched by errors reporting that SQLite's write lock could not
// be taken within [Config.BusyTimeout] (SQLITE_BUSY or SQLITE_LOCKED). It is
// transient: nothing was written, and the call may be retried.
var ErrBusy = errors.New("sqlite: database busy")

// ErrNoReason is matched by the error [Sink.ResetFence] (and
// ResolveDeadLetter) returns when called with an empty reason: a reset
// lifts the fence and must say why. It is [sink.ErrNoReason].
var ErrNoReason = sink.ErrNoReason

// Compile-time checks of the capabilities a *Sink provides.
var (
	_ sink.Sink[*Tx]       = (*Sink)(nil)
	_ fenceadmin.Lister    = (*Sink)(nil)
	_ fenceadmin.Resetter  = (*Sink)(nil)
	_ fenceadmin.Historian = (*Sink)(nil)

	_ dlq.Store   = (*Sink)(nil)
	_ sink.Health = (*Sink)(nil)
)

// DefaultPrefix is the table name prefix used when [Config.Prefix] is empty.
const DefaultPrefix = "workrouter"

// DefaultBusyTimeout is the busy timeout used when [Config.BusyTimeout] is
// zero.
const DefaultBusyTimeout = 30 * time.Second

// SchemaVersion is the version of the sink's tables this package writes and
// accepts, recorded in <prefix>_schema.
// Version 2 added the log identity (topic ID), the reset's proof
// requirement and the dead letters; version 3 the proof floor
// (proof_below); version 4 the applied command
// IDs ([sink.Features].DedupeWindow) and the fences' count of skipped duplicates
// ([sink.Fence.Duplicates]); version 5 the done spans of a gapped
// checkpoint ([sink.Features].Gaps, <prefix>_done_spans, and the fences'
// count of them); version 6 made the proof requirement permanent (no
// proof floor) and records whether each claim was proven
// ([fenceadmin.Entry.Proven]). Open migrates a version 1 to 5 database
// in place.
const SchemaVersion = 6

// Config configures [Open]. The zero value of every optional field is a
// documented default.
type Config struct {
	// Path is the database file, created if missing. Required. It must be a
	// plain file system path: ":memory:" (not durable, not shareable),
	// "file:" URIs and paths containing '?' are refused.
	Path string
	// Prefix is the prefix of the sink's table names, an SQL identifier
	// ([A-Za-z_][A-Za-z0-9_]*); default [DefaultPrefix]. The tables are
	// <Prefix>_fences, <Prefix>_history, <Prefix>_schema, <Prefix>_dead_letters,
	// <Prefix>_dl_audit, <Prefix>_command_ids and <Prefix>_done_spans. Sinks with
	// different prefixes may share one file.
	Prefix string
	// DedupeWindow is the retention horizon of applied command IDs, in
	// offsets of a scope ([sink.Features].DedupeWindow, docs/design.md#command-ids);
	// default 100,000 offsets. Negative is invalid.
	DedupeWindow int64
	// BusyTimeout is how long a writing transaction waits for SQLite's
	// write lock held by another connection (another process) before
	// failing with [ErrBusy]; default [DefaultBusyTimeout].
	BusyTimeout time.Duration
	// Logger receives structured logs (open, resets); default discards.
	Logger *slog.Logger
	// ReadOnly opens the database for reading only, for tools that inspect
	// a sink (Fences, History): Open then never creates the file or the
	// sink's tables, never changes the journal mode, and leaves the file
	// byte for byte as it found it, and no -wal or -shm file behind that
	// was not there (see readOnlyDSN for how). A database without the
	// sink's tables fails with an error matching [ErrNoSchema]. The
	// writing methods fail with [ErrReadOnly].
	ReadOnly bool
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Path == "":
		return c, fmt.Errorf("%w: empty Path", ErrConfig)
	case c.Path == ":memory:":
		return c, fmt.Errorf("%w: Path %q is not a plain file path (an in-memory database is neither durable nor shareable between processes)", ErrConfig, c.Path)
	case strings.HasPrefix(c.Path, "file:"):
		return c, fmt.Errorf("%w: Path %q is a file: URI, not a plain file path: give the file's path; the sink sets the URI's options itself (Config.ReadOnly opens it read-only)", ErrConfig, c.Path)
	case strings.ContainsRune(c.Path, '?'):
		return c, fmt.Errorf("%w: Path %q contains '?'", ErrConfig, c.Path)
	case c.BusyTimeout < 0:
		return c, fmt.Errorf("%w: negative BusyTimeout %s", ErrConfig, c.BusyTimeout)
	case c.DedupeWindow < 0:
		return c, fmt.Errorf("%w: negative DedupeWindow %d", ErrConfig, c.DedupeWindow)
	}
	c.DedupeWindow = cmdids.WindowOf(c.DedupeWindow)
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !identRE.MatchString(c.Prefix) {
		return c, fmt.Errorf("%w: Prefix %q is not an SQL identifier ([A-Za-z_][A-Za-z0-9_]*)", ErrConfig, c.Prefix)
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// dsn returns the driver name of the database: the path, then the
// connection settings every connection of the pool applies when it opens.
func (c Config) dsn() string {
	ms := c.BusyTimeout.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(ms, 10))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	return c.Path + "?" + q.Encode()
}

// Sink is a fenced sink stored in an SQLite database file. It implements
// sink.Sink[*Tx], [fenceadmin.Lister], [fenceadmin.Resetter], [fenceadmin.Historian] and
// [sink.Features].DedupeWindow and [sink.Features].Gaps
// (a lane's [Sink.Apply]). Create it with
// [Open]. All its methods are safe for concurrent use by any number of
// goroutines, and any number of processes may use the same file at once.
type Sink struct {
	cfg Config
	db  *sql.DB
	log *slog.Logger

	// wlock serializes this Sink's writing transactions in-process, so that
	// they queue here instead of polling SQLite's busy handler. It is a
	// channel so that waiting for it respects the caller's ctx.
	wlock chan struct{}

	// table names
	fences, history, schema, deadLetters, dlAudit, commandIDs, doneSpans string

	// prepared statements, re-used per connection by database/sql
	selFence, selVersion, upsertFence, updNext, insHistory, resetFence, requireProof, insDeadLetter *sql.Stmt
	updNextOnce, insIDs, selIDs, pruneIDs                                                           *sql.Stmt
	selSpans, insSpan, delSpan, updCheckpoint                                                       *sql.Stmt

	// ids caches the retained command IDs of the scopes an Apply with IDs saw.
	ids cmdids.Cache

	closeOnce sync.Once
	closeErr  error

	// unchanged, set for a read-only Sink reading without locks, is
	// checked by Close (see readOnlyDSN).
	unchanged func() error

	// afterApplyCommit, if set (tests only: export_test.go), runs after
	// an Apply's COMMIT succeeded, and an error it returns is returned as
	// the commit's: a commit that landed and was reported as failed.
	afterApplyCommit func() error
}

// Open opens the sink's database at cfg.Path, creating the file and the
// sink's tables (in one transaction) if missing, and checks an existing
// schema. The database is put in WAL mode. It fails with an error matching
// [ErrConfig] for an invalid cfg or an unusable file, and [ErrSchema] for a
// conflicting schema. With [Config.ReadOnly] it creates and changes
// nothing, and fails with [ErrNoSchema] where it would have created the
// tables. Open may be called from any goroutine, by any number of
// processes on the same file.
func Open(ctx context.Context, cfg Config) (*Sink, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	dsn := cfg.dsn()
	var unchanged func() error
	if cfg.ReadOnly {
		var immutable bool
		if dsn, immutable, err = cfg.readOnlyDSN(); err != nil {
			return nil, err
		}
		if immutable {
			if unchanged, err = unchangedSince(cfg.Path); err != nil {
				return nil, err
			}
		}
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: open %q: %w", ErrConfig, cfg.Path, err)
	}
	db.SetMaxIdleConns(8)
	s := &Sink{
		cfg:     cfg,
		db:      db,
		log:     cfg.Logger,
		wlock:   make(chan struct{}, 1),
		fences:  cfg.Prefix + "_fences",
		history: cfg.Prefix + "_history",
		schema:  cfg.Prefix + "_schema",

		deadLetters: cfg.Prefix + "_dead_letters",
		dlAudit:     cfg.Prefix + "_dl_audit",
		commandIDs:  cfg.Prefix + "_command_ids",
		doneSpans:   cfg.Prefix + "_done_spans",
		unchanged:   unchanged,
	}
	if err := s.init(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// init checks the connection, the journal mode and the schema, and
// prepares the statements.
func (s *Sink) init(ctx context.Context) error {
	if s.cfg.ReadOnly {
		return s.initReadOnly(ctx)
	}
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return s.openErr(ctx, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("%w: %q: the database could not be put in WAL mode (journal_mode is %q)", ErrConfig, s.cfg.Path, mode)
	}
	did, err := s.ensureSchema(ctx)
	if err != nil {
		return err
	}
	if err := s.prepare(ctx); err != nil {
		return s.wrap(ctx, "prepare statements", err)
	}
	if did != "" {
		s.log.Info("sqlite sink: schema "+did, "path", s.cfg.Path, "prefix", s.cfg.Prefix, "version", SchemaVersion)
	}
	s.log.Info("sqlite sink opened", "path", s.cfg.Path, "prefix", s.cfg.Prefix)
	return nil
}

// openErr classifies an error of the first use of the database file.
func (s *Sink) openErr(ctx context.Context, err error) error {
	var se *sqlitedrv.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("%w: %q is not an SQLite database: %w", ErrConfig, s.cfg.Path, err)
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CORRUPT:
			return fmt.Errorf("%w: cannot use %q as a database: %w", ErrConfig, s.cfg.Path, err)
		}
	}
	return s.wrap(ctx, "open "+strconv.Quote(s.cfg.Path), err)
}

func (s *Sink) prepare(ctx context.Context) error {
	var err error
	prep := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = s.db.PrepareContext(ctx, q)
		return st
	}
	s.selFence = prep("SELECT epoch, member, next_offset, topic_id, proof_required, ids_version, duplicates, spans FROM " + s.fences + " WHERE grp = ? AND topic = ? AND part = ?")
	// The fence's version (sink.Fence.Version) is its last history row.
	s.selVersion = prep("SELECT coalesce(max(seq), 0) FROM " + s.history + " WHERE grp = ? AND topic = ? AND part = ?")
	// A claim keeps proof_required (a new row starts at 0): only a reset
	// sets it, and nothing clears it (sink.Fence.ProofRequired).
	s.upsertFence = prep("INSERT INTO " + s.fences + " (grp, topic, part, epoch, member, next_offset, topic_id) VALUES (?, ?, ?, ?, ?, ?, ?)" +
		" ON CONFLICT (grp, topic, part) DO UPDATE SET epoch = excluded.epoch, member = excluded.member, topic_id = excluded.topic_id")
	s.updNext = prep("UPDATE " + s.fences + " SET next_offset = ? WHERE grp = ? AND topic = ? AND part = ? AND epoch = ? AND member = ? AND next_offset = ?")
	s.insHistory = prep("INSERT INTO " + s.history + " (grp, topic, part, kind, epoch, member, next_offset, reason, at, topic_id, detail, done, proven)" +
		" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
	s.resetFence = prep("UPDATE " + s.fences + " SET epoch = -1, member = '', next_offset = ?, topic_id = ?, proof_required = 1, spans = ?" +
		" WHERE grp = ? AND topic = ? AND part = ?")
	s.requireProof = prep("UPDATE " + s.fences + " SET proof_required = 1 WHERE grp = ? AND topic = ? AND part = ?")
	s.insDeadLetter = prep("INSERT INTO " + s.deadLetters + " (grp, topic, part, topic_id, off, rec_key, rec_value, headers, rec_time, reason, error, attempts, epoch, member, at, state)" +
		" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'open')")
	// an Apply with IDs: the NextOffset update also bumps the IDs version, on
	// the condition that it is the one read (cmdids); the IDs of a batch
	// are one row; the prune and the load are ranges of the scope.
	s.updNextOnce = prep("UPDATE " + s.fences + " SET next_offset = ?, ids_version = ids_version + 1, duplicates = duplicates + ?" +
		" WHERE grp = ? AND topic = ? AND part = ? AND epoch = ? AND member = ? AND next_offset = ? AND ids_version = ?")
	s.insIDs = prep("INSERT INTO " + s.commandIDs + " (grp, topic, part, first_off, last_off, ids) VALUES (?, ?, ?, ?, ?, ?)")
	s.selIDs = prep("SELECT first_off, last_off, ids FROM " + s.commandIDs + " WHERE grp = ? AND topic = ? AND part = ?")
	s.pruneIDs = prep("DELETE FROM " + s.commandIDs + " WHERE grp = ? AND topic = ? AND part = ? AND last_off < ?")
	// A gapped checkpoint: its spans, and the fence row's update that
	// moves NextOffset and the spans' count (and, with IDs, the IDs
	// version), conditional on the row as read.
	s.selSpans = prep("SELECT from_off, to_off FROM " + s.doneSpans + " WHERE grp = ? AND topic = ? AND part = ? ORDER BY from_off")
	s.insSpan = prep("INSERT INTO " + s.doneSpans + " (grp, topic, part, from_off, to_off) VALUES (?, ?, ?, ?, ?)")
	s.delSpan = prep("DELETE FROM " + s.doneSpans + " WHERE grp = ? AND topic = ? AND part = ? AND from_off = ?")
	s.updCheckpoint = prep("UPDATE " + s.fences + " SET next_offset = ?, spans = ?, ids_version = ids_version + ?, duplicates = duplicates + ?" +
		" WHERE grp = ? AND topic = ? AND part = ? AND epoch = ? AND member = ? AND next_offset = ? AND ids_version = ?")
	return err
}

// DB returns the sink's database handle, for creating the handlers' tables
// and for reads outside the fenced unit (status pages, tests). Writes that
// must be fenced go through the *[Tx] an effect receives, never through
// DB. It may be called from any goroutine; the handle is closed by
// [Sink.Close].
func (s *Sink) DB() *sql.DB { return s.db }

// Close closes the sink's prepared statements and database handle. It is
// idempotent: later calls return the first call's result. Calls to the
// sink's other methods made after Close fail. A read-only Sink that read a
// WAL database without locks (see [Config.ReadOnly]) also fails with
// [ErrChangedDuringRead] if the file changed while it was open. It may be
// called from any goroutine.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		for _, st := range []*sql.Stmt{s.selFence, s.selVersion, s.requireProof, s.upsertFence, s.updNext, s.insHistory, s.resetFence, s.insDeadLetter, s.updNextOnce, s.insIDs, s.selIDs, s.pruneIDs,
			s.selSpans, s.insSpan, s.delSpan, s.updCheckpoint} {
			if st != nil {
				errs = append(errs, st.Close())
			}
		}
		errs = append(errs, s.db.Close())
		if s.unchanged != nil {
			errs = append(errs, s.unchanged())
		}
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("sqlite: close %q: %w", s.cfg.Path, err)
		}
	})
	return s.closeErr
}

// wrap annotates err from operation op: it matches ctx's error if ctx is
// done, and [ErrBusy] if SQLite's lock could not be taken.
func (s *Sink) wrap(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("sqlite: %s: %w (%w)", op, cerr, err)
	}
	if isBusy(err) {
		return fmt.Errorf("sqlite: %s: %w: %w", op, ErrBusy, err)
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED.
func isBusy(err error) bool {
	var se *sqlitedrv.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

// lockWriter takes the in-process writer lock, or fails when ctx is done.
func (s *Sink) lockWriter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.wlock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Sink) unlockWriter() { <-s.wlock }

// IsPermanent reports false: SQLite stores any value a handler gives
// it (its columns are not strictly typed by default), so no refusal is
// tied to a record's values alone (sink.Health).
func (s *Sink) IsPermanent(error) bool { return false }

// IsSinkFailure reports whether err is a failure of the database rather
// than of a handler: the write lock not taken in time ([ErrBusy]), an I/O
// error, a full disk, a read-only or unopenable file, corruption, memory
// exhaustion, an interrupted statement, or a cancelled context. It
// implements [sink.Health] and may be called from any goroutine.
func (s *Sink) IsSinkFailure(err error) bool {
	if errors.Is(err, ErrBusy) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	var se *sqlitedrv.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_INTERRUPT, sqlite3.SQLITE_PROTOCOL,
		sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_PERM:
		return true
	}
	return false
}

// fromDatabase reports whether err, an effect's error, came from the
// database (SQLite's driver, database/sql's transaction, the sink's busy
// wait) rather than from the handler's own work: only the driver and
// database/sql make these errors (sink.EffectError.TxHealthy).
func fromDatabase(err error) bool {
	var se *sqlitedrv.Error
	return errors.As(err, &se) || errors.Is(err, ErrBusy) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, sql.ErrTxDone)
}

// Ping checks that the database answers. It implements [sink.Health] and
// may be called from any goroutine.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return s.wrap(ctx, "ping", err)
	}
	var one int
	if err := s.db.QueryRowContext(ctx, "SELECT 1 FROM "+s.schema).Scan(&one); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s.wrap(ctx, "ping", err)
	}
	return nil
}
