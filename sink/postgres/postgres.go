package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
)

// Compile-time checks of the capabilities a *Sink provides.
var (
	_ sink.Sink[pgx.Tx]    = (*Sink)(nil)
	_ fenceadmin.Lister    = (*Sink)(nil)
	_ fenceadmin.Resetter  = (*Sink)(nil)
	_ fenceadmin.Historian = (*Sink)(nil)

	_ dlq.Store   = (*Sink)(nil)
	_ sink.Health = (*Sink)(nil)
)

// ErrConfig is matched by the errors [Open] returns for an invalid [Config]:
// a missing or unparsable DSN, a DSN that names no host, user or database
// (nor do PGHOST, PGUSER, PGDATABASE or PGSERVICE), a Schema or Prefix
// that is not a plain SQL identifier, a negative IdleInTxTimeout.
var ErrConfig = errors.New("postgres: invalid config")

// ErrUnreachable is matched by the error [Open] returns when it cannot
// connect to the server (refused, unresolvable, timed out, or the server
// busy: too many connections, starting up or shutting down).
var ErrUnreachable = errors.New("postgres: server unreachable")

// ErrRefused is matched by the error [Open] returns when the server
// answered but refused the session for a reason no retry fixes: the
// database does not exist (SQLSTATE 3D000), the role does not exist or
// may not log in, the password is wrong (class 28), the role may not
// connect to the database (42501), a connection parameter it does not
// know (42704): any answer but a busy server's (see [ErrUnreachable]).
// The error names the server and quotes its answer once (a
// *pgconn.PgError, matchable with errors.As).
var ErrRefused = errors.New("postgres: the server refused the connection")

// ErrSchema is matched by the error [Open] returns when the database holds
// a table with one of the sink's names but other columns, or a sink schema
// of another version, or when the sink's tables cannot be created. Open
// then leaves the database as it found it.
var ErrSchema = errors.New("postgres: incompatible sink schema")

// ErrNoReason is matched by the error [Sink.ResetFence] (and
// ResolveDeadLetter) returns for an empty reason: a reset lifts the fence
// and must say why. It is [sink.ErrNoReason].
var ErrNoReason = sink.ErrNoReason

// ErrClosed is matched by the errors a [Sink]'s methods return after
// [Sink.Close].
var ErrClosed = errors.New("postgres: sink closed")

// ErrOutcomeUnknown is matched by the error [Sink.Apply] returns when the
// connection failed during COMMIT, so the batch may or may not have been
// committed. It is transient and never matches [sink.ErrFenced]: retry the
// same batch (offsets already applied are skipped).
var ErrOutcomeUnknown = errors.New("postgres: commit outcome unknown")

// ErrConflict is matched by the error [Sink.Apply] returns when several
// Applies of the same token kept moving NextOffset under each other and
// the batch could not be applied after several attempts. It is transient
// and never matches [sink.ErrFenced]; one tenure should apply its batches
// one at a time.
var ErrConflict = errors.New("postgres: concurrent applies by one tenure")

// ErrTxControl is matched by the error Commit and Rollback return when a
// handler calls them on the transaction the sink handed it, and by the
// error of a statement that controls the transaction (COMMIT, END,
// ROLLBACK, ABORT, BEGIN, START TRANSACTION, SAVEPOINT, RELEASE, ROLLBACK
// TO, PREPARE TRANSACTION, COMMIT or ROLLBACK PREPARED, SET TRANSACTION,
// SET SESSION CHARACTERISTICS) that a handler runs through it with Exec,
// Query, QueryRow, SendBatch or Prepare, wherever the statement stands in
// the SQL text: the sink owns the transaction's end, because the fence
// check runs just before COMMIT. An Apply whose transaction a handler
// ended anyway (through tx.Conn(), which is not guarded) fails with it
// too, without writing its checkpoint.
var ErrTxControl = errors.New("postgres: handlers must not commit or roll back the sink's transaction")

// Defaults of Config fields.
const (
	defaultSchema          = "public"
	defaultPrefix          = "workrouter"
	defaultIdleInTxTimeout = 30 * time.Second
	defaultConnectTimeout  = 10 * time.Second
	// maxPrefixLen keeps <prefix>_history_scope_idx within PostgreSQL's
	// 63-byte identifier limit.
	maxPrefixLen = 40
	maxIdentLen  = 63
)

