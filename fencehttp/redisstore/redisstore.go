// Package redisstore is the fencehttp.Store on a Redis server
// (github.com/redis/go-redis/v9), for a service whose resource is that
// server: the check of the token, the handler's writes and the idempotency
// key's result are one Lua script, so a request either lands whole or not
// at all.
//
// # Units and Tx
//
// [Store.Begin] is one script: fencehttp.ScopeState.Admits against the
// scope's stored token and floor (refused: a *fencehttp.FencedError,
// nothing changed), the
// token's advance, and then either the key's recorded result (a
// duplicate) or a lease on the scope and a claim on the key, both for
// [Config.Lease]. While another unit holds the scope's lease or the key's
// claim, Begin waits, asking again every [Config.Poll] (doubling to 50
// ms) until ctx ends; every ask runs the check again, so a waiter whose
// token was overtaken meanwhile is refused.
//
// The handler reaches the unit's *[Tx] with [TxFrom]. It has no method
// that writes to the server: Set, Del, IncrBy, HSet, HDel, HIncrBy, SAdd,
// SRem and RPush are buffered, and the unit's Commit is one script that
// checks that the scope's stored token is still the request's
// (epochs.Token.Holds) and that no reset ran since Begin, that the key is not recorded nor claimed by
// another unit, that every committed value the handler read with
// [Tx.Get] or [Tx.HGet] is unchanged, and that every buffered command
// will succeed (a script is atomic but not transactional: a WRONGTYPE half
// way would leave the earlier commands applied), then runs the commands,
// records the result and releases the lease and the claim. Abort sends
// nothing but the release: the buffered writes are dropped, the key is
// free, the token stays.
//
// The lease makes requests of one scope run one at a time, as the Store
// contract asks, but safety does not rest on it: a handler paused past
// its lease lets the next request of its scope in, and if that request
// stored a newer token, the paused unit's Commit is refused with a
// *fencehttp.FencedError (the Guard answers 409) and none of its writes
// land. A commit whose key another unit recorded or claimed meanwhile
// fails with [ErrLeaseLost]; one whose reads changed with [ErrConflict];
// one with a command that would fail with [ErrCommand]: all of them
// write nothing, release the key, and the Guard answers 503, which the
// client retries with the same key.
//
// A request costs two scripts (Begin and Commit) on top of the Guard:
// BenchmarkGuard (one request after another over loopback HTTP, one
// HINCRBY each, 2000 requests, five runs on a 2-core machine shared with
// other processes, load average 0.8) measured 3,912–5,472 requests/s
// (median 4,675) against 27,412–37,869 (median 36,139) for memstore.
//
// # Resets
//
// [Store.ResetScope] (fencehttp.ScopeResetter) is one script: the
// compare-and-set of the scope's token and floor, the new ones, the reset
// version moved and the audit entry. It does not wait for the units open
// on the scope; their commits are refused instead (the version moved).
//
// # What it cannot promise
//
// Only writes through the Tx are inside the script. A handler that also
// calls something else (another service, another database) is, for that
// call, in front of a store that is not the resource's database
// (docs/fenced-resources.md): a paused request can land that call after
// a newer token was stored. A Commit whose reply is lost (the server
// applied it) is answered 503; the retry is answered with the recorded
// result. A Commit that never reached the server leaves the lease and the
// claim until they expire: requests of the scope and the key wait up to
// [Config.Lease] (the default 30 s). Redis's own durability is the sink's
// (package sink/redis, "What Redis can lose"): run appendonly yes with
// appendfsync always, or a crash can move a scope's token backwards and
// forget recorded results.
//
// # Keys
//
// Under [Config.Prefix] (default "fencehttp"): <prefix>:tok:<scope> (a
// hash: the stored epoch and member, the scope's group, topic and
// partition, and, once reset, the floor and the reset version),
// <prefix>:resets:<scope> (a list, one JSON entry per reset, kept
// forever), <prefix>:lease:<scope>, <prefix>:claim:<group>:<key> and
// <prefix>:res:<group>:<key> (a hash: status, header as JSON, body),
// kept like sqlstore's results (forever), and <prefix>:k:<key> for the
// handlers' keys ([Store.Key]). <scope> is the group and the topic
// query-escaped and the partition, <group> is query-escaped. One server
// or one primary: Redis Cluster is not supported (the scripts touch keys
// of several slots and take the handlers' keys as arguments).
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
)

