package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
)

// ErrConfig is matched by the errors [Open] returns for an invalid [Config].
var ErrConfig = errors.New("redis: invalid config")

// ErrUnavailable is matched by the errors of a call that could not reach
// the server or whose outcome is unknown (a lost connection, a timeout, a
// server loading its data or read-only): a failure of the sink, never of a
// handler ([Sink.IsSinkFailure]). Retry it.
var ErrUnavailable = errors.New("redis: server unavailable")

// ErrCommand is matched by the error of an Apply whose buffered commands
// cannot all run (a command on a key holding another type, an increment
// of a value that is not an integer or past ±2^53): it is returned inside
// a *sink.EffectError naming the record whose command failed, and nothing
// of the batch is written.
var ErrCommand = errors.New("redis: command refused")

// ErrNotReplicated is matched by the error of a write that the server
// applied but fewer than [Config.WaitReplicas] replicas acknowledged within
// [Config.WaitTimeout]: the write may be lost on a failover. It is a sink
// failure: the consumer retries the batch, which then replays.
var ErrNotReplicated = errors.New("redis: write not acknowledged by enough replicas")

// ErrNoReason is [sink.ErrNoReason].
var ErrNoReason = sink.ErrNoReason

// Compile-time checks of the capabilities a *Sink provides.
var (
	_ sink.Sink[*Tx]       = (*Sink)(nil)
	_ fenceadmin.Lister    = (*Sink)(nil)
	_ fenceadmin.Resetter  = (*Sink)(nil)
	_ fenceadmin.Historian = (*Sink)(nil)
	_ dlq.Store            = (*Sink)(nil)
	_ sink.Health          = (*Sink)(nil)
)

// DefaultPrefix is the key prefix used when [Config.Prefix] is empty.
const DefaultPrefix = "workrouter"

// DefaultHistoryCap is the number of history entries kept per scope when
// [Config.HistoryCap] is zero.
const DefaultHistoryCap = 100_000