// identRE is what Schema and Prefix must match: a plain, unquoted-style
// SQL identifier.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Config configures [Open]. The zero value of every optional field is a
// documented default.
type Config struct {
	// DSN is the connection string, in pgx/libpq syntax (URL or key=value),
	// e.g. postgres://postgres@127.0.0.1:5432/test. Required unless Pool
	// is set. It must name the host, the user and the database (or leave
	// them to PGHOST, PGUSER and PGDATABASE, or a PGSERVICE/service): Open
	// does not take libpq's defaults (the local socket, the operating
	// system's user, a database named after it) for a sink.
	DSN string
	// Pool, if set, is used instead of opening a pool from DSN. Close does
	// not close it. The sink cannot set session parameters on a pool it
	// did not open: set idle_in_transaction_session_timeout on it yourself
	// (see IdleInTxTimeout).
	Pool *pgxpool.Pool
	// Schema is the PostgreSQL schema of the sink's tables; default
	// "public". It is created if it does not exist. It must be a plain
	// identifier (letters, digits, underscores, not starting with a digit).
	Schema string
	// Prefix is the table name prefix; default "workrouter". The tables are
	// <prefix>_fences, <prefix>_history, <prefix>_schema,
	// <prefix>_dead_letters, <prefix>_dl_audit, <prefix>_command_ids and
	// <prefix>_done. It
	// must be a plain identifier of at most 40 bytes.
	Prefix string
	// DedupeWindow is the retention horizon of applied command IDs, in
	// offsets of a scope ([sink.Features].DedupeWindow, docs/design.md#command-ids);
	// default 100,000 offsets. Negative is invalid.
	DedupeWindow int64
	// IdleInTxTimeout is set as idle_in_transaction_session_timeout on the
	// sessions the sink opens, so that a paused (SIGSTOPped) worker's open
	// transaction cannot hold locks forever; default 30s. It must be longer
	// than any pause between a handler's statements. Negative is invalid.
	IdleInTxTimeout time.Duration
	// Logger receives structured logs; default discards.
	Logger *slog.Logger
	// ReadOnly opens the sink for reading only, for tools that inspect it
	// (Fences, History): Open creates no schema and no table, and fails
	// with an error matching [ErrNoSchema] where it would have created
	// them; the sessions of a pool it opens are read-only on the server
	// (default_transaction_read_only); the writing methods fail with
	// [ErrReadOnly].
	ReadOnly bool
}

// Sink is a fenced sink in a PostgreSQL database. It implements
// [sink.Sink] with [pgx.Tx] as the transaction handle, [fenceadmin.Lister],
// [fenceadmin.Resetter] and [sink.Features].DedupeWindow. Create it
// with [Open]. All methods are safe for concurrent use by any number of
// goroutines (and processes sharing the database).
type Sink struct {
	pool     *pgxpool.Pool
	ownsPool bool
	log      *slog.Logger
	schema   string
	prefix   string
	readOnly bool
	q        queries
	window   int64 // Config.DedupeWindow, its default filled in
	ids      cmdids.Cache
	views    views     // the fence each tenure's last apply left (view.go)
	gaps     *gapState // the lanes' state and metrics (gaps.go)
	// afterCommit, if set (tests only), runs after an apply's COMMIT
	// answered and before its view is recorded.
	afterCommit func()
	// laneGuarded, if set (tests only), runs after a lane's guard
	// (laneGuard) passed and before its check and COMMIT.
	laneGuarded func()
	closed      atomic.Bool
	close       sync.Once
}