// Errors of a Store; each is matched with errors.Is.
var (
	// ErrConfig is matched by the error of [New] for an invalid Config.
	ErrConfig = errors.New("redisstore: invalid config")
	// ErrLeaseLost: the unit's key was recorded or claimed by another
	// unit after the unit's claim expired. Nothing was written.
	ErrLeaseLost = errors.New("redisstore: the unit's claim on its key was lost")
	// ErrConflict: a value the handler read changed before the commit.
	// Nothing was written.
	ErrConflict = errors.New("redisstore: a value the handler read changed")
	// ErrCommand: a buffered command would fail (a key of another type,
	// an increment of something that is not an integer, a result outside
	// ±2^53). Nothing was written.
	ErrCommand = errors.New("redisstore: a buffered command would fail")
	// ErrReadAfterWrite is returned by a Tx read of a key the Tx has
	// already written: a Tx reads the committed state only.
	ErrReadAfterWrite = errors.New("redisstore: read of a key the Tx has written")
	// ErrUnexpectedReply: a script answered something this package does
	// not know (another version of it under the same prefix).
	ErrUnexpectedReply = errors.New("redisstore: unexpected script reply")
)

// Config configures a Store.
type Config struct {
	// Client is the server, owned by the caller (the Store does not
	// close it). Required. Give it MaxRetries -1: a script retried after
	// a lost reply is answered as a failure (safe, but a 503).
	Client *goredis.Client
	// Prefix starts every key of the Store. Default "fencehttp".
	Prefix string
	// Lease bounds how long a unit holds its scope and its key without
	// ending (a crashed server's unit). Default 30 s.
	Lease time.Duration
	// Poll is the first wait of a Begin that finds the scope or the key
	// held by another unit; it doubles up to 50 ms. Default 2 ms.
	Poll time.Duration
	// Logger receives a Debug line when a Begin waits; nil logs nothing.
	Logger *slog.Logger
}

// Store is a fencehttp.Store on a Redis server. Its methods may be called
// from any goroutine.
type Store struct {
	rdb    *goredis.Client
	prefix string
	lease  time.Duration
	poll   time.Duration
	log    *slog.Logger
}