// Config configures [Open]. The zero value of every optional field is a
// documented default.
type Config struct {
	// URL is the server: redis://[USER:PASSWORD@]HOST[:PORT][/DB] (or
	// rediss:// for TLS), as go-redis's ParseURL reads it. Required
	// unless Client is set.
	URL string
	// Client, if not nil, is used instead of dialling URL; Close does not
	// close it. Its MaxRetries should be -1: a retried script whose first
	// run landed is harmless (the retry finds the batch applied) but
	// makes Apply report it as a replay.
	Client *goredis.Client
	// Prefix is the first part of every key the sink and its handlers
	// write (<Prefix>:…), so that sinks with different prefixes share a
	// database; default [DefaultPrefix]. Letters, digits, '_', '-' and
	// '.' only (no glob character: the prefix is also a SCAN pattern).
	Prefix string
	// DedupeWindow is the retention horizon of applied command IDs, in
	// offsets of a scope ([sink.Features].DedupeWindow); default
	// 100,000 offsets. Negative is invalid.
	DedupeWindow int64
	// HistoryCap is how many history entries (claims and resets) a
	// scope keeps, the oldest trimmed first; default
	// [DefaultHistoryCap]. Negative keeps every entry.
	HistoryCap int
	// WaitReplicas, if positive, makes every claim, apply, dead letter
	// and reset wait (WAIT) until that many replicas acknowledged it,
	// failing with [ErrNotReplicated] after WaitTimeout (the package
	// documentation says why: asynchronous replication can move the
	// fence backwards on a failover).
	WaitReplicas int
	// WaitTimeout bounds WaitReplicas' wait; default 1s.
	WaitTimeout time.Duration
	// HeldWatches is how many scopes may each keep a connection of their
	// own that watches their fence between batches, so that a batch of
	// SET and DEL costs one round trip instead of two (the package
	// documentation, "The held watch"); default [DefaultHeldWatches].
	// Negative disables it: every such batch sends WATCH first. With URL,
	// the sink's pool is that much larger; with Client, the held
	// connections come out of its pool, at most half of its PoolSize.
	HeldWatches int
	// Logger receives structured logs (the persistence warning, resets);
	// default discards.
	Logger *slog.Logger
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.URL == "" && c.Client == nil:
		return c, fmt.Errorf("%w: neither URL nor Client", ErrConfig)
	case c.DedupeWindow < 0:
		return c, fmt.Errorf("%w: negative DedupeWindow %d", ErrConfig, c.DedupeWindow)
	case c.WaitReplicas < 0 || c.WaitTimeout < 0:
		return c, fmt.Errorf("%w: negative WaitReplicas or WaitTimeout", ErrConfig)
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(c.Prefix) {
		return c, fmt.Errorf("%w: Prefix %q: letters, digits, '_', '-' and '.' only", ErrConfig, c.Prefix)
	}
	c.DedupeWindow = cmdids.WindowOf(c.DedupeWindow)
	if c.HistoryCap == 0 {
		c.HistoryCap = DefaultHistoryCap
	}
	if c.HistoryCap < 0 {
		c.HistoryCap = 0 // the scripts' "no cap"
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = time.Second
	}
	if c.HeldWatches == 0 {
		c.HeldWatches = DefaultHeldWatches
	}
	if c.HeldWatches < 0 {
		c.HeldWatches = 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Persistence is what the server reported of its persistence settings at
// Open (CONFIG GET appendonly, appendfsync).
type Persistence struct {
	// AppendOnly and AppendFsync are the settings' values ("yes"/"no",
	// "always"/"everysec"/"no"); empty if they could not be read.
	AppendOnly, AppendFsync string
	// Err is why they could not be read (CONFIG disabled or renamed, as
	// managed services do), or nil.
	Err error
}

// Durable reports whether every acknowledged write is on disk before the
// reply: appendonly yes with appendfsync always. It may be called from
// any goroutine.
func (p Persistence) Durable() bool { return p.AppendOnly == "yes" && p.AppendFsync == "always" }

// Risk names what the settings can lose, or "" when they are durable. It
// may be called from any goroutine.
func (p Persistence) Risk() string {
	switch {
	case p.Err != nil:
		return "persistence settings unknown (" + p.Err.Error() + "): if the server is not appendonly yes + appendfsync always, a crash can lose acknowledged fence writes"
	case p.AppendOnly != "yes":
		return "appendonly is " + p.AppendOnly + ": a crash loses every write since the last RDB snapshot, so the fence and NextOffset can move backwards (a fenced zombie's holder can come back, records are applied twice)"
	case p.AppendFsync == "everysec":
		return "appendfsync is everysec: a crash can lose up to a second of acknowledged writes, so a checkpoint can move backwards and records be applied twice, and a superseded holder can come back"
	case p.AppendFsync != "always":
		return "appendfsync is " + p.AppendFsync + ": the operating system decides when writes reach the disk; a crash can lose acknowledged fence writes (checkpoint backwards, records applied twice)"
	}
	return ""
}

// Sink is a fenced sink on a Redis server. It implements [sink.Sink] with
// *[Tx] as the transaction handle and the optional capabilities listed in
// the package documentation. Open it with [Open]; all methods are safe for
// concurrent use by any number of goroutines and processes.
type Sink struct {
	cfg       Config
	rdb       *goredis.Client
	ownClient bool
	log       *slog.Logger
	persist   Persistence

	// next caches, per scope, the NextOffset the last claim or apply of a
	// tenure left, so that Apply runs its effects without reading the
	// fence first: the script checks the guess inside the atomic unit.
	mu   sync.Mutex
	next map[epochs.Scope]cached

	// ids caches, per scope, the applied command IDs and the IDs version
	// of the fence they mirror (an Apply with IDs).
	ids cmdids.Cache

	// held is the scopes' held watches (held.go).
	held *heldWatches

	// hookBeforeExec, if set (by tests), runs in a watched apply after
	// its checks passed and before its MULTI … EXEC.
	hookBeforeExec func(ctx context.Context)
}

type cached struct {
	tok epochs.Token
	cp  sink.Checkpoint
}

// Open connects to the server, reads its persistence settings (logging a
// warning naming the risk when they are weaker than appendonly yes +
// appendfsync always) and returns the sink. It fails with [ErrConfig] for
// an invalid cfg and [ErrUnavailable] when the server does not answer a
// PING. It may be called from any goroutine.
func Open(ctx context.Context, cfg Config) (*Sink, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, rdb: cfg.Client, log: cfg.Logger, next: map[epochs.Scope]cached{}}
	if s.rdb == nil {
		opt, err := goredis.ParseURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("%w: URL: %w", ErrConfig, err)
		}
		opt.MaxRetries = -1
		opt.DisableIdentity = true
		if opt.PoolSize == 0 {
			opt.PoolSize = 10 * runtime.GOMAXPROCS(0) // go-redis's default
		}
		opt.PoolSize += cfg.HeldWatches
		s.rdb, s.ownClient = goredis.NewClient(opt), true
	}
	held := cfg.HeldWatches
	if !s.ownClient {
		held = min(held, s.rdb.Options().PoolSize/2)
	}
	s.held = newHeldWatches(held)
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		_ = s.Close()
		return nil, s.wrap(ctx, "open", err)
	}
	s.persist = readPersistence(ctx, s.rdb)
	if risk := s.persist.Risk(); risk != "" {
		s.log.Warn("redis sink: the server's persistence is weaker than durable", "prefix", cfg.Prefix,
			"appendonly", s.persist.AppendOnly, "appendfsync", s.persist.AppendFsync, "risk", risk,
			"fix", "CONFIG SET appendonly yes; CONFIG SET appendfsync always (and persist it in redis.conf)")
	}
	return s, nil
}