// Open connects to the database described by cfg, checks that it is
// reachable (an error matching [ErrUnreachable] if not, naming the server,
// or [ErrRefused] if the server answered that the database, the role or
// the password is wrong),
// and creates the sink's tables on first use (an error matching
// [ErrSchema] if conflicting tables exist; with [Config.ReadOnly] it
// creates nothing and fails with [ErrNoSchema] instead). An invalid cfg fails with
// [ErrConfig]. Open may be called from any goroutine, also by several
// processes at once against the same database.
func Open(ctx context.Context, cfg Config) (*Sink, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	if cfg.Schema == "" {
		cfg.Schema = defaultSchema
	}
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	if cfg.IdleInTxTimeout == 0 {
		cfg.IdleInTxTimeout = defaultIdleInTxTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case !identRE.MatchString(cfg.Schema) || len(cfg.Schema) > maxIdentLen:
		return nil, fmt.Errorf("%w: Schema %q is not a plain SQL identifier (letters, digits and underscores, not starting with a digit, at most %d bytes)",
			ErrConfig, cfg.Schema, maxIdentLen)
	case !identRE.MatchString(cfg.Prefix) || len(cfg.Prefix) > maxPrefixLen:
		return nil, fmt.Errorf("%w: Prefix %q is not a plain SQL identifier (letters, digits and underscores, not starting with a digit, at most %d bytes)",
			ErrConfig, cfg.Prefix, maxPrefixLen)
	case cfg.IdleInTxTimeout < 0:
		return nil, fmt.Errorf("%w: negative IdleInTxTimeout %s", ErrConfig, cfg.IdleInTxTimeout)
	case cfg.DedupeWindow < 0:
		return nil, fmt.Errorf("%w: negative DedupeWindow %d", ErrConfig, cfg.DedupeWindow)
	case cfg.Pool == nil && cfg.DSN == "":
		return nil, fmt.Errorf("%w: DSN is required (or pass a Pool)", ErrConfig)
	}

	s := &Sink{
		pool:   cfg.Pool,
		log:    cfg.Logger,
		schema: cfg.Schema,
		prefix: cfg.Prefix,
		q:      newQueries(cfg.Schema, cfg.Prefix),
		window: cmdids.WindowOf(cfg.DedupeWindow),

		readOnly: cfg.ReadOnly,
	}
	s.gaps = newGapState()
	var target string
	if s.pool == nil {
		pcfg, err := pgxpool.ParseConfig(cfg.DSN)
		if err != nil {
			// pgx's parse errors redact the password.
			return nil, fmt.Errorf("%w: cannot parse DSN: %w", ErrConfig, err)
		}
		if err := checkDSN(cfg.DSN); err != nil {
			return nil, err
		}
		if pcfg.ConnConfig.ConnectTimeout == 0 {
			pcfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
		}
		ms := (cfg.IdleInTxTimeout + time.Millisecond - 1) / time.Millisecond
		pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(int64(ms), 10)
		if cfg.ReadOnly {
			readOnlySessions(pcfg)
		}
		target = describeTarget(pcfg)
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, target, err)
		}
		s.pool, s.ownsPool = pool, true
	} else {
		pcfg := s.pool.Config()
		target = describeTarget(pcfg)
		if _, ok := pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
			s.log.Warn("postgres sink: the given pool does not set idle_in_transaction_session_timeout; a paused worker's transaction may hold locks until the server notices the dead connection",
				"server", target)
		}
	}
	if err := s.pool.Ping(ctx); err != nil {
		s.closePool()
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("postgres: open %s: %w (%w)", target, cerr, err)
		}
		if pgErr := refusal(err); pgErr != nil {
			return nil, fmt.Errorf("%w: %s answered: %w", ErrRefused, target, pgErr)
		}
		return nil, fmt.Errorf("%w: cannot connect to %s: %w", ErrUnreachable, target, err)
	}
	if s.readOnly {
		if err := s.checkSchemaExists(ctx, target); err != nil {
			s.closePool()
			return nil, err
		}
	}
	if err := s.ensureSchema(ctx); err != nil {
		s.closePool()
		return nil, err
	}
	s.log.Debug("postgres sink open", "server", target, "schema", s.schema, "prefix", s.prefix)
	return s, nil
}

// refusal returns the server's answer in err, a connection error, when
// the server answered and refused the session (see ErrRefused), or nil:
// nil also for a busy server's answer (class 53, insufficient resources:
// too many connections; class 57, operator intervention: starting up or
// shutting down), which a later try may not get.
func refusal(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return nil
	}
	switch pgErr.Code[:2] {
	case "53", "57":
		return nil
	}
	return pgErr
}

// checkSchemaExists fails with an error matching ErrNoSchema, naming the
// schema, when s's schema does not exist in the database: a read-only
// Open says so rather than that the schema holds no tables.
func (s *Sink) checkSchemaExists(ctx context.Context, target string) error {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, s.schema).Scan(&exists); err != nil {
		return wrap(ctx, "open: read catalog", err)
	}
	if !exists {
		return fmt.Errorf("%w: schema %q does not exist on %s (a worker creates it on first use; a read-only open never does)",
			ErrNoSchema, s.schema, target)
	}
	return nil
}

// describeTarget names the server and database of a pool config, without
// secrets, for error messages.
func describeTarget(pcfg *pgxpool.Config) string {
	c := pcfg.ConnConfig
	return fmt.Sprintf("postgres server %s:%d (database %q, user %q)", c.Host, c.Port, c.Database, c.User)
}