// New returns a Store on cfg.Client. It fails with [ErrConfig] without a
// client or with a negative Lease or Poll. It may be called from any
// goroutine.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Client is required", ErrConfig)
	}
	if cfg.Lease < 0 || cfg.Poll < 0 {
		return nil, fmt.Errorf("%w: Lease and Poll must not be negative", ErrConfig)
	}
	s := &Store{rdb: cfg.Client, prefix: cfg.Prefix, lease: cfg.Lease, poll: cfg.Poll, log: cfg.Logger}
	if s.prefix == "" {
		s.prefix = "fencehttp"
	}
	if s.lease == 0 {
		s.lease = 30 * time.Second
	}
	if s.lease < time.Millisecond {
		return nil, fmt.Errorf("%w: Lease %v is under a millisecond", ErrConfig, cfg.Lease)
	}
	if s.poll == 0 {
		s.poll = 2 * time.Millisecond
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Key returns the server key of the handlers' key k: <prefix>:k:<k>. It
// may be called from any goroutine.
func (s *Store) Key(k string) string { return s.prefix + ":k:" + k }

// Prefix returns the Store's key prefix. It may be called from any
// goroutine.
func (s *Store) Prefix() string { return s.prefix }

// Token returns the token stored for scope (zero if none). It may be
// called from any goroutine.
func (s *Store) Token(ctx context.Context, scope epochs.Scope) (epochs.Token, error) {
	f, err := s.rdb.HMGet(ctx, s.scopeKey("tok", scope), "e", "m").Result()
	if err != nil {
		return epochs.Token{}, fmt.Errorf("redisstore: reading the token of %s: %w", scope, err)
	}
	m, _ := f[1].(string)
	if m == "" {
		return epochs.Token{}, nil
	}
	e, _ := f[0].(string)
	return token(scope, e, m)
}

// Drop deletes every key under the Store's prefix (SCAN and UNLINK), for
// tests and decommissioning. It may be called from any goroutine.
func (s *Store) Drop(ctx context.Context) error {
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, s.prefix+":*", 1000).Result()
		if err != nil {
			return fmt.Errorf("redisstore: drop: %w", err)
		}
		if len(keys) > 0 {
			if err := s.rdb.Unlink(ctx, keys...).Err(); err != nil {
				return fmt.Errorf("redisstore: drop: %w", err)
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

func (s *Store) scopeKey(kind string, sc epochs.Scope) string {
	return s.prefix + ":" + kind + ":" + url.QueryEscape(sc.Group) + "/" + url.QueryEscape(sc.Topic) + "/" + strconv.FormatInt(int64(sc.Partition), 10)
}

func (s *Store) keys(tok epochs.Token, key string) []string {
	g := url.QueryEscape(tok.Group)
	return []string{s.scopeKey("tok", tok.Scope()), s.scopeKey("lease", tok.Scope()),
		s.prefix + ":claim:" + g + ":" + key, s.prefix + ":res:" + g + ":" + key}
}

func token(sc epochs.Scope, epoch, member string) (epochs.Token, error) {
	e, err := strconv.ParseInt(epoch, 10, 32)
	if err != nil {
		return epochs.Token{}, fmt.Errorf("%w: stored epoch %q of %s", ErrUnexpectedReply, epoch, sc)
	}
	return epochs.Token{Group: sc.Group, Topic: sc.Topic, Partition: sc.Partition, Epoch: int32(e), Member: member}, nil
}

// state returns the ScopeState of a script's reply: the stored epoch and
// member ("" for none) and the floor.
func state(sc epochs.Scope, epoch, member, floor string) (fencehttp.ScopeState, error) {
	st := fencehttp.ScopeState{Scope: sc, Floor: fencehttp.NoFloor}
	if floor != "" {
		f, err := strconv.ParseInt(floor, 10, 32)
		if err != nil {
			return fencehttp.ScopeState{}, fmt.Errorf("%w: stored floor %q of %s", ErrUnexpectedReply, floor, sc)
		}
		st.Floor = int32(f)
	}
	if member == "" {
		return st, nil
	}
	var err error
	st.Token, err = token(sc, epoch, member)
	return st, err
}

// State implements fencehttp.ScopeResetter. It may be called from any
// goroutine.
func (s *Store) State(ctx context.Context, scope epochs.Scope) (fencehttp.ScopeState, error) {
	f, err := s.rdb.HMGet(ctx, s.scopeKey("tok", scope), "e", "m", "f").Result()
	if err != nil {
		return fencehttp.ScopeState{}, fmt.Errorf("redisstore: reading the state of %s: %w", scope, err)
	}
	e, _ := f[0].(string)
	m, _ := f[1].(string)
	fl, _ := f[2].(string)
	return state(scope, e, m, fl)
}

// resetJSON is an audit entry of the resets list.
type resetJSON struct {
	BeforeEpoch  int32     `json:"before_epoch"`
	BeforeMember string    `json:"before_member"`
	BeforeFloor  int32     `json:"before_floor"`
	AfterEpoch   int32     `json:"after_epoch"`
	AfterMember  string    `json:"after_member"`
	AfterFloor   int32     `json:"after_floor"`
	Reason       string    `json:"reason"`
	Detail       string    `json:"detail"`
	At           time.Time `json:"at"`
}

// ResetScope implements fencehttp.ScopeResetter: one script compares the
// scope's token and floor with req.Expect, stores the new ones and moves
// the scope's reset version, so that a unit open across the reset is
// refused at its commit (a *fencehttp.FencedError) and writes nothing,
// and appends the audit entry to <prefix>:resets:<scope>. It may be
// called from any goroutine.
func (s *Store) ResetScope(ctx context.Context, req fencehttp.ResetRequest) (fencehttp.ScopeState, error) {
	if err := req.Validate(); err != nil {
		return fencehttp.ScopeState{}, err
	}
	sc, exp := req.Scope, req.Expect
	after := exp.AfterReset(req)
	entry, err := json.Marshal(resetJSON{BeforeEpoch: exp.Token.Epoch, BeforeMember: exp.Token.Member, BeforeFloor: exp.Floor,
		AfterEpoch: after.Token.Epoch, AfterMember: after.Token.Member, AfterFloor: after.Floor,
		Reason: req.Reason, Detail: req.Detail, At: time.Now().UTC()})
	if err != nil {
		return fencehttp.ScopeState{}, fmt.Errorf("redisstore: encoding the audit of the reset of %s: %w", sc, err)
	}
	reply, err := resetScript.Run(ctx, s.rdb, []string{s.scopeKey("tok", sc), s.scopeKey("resets", sc)},
		exp.Token.Epoch, exp.Token.Member, exp.Floor, after.Token.Epoch, after.Token.Member, after.Floor,
		sc.Group, sc.Topic, sc.Partition, entry).StringSlice()
	if err != nil {
		return fencehttp.ScopeState{}, fmt.Errorf("redisstore: resetting %s: %w", sc, err)
	}
	switch {
	case len(reply) == 2 && reply[0] == "ok":
		return exp, nil
	case len(reply) == 4 && reply[0] == "conflict":
		now, err := state(sc, reply[1], reply[2], reply[3])
		if err != nil {
			return fencehttp.ScopeState{}, err
		}
		return now, fmt.Errorf("%w: %s is now %s, not %s", fencehttp.ErrResetConflict, sc, now, exp)
	}
	return fencehttp.ScopeState{}, fmt.Errorf("%w: reset answered %q", ErrUnexpectedReply, reply)
}

// Resets implements fencehttp.ScopeResetter: the entries of
// <prefix>:resets:<scope>, whose Seq is the position in the list, from 1.
// It may be called from any goroutine.
func (s *Store) Resets(ctx context.Context, scope epochs.Scope) ([]fencehttp.ResetEntry, error) {
	raw, err := s.rdb.LRange(ctx, s.scopeKey("resets", scope), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: reading the resets of %s: %w", scope, err)
	}
	tok := func(epoch int32, member string) epochs.Token {
		if member == "" {
			return epochs.Token{}
		}
		return epochs.Token{Group: scope.Group, Topic: scope.Topic, Partition: scope.Partition, Epoch: epoch, Member: member}
	}
	out := make([]fencehttp.ResetEntry, 0, len(raw))
	for i, r := range raw {
		var j resetJSON
		if err := json.Unmarshal([]byte(r), &j); err != nil {
			return nil, fmt.Errorf("%w: reset %d of %s: %w", ErrUnexpectedReply, i+1, scope, err)
		}
		out = append(out, fencehttp.ResetEntry{Seq: int64(i + 1),
			Before: fencehttp.ScopeState{Scope: scope, Token: tok(j.BeforeEpoch, j.BeforeMember), Floor: j.BeforeFloor},
			After:  fencehttp.ScopeState{Scope: scope, Token: tok(j.AfterEpoch, j.AfterMember), Floor: j.AfterFloor},
			Reason: j.Reason, Detail: j.Detail, At: j.At})
	}
	return out, nil
}

const maxPoll = 50 * time.Millisecond

// Begin implements fencehttp.Store. It waits while another unit holds
// the scope or the key, until ctx ends.
func (s *Store) Begin(ctx context.Context, tok epochs.Token, key string) (fencehttp.Unit, *fencehttp.Result, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	keys := s.keys(tok, key)
	wait := s.poll
	for {
		reply, err := beginScript.Run(ctx, s.rdb, keys, tok.Epoch, tok.Member, id, s.lease.Milliseconds(),
			tok.Group, tok.Topic, tok.Partition).StringSlice()
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: begin for %s: %w", tok.Scope(), err)
		}
		switch {
		case len(reply) == 4 && reply[0] == "fenced":
			st, err := state(tok.Scope(), reply[1], reply[2], reply[3])
			if err != nil {
				return nil, nil, err
			}
			return nil, nil, st.Refusal(tok)
		case len(reply) == 4 && reply[0] == "recorded":
			r, err := result(reply[1], reply[2], reply[3])
			if err != nil {
				return nil, nil, fmt.Errorf("redisstore: the recorded result of key %q: %w", key, err)
			}
			return nil, r, nil
		case len(reply) == 2 && reply[0] == "ok":
			return &unit{s: s, tok: tok, key: key, id: id, version: reply[1], keys: keys, tx: &Tx{s: s}}, nil, nil
		case len(reply) == 2 && reply[0] == "busy":
			s.log.DebugContext(ctx, "redisstore: waiting for another unit", "held", reply[1], "scope", tok.Scope().String(), "key", key, "wait", wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, nil, fmt.Errorf("redisstore: waiting for the %s of %s held by another unit: %w", reply[1], tok.Scope(), ctx.Err())
			case <-t.C:
			}
			wait = min(2*wait, maxPoll)
		default:
			return nil, nil, fmt.Errorf("%w: begin answered %q", ErrUnexpectedReply, reply)
		}
	}
}

func result(status, header, body string) (*fencehttp.Result, error) {
	st, err := strconv.Atoi(status)
	if err != nil {
		return nil, fmt.Errorf("%w: status %q", ErrUnexpectedReply, status)
	}
	r := &fencehttp.Result{Status: st, Body: []byte(body)}
	if err := json.Unmarshal([]byte(header), &r.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrUnexpectedReply, err)
	}
	return r, nil
}

type unit struct {
	s       *Store
	tok     epochs.Token
	key     string
	id      string
	version string // the scope's reset version at Begin
	keys    []string
	tx      *Tx
}

type txKey struct{}

// TxFrom returns the Tx of the fenced request whose context ctx is (in a
// handler behind a fencehttp.Guard over a Store), or nil outside one.
func TxFrom(ctx context.Context) *Tx {
	tx, _ := ctx.Value(txKey{}).(*Tx)
	return tx
}

func (u *unit) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, u.tx)
}