func readPersistence(ctx context.Context, rdb *goredis.Client) Persistence {
	var p Persistence
	for _, k := range []string{"appendonly", "appendfsync"} {
		m, err := rdb.ConfigGet(ctx, k).Result()
		if err == nil && m[k] == "" {
			err = fmt.Errorf("CONFIG GET %s returned nothing", k)
		}
		if err != nil {
			return Persistence{Err: err}
		}
		if k == "appendonly" {
			p.AppendOnly = m[k]
		} else {
			p.AppendFsync = m[k]
		}
	}
	return p
}

// Persistence returns the persistence settings the server reported at
// Open. It may be called from any goroutine. It may be called from any goroutine.
func (s *Sink) Persistence() Persistence { return s.persist }

// Close closes the sink's client (not a Config.Client). It may be called
// from any goroutine, once the sink's calls have returned.
func (s *Sink) Close() error {
	if s.held != nil {
		s.held.close()
	}
	if s.ownClient {
		return s.rdb.Close()
	}
	return nil
}

// Client returns the sink's go-redis client, for reading what handlers
// wrote (outside any fence: never write through it from a handler). It
// may be called from any goroutine.
func (s *Sink) Client() *goredis.Client { return s.rdb }

// Prefix returns the sink's key prefix. It may be called from any
// goroutine.
func (s *Sink) Prefix() string { return s.cfg.Prefix }

// Key returns the Redis key of a handler's key k (what [Tx] methods
// address as k): <Prefix>:k:<k>. It may be called from any goroutine.
func (s *Sink) Key(k string) string { return s.cfg.Prefix + ":k:" + k }

// Ping checks that the server answers, implementing [sink.Health]. It may
// be called from any goroutine.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return s.wrap(ctx, "ping", err)
	}
	return nil
}

// IsPermanent reports false: no Redis reply is a permanent refusal of a
// record's values (a command the server refuses fails the batch as an
// effect error, ErrCommand) (sink.Health).
func (s *Sink) IsPermanent(error) bool { return false }

// IsSinkFailure reports whether err is a failure of the server or of the
// connection to it (it matches [ErrUnavailable] or [ErrNotReplicated], or
// is a network error, a lost connection, or a LOADING, READONLY,
// MASTERDOWN, BUSY, TRYAGAIN or OOM reply), implementing
// [sink.Health]. It may be called from any goroutine.
func (s *Sink) IsSinkFailure(err error) bool { return isUnavailable(err) }

func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotReplicated) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, goredis.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var re goredis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN", "OOM", "CLUSTERDOWN", "NOREPLICAS"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe")
}

// wrap returns err of operation op: ctx's error when ctx ended, else
// ErrUnavailable around a connection failure, else err.
func (s *Sink) wrap(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("redis: %s: %w (%v)", op, cerr, err)
	}
	if isUnavailable(err) {
		return fmt.Errorf("redis: %s: %w: %w", op, ErrUnavailable, err)
	}
	return fmt.Errorf("redis: %s: %w", op, err)
}

// runScript runs a writing script. With Config.WaitReplicas it sends WAIT
// in the same pipeline, so on the same connection: WAIT counts the
// replicas that have that connection's writes, and a pooled client would
// otherwise ask on another connection. The script goes by its SHA1
// (EVALSHA); only when the server does not have it cached (NOSCRIPT: a
// restart, a failover, SCRIPT FLUSH; nothing ran) is its body sent.
func (s *Sink) runScript(ctx context.Context, op string, sc *goredis.Script, keys []string, args ...any) ([]any, error) {
	if s.cfg.WaitReplicas <= 0 {
		r, err := sc.Run(ctx, s.rdb, keys, args...).Slice()
		if err != nil {
			return nil, s.wrap(ctx, op, err)
		}
		return r, nil
	}
	r, n, rerr, werr := s.runAndWait(ctx, sc, true, keys, args)
	if goredis.HasErrorPrefix(rerr, "NOSCRIPT") {
		r, n, rerr, werr = s.runAndWait(ctx, sc, false, keys, args)
	}
	if rerr != nil {
		return nil, s.wrap(ctx, op, rerr)
	}
	if werr != nil {
		return nil, s.wrap(ctx, op+": WAIT", werr)
	}
	if n < s.cfg.WaitReplicas {
		return nil, fmt.Errorf("redis: %s: %w: %d of %d replicas within %s", op, ErrNotReplicated, n, s.cfg.WaitReplicas, s.cfg.WaitTimeout)
	}
	return r, nil
}