// Pool returns the connection pool the sink uses (its own, or
// [Config.Pool]). Use it to read what handlers wrote; writes that must be
// fenced go through the tx a handler receives. It may be called from any
// goroutine.
func (s *Sink) Pool() *pgxpool.Pool { return s.pool }

// Close closes the sink's pool if the sink opened it (a [Config.Pool] is
// left open). It is idempotent; later calls of the sink's methods fail with
// [ErrClosed]. Close may be called from any goroutine; it waits for
// connections in use to be released.
func (s *Sink) Close() error {
	s.close.Do(func() {
		s.closed.Store(true)
		s.closePool()
	})
	return nil
}

func (s *Sink) closePool() {
	if s.ownsPool {
		s.pool.Close()
	}
}

// check returns the error a method must return before touching the
// database: the sink is closed, or ctx is done.
func (s *Sink) check(ctx context.Context, op string) error {
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", op, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	return nil
}

// wrap annotates a database error of op; if ctx is done, the result also
// matches ctx's error (pgx does not always say so).
func wrap(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("postgres: %s: %w (%w)", op, cerr, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// IsSinkFailure reports whether err is a failure of the database rather
// than of a handler: a lost or refused connection, a timeout, an unknown
// commit outcome, a concurrent-apply conflict, a serialization failure or
// deadlock, the server out of resources or shutting down, a statement
// cancelled by the server, or a cancelled context — also when it surfaced
// through a handler's statement. io.EOF and io.ErrUnexpectedEOF alone are
// not taken as a lost connection: handlers meet them in their own work
// (encoding/json returns io.ErrUnexpectedEOF for truncated input), and a
// connection that did break is found by the consumer's Ping. It implements
// [sink.Health] and may be called from any goroutine.
func (s *Sink) IsSinkFailure(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrConflict), errors.Is(err, ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, net.ErrClosed),
		errors.Is(err, pgx.ErrTxClosed), errors.Is(err, puddle.ErrClosedPool), pgconn.Timeout(err), pgconn.SafeToRetry(err):
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"40", // transaction rollback: serialization failure, deadlock
			"53", // insufficient resources
			"57", // operator intervention: admin shutdown, query canceled, idle-in-transaction timeout
			"58", // system error
			"XX": // internal error
			return true
		}
		return false
	}
	// A closed connection surfaces as a plain error from pgx/pgconn.
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}

// IsPermanent reports whether err, returned by an effect, is an error of
// the server that no retry of the same record can fix, so that the record
// is dead-lettered at once instead of after its retry budget:
//
//   - SQLSTATE class 22, data exception: a value the statement was given
//     is not valid for its type or encoding (22021, text that is not
//     UTF-8, such as a record's binary key written to a text column;
//     22P02, invalid input syntax; 22003, out of range; 22001, too long;
//     22012, division by zero …). It is raised by evaluating the
//     statement on its values, never by another session.
//   - class 54, program limit exceeded: a value too large for what the
//     statement does with it (54000, an index row larger than a B-tree
//     page allows), or a statement too complex; the same values exceed the
//     same limit every time.
//
// Not permanent, and so retried within the budget:
//
//   - class 23, integrity constraint violation: a unique (23505) or
//     exclusion (23P01) violation can be a race with a concurrent
//     transaction (another partition's handler, or a zombie's transaction
//     that is then rolled back) that a retry wins; a foreign key (23503)
//     can name a row another partition's command has not created yet; a
//     check (23514) or not-null (23502) violation can depend on rows other
//     commands change. A handler that knows its constraint cannot pass
//     marks the error permanent itself (consumer.Permanent).
//   - class 42, syntax error or access rule violation (an undefined
//     table or column, a missing privilege): the handler's code or the
//     schema is wrong, not the record; a migration or a GRANT fixes it, and
//     dead-lettering at once would dead-letter every record at full speed
//     after a bad deploy.
//   - failures of the database (IsSinkFailure): connection errors, 40001
//     serialization failure, 40P01 deadlock, 57P01 admin shutdown, 53xxx
//     insufficient resources …, retried without limit.
//
// It implements [sink.Health] and may be called from any
// goroutine.
func (s *Sink) IsPermanent(err error) bool {
	if err == nil || s.IsSinkFailure(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", // data exception
		"54": // program limit exceeded
		return true
	}
	return false
}

// Ping checks that the server answers. It implements [sink.Health] and
// may be called from any goroutine.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.check(ctx, "ping"); err != nil {
		return err
	}
	if err := s.pool.Ping(ctx); err != nil {
		return wrap(ctx, "ping", err)
	}
	return nil
}