func (u *unit) Commit(ctx context.Context, res fencehttp.Result) error {
	u.tx.done = true
	hdr := []byte("{}")
	if res.Header != nil {
		var err error
		if hdr, err = json.Marshal(res.Header); err != nil {
			_ = u.Abort(ctx)
			return fmt.Errorf("redisstore: encoding the result's header: %w", err)
		}
	}
	args := make([]any, 0, 9+len(u.tx.reads)+len(u.tx.cmds))
	args = append(args, u.tok.Epoch, u.tok.Member, u.id, res.Status, string(hdr), res.Body, len(u.tx.reads)/5, len(u.tx.cmds)/4, u.version)
	args = append(args, u.tx.reads...)
	args = append(args, u.tx.cmds...)
	reply, err := commitScript.Run(ctx, u.s.rdb, u.keys, args...).Slice()
	if err != nil {
		return fmt.Errorf("redisstore: commit of key %q: %w", u.key, err)
	}
	str := func(i int) string {
		if i >= len(reply) {
			return ""
		}
		switch v := reply[i].(type) {
		case string:
			return v
		case int64:
			return strconv.FormatInt(v, 10)
		}
		return fmt.Sprint(reply[i])
	}
	switch str(0) {
	case "ok":
		return nil
	case "fenced":
		// The stored token moved, or an operator reset the scope, since
		// Begin.
		st, err := state(u.tok.Scope(), str(1), str(2), str(3))
		if err != nil {
			return err
		}
		fe := st.Refusal(u.tok)
		if st.Token.IsZero() {
			fe.Stored = epochs.Token{Group: u.tok.Group, Topic: u.tok.Topic, Partition: u.tok.Partition}
		}
		return fe
	case "recorded", "claimed":
		return fmt.Errorf("%w: key %q was %s by another unit after this one's lease of %v", ErrLeaseLost, u.key, str(0), u.s.lease)
	case "reads":
		return fmt.Errorf("%w: read %s of key %q's handler", ErrConflict, str(1), u.key)
	case "invalid":
		return fmt.Errorf("%w: command %s of key %q's handler: %s", ErrCommand, str(1), u.key, str(2))
	}
	return fmt.Errorf("%w: commit answered %v", ErrUnexpectedReply, reply)
}