// runAndWait sends sc (by SHA1 if bySHA, else its body) and WAIT in one
// pipeline and returns the script's reply, the replicas WAIT counted, the
// script's error and the pipeline's or WAIT's.
func (s *Sink) runAndWait(ctx context.Context, sc *goredis.Script, bySHA bool, keys []string, args []any) (r []any, n int, rerr, werr error) {
	var ev, wait *goredis.Cmd
	_, werr = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		if bySHA {
			ev = sc.EvalSha(ctx, p, keys, args...)
		} else {
			ev = sc.Eval(ctx, p, keys, args...)
		}
		wait = p.Do(ctx, "WAIT", s.cfg.WaitReplicas, s.cfg.WaitTimeout.Milliseconds())
		return nil
	})
	r, rerr = ev.Slice()
	if rerr != nil {
		return nil, 0, rerr, nil
	}
	if werr == nil {
		werr = wait.Err()
	}
	n, _ = wait.Int()
	return r, n, nil, werr
}

// Key names. A scope's keys carry its id: group and topic query-escaped
// (no ':' or '/' left in them) and the partition.

func scopeID(sc epochs.Scope) string {
	return url.QueryEscape(sc.Group) + "/" + url.QueryEscape(sc.Topic) + "/" + strconv.FormatInt(int64(sc.Partition), 10)
}

func (s *Sink) fenceKey(sc epochs.Scope) string { return s.cfg.Prefix + ":fence:" + scopeID(sc) }
func (s *Sink) histKey(sc epochs.Scope) string  { return s.cfg.Prefix + ":hist:" + scopeID(sc) }
func (s *Sink) idsKey(sc epochs.Scope) string   { return s.cfg.Prefix + ":ids:" + scopeID(sc) }
func (s *Sink) scopesKey() string               { return s.cfg.Prefix + ":scopes" }
func (s *Sink) histSeqKey() string              { return s.cfg.Prefix + ":hist-seq" }
func (s *Sink) dlSeqKey() string                { return s.cfg.Prefix + ":dl-seq" }
func (s *Sink) dlIndexKey() string              { return s.cfg.Prefix + ":dls" }
func (s *Sink) dlRowPrefix() string             { return s.cfg.Prefix + ":dl:" }
func (s *Sink) dlKey(id int64) string           { return s.dlRowPrefix() + strconv.FormatInt(id, 10) }
func (s *Sink) dlAuditKey(id int64) string      { return s.cfg.Prefix + ":dla:" + strconv.FormatInt(id, 10) }
func (s *Sink) dlAuditSeqKey() string           { return s.cfg.Prefix + ":dla-seq" }

// Drop deletes every key under the sink's prefix (SCAN MATCH <Prefix>:*
// and UNLINK), for tests and demos that used a fresh prefix. It may be
// called from any goroutine; nothing else may use the prefix meanwhile.
func (s *Sink) Drop(ctx context.Context) error {
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, s.cfg.Prefix+":*", 1000).Result()
		if err != nil {
			return s.wrap(ctx, "drop", err)
		}
		if len(keys) > 0 {
			if err := s.rdb.Unlink(ctx, keys...).Err(); err != nil {
				return s.wrap(ctx, "drop", err)
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// cacheCheckpoint remembers cp as the checkpoint tok's tenure left: after
// a claim (claimed) unless a newer tenure's claim is cached already, after
// an apply over tok's own entry or none (a racing newer claim wins; an
// apply after a failed one caches again what its script accepted).
func (s *Sink) cacheCheckpoint(tok epochs.Token, cp sink.Checkpoint, claimed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.next[tok.Scope()]
	if ok && c.tok != tok && (!claimed || !tok.CanClaim(c.tok)) {
		return
	}
	s.next[tok.Scope()] = cached{tok: tok, cp: cp.Clone()}
}

// forgetScope drops the cached NextOffset of scope (a reset cleared its
// holder).
func (s *Sink) forgetScope(sc epochs.Scope) {
	s.mu.Lock()
	delete(s.next, sc)
	s.mu.Unlock()
	s.held.drop(sc)
}

// cachedCheckpoint returns the checkpoint cached for tok, if any.
func (s *Sink) cachedCheckpoint(tok epochs.Token) (sink.Checkpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.next[tok.Scope()]; ok && c.tok == tok {
		return c.cp.Clone(), true
	}
	return sink.Checkpoint{}, false
}

// reply helpers: the scripts return arrays of strings and integers.

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func i64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}