func (u *unit) Abort(ctx context.Context) error {
	u.tx.done = true
	if err := abortScript.Run(ctx, u.s.rdb, u.keys, u.id).Err(); err != nil {
		return fmt.Errorf("redisstore: abort of key %q: %w", u.key, err)
	}
	return nil
}

// Tx is a handler's handle on its request's unit: its writes are
// buffered and run by the unit's Commit script, after the token's check,
// or not at all; its reads see the committed state, and the Commit
// script checks that they still do. It is used by the request's goroutine
// only, during the request: a write after the unit ended panics.
type Tx struct {
	s       *Store
	cmds    []any // op, key, a1, a2
	reads   []any // kind, key, field, present, value
	written map[string]bool
	done    bool
}

func (tx *Tx) add(op, k, a1, a2 string) {
	if tx.done {
		panic("redisstore: Tx used after its unit ended")
	}
	if tx.written == nil {
		tx.written = map[string]bool{}
	}
	tx.written[k] = true
	tx.cmds = append(tx.cmds, op, tx.s.Key(k), a1, a2)
}

func (tx *Tx) read(ctx context.Context, kind, k, f string) (string, bool, error) {
	if tx.done {
		panic("redisstore: Tx used after its unit ended")
	}
	if tx.written[k] {
		return "", false, fmt.Errorf("%w: %q", ErrReadAfterWrite, k)
	}
	var v string
	var err error
	if kind == "g" {
		v, err = tx.s.rdb.Get(ctx, tx.s.Key(k)).Result()
	} else {
		v, err = tx.s.rdb.HGet(ctx, tx.s.Key(k), f).Result()
	}
	exists := true
	if errors.Is(err, goredis.Nil) {
		v, exists, err = "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("redisstore: read of %q: %w", k, err)
	}
	present := "0"
	if exists {
		present = "1"
	}
	tx.reads = append(tx.reads, kind, tx.s.Key(k), f, present, v)
	return v, exists, nil
}

// Get returns the committed value of string key k and whether it exists;
// the Commit script checks that it is unchanged ([ErrConflict]). It fails
// with [ErrReadAfterWrite] if the Tx has written k.
func (tx *Tx) Get(ctx context.Context, k string) (string, bool, error) {
	return tx.read(ctx, "g", k, "")
}

// HGet returns the committed field f of hash key k, as [Tx.Get] does.
func (tx *Tx) HGet(ctx context.Context, k, f string) (string, bool, error) {
	return tx.read(ctx, "h", k, f)
}

// Set buffers SET k v.
func (tx *Tx) Set(k, v string) { tx.add("set", k, v, "") }

// Del buffers DEL k.
func (tx *Tx) Del(k string) { tx.add("del", k, "", "") }

// IncrBy buffers INCRBY k n; the Commit script refuses the unit
// ([ErrCommand]) if k holds something other than an integer or the result
// leaves ±2^53.
func (tx *Tx) IncrBy(k string, n int64) { tx.add("incrby", k, strconv.FormatInt(n, 10), "") }

// HSet buffers HSET k f v.
func (tx *Tx) HSet(k, f, v string) { tx.add("hset", k, f, v) }

// HDel buffers HDEL k f.
func (tx *Tx) HDel(k, f string) { tx.add("hdel", k, f, "") }

// HIncrBy buffers HINCRBY k f n, checked as [Tx.IncrBy] is.
func (tx *Tx) HIncrBy(k, f string, n int64) { tx.add("hincrby", k, f, strconv.FormatInt(n, 10)) }

// SAdd buffers SADD k m.
func (tx *Tx) SAdd(k, m string) { tx.add("sadd", k, m, "") }

// SRem buffers SREM k m.
func (tx *Tx) SRem(k, m string) { tx.add("srem", k, m, "") }

// RPush buffers RPUSH k v.
func (tx *Tx) RPush(k, v string) { tx.add("rpush", k, v, "") }

var (
	_ fencehttp.Store         = (*Store)(nil)
	_ fencehttp.ScopeResetter = (*Store)(nil)
)
