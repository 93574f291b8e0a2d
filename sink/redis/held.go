package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
)

// The held watch: a watchable apply (unit.watchable) of a scope that this
// Sink applies one batch at a time runs on a connection of the scope's
// own that keeps the fence watched between its batches, so that a batch
// costs one round trip instead of two.
//
// The watched path (applyWatched) sends WATCH and HMGET of the fence,
// checks what HMGET read, then sends MULTI … EXEC: two round trips. The
// held path sends, after the EXEC of each batch, WATCH and HMGET again in
// the same pipeline and keeps both the connection and what HMGET read
// (the view) for the scope's next batch, which then checks the view and
// sends MULTI … EXEC, WATCH, HMGET at once. The guarantee is the watched
// path's: EXEC runs only if no client wrote the fence since the WATCH
// (a claim, a reset, another Sink's or lane's apply), and the view is
// what the fence held just after that WATCH, so a check that passed on
// the view holds when EXEC writes. When the fence was written in
// between, EXEC writes nothing and replies nil (the batch is "moved"),
// and the WATCH and HMGET behind it arm the connection again with the
// fence as it is now: the retry checks that, at no extra round trip.
//
// It fails closed. The connection is a go-redis Conn, which never
// re-dials: after a network error every call on it fails, so a MULTI is
// never sent on a connection other than the one that sent the WATCH
// (a new connection starts unarmed and sends WATCH and HMGET first).
// Any error drops the held watch and closes its connection (an
// EphemeralConn, which Close discards rather than returning to the pool
// with a watch on it).
//
// Each held watch keeps one connection open while its scope is idle; at
// most Config.HeldWatches scopes hold one (default DefaultHeldWatches),
// and a scope that finds them all in use takes the watched path. A held
// watch idle for heldIdle is closed when another scope needs its place;
// a fenced apply closes its scope's at once.

// DefaultHeldWatches is [Config.HeldWatches] when it is zero.
const DefaultHeldWatches = 32

// heldIdle is how long a held watch must have been idle before another
// scope may take its place.
const heldIdle = 5 * time.Second

// heldWatch is one scope's held watch.
type heldWatch struct {
	conn *goredis.Conn
	// view is the fence's e, m, n, iv and sp as HMGET read them just
	// after the WATCH on conn; nil when conn has not sent them yet.
	view []any
	busy bool      // an apply is using it
	used time.Time // when the last apply put it back
	// stale: this Sink wrote the fence on another connection while an
	// apply was using the watch; put discards the view.
	stale bool
}

// heldWatches is a Sink's held watches.
type heldWatches struct {
	mu  sync.Mutex
	max int
	m   map[epochs.Scope]*heldWatch

	// outcomes counts the held applies by outcome (held*): a fixed map,
	// read concurrently.
	outcomes map[string]*atomic.Int64
}

// The outcomes of a held apply, the label of the held applies counter.
const (
	heldOK       = "ok"       // EXEC wrote the batch, or a replay wrote nothing
	heldMoved    = "moved"    // EXEC wrote nothing: the fence was written since the WATCH
	heldRefused  = "refused"  // the check on the view refused the batch (fenced or redo)
	heldArmed    = "armed"    // a new connection sent its first WATCH and HMGET
	heldDropped  = "dropped"  // an error closed the held watch
	heldEvicted  = "evicted"  // an idle held watch was closed for another scope
	heldNoPlaces = "no_place" // every place was busy or recently used: the watched path ran
)

func newHeldWatches(max int) *heldWatches {
	h := &heldWatches{max: max, m: map[epochs.Scope]*heldWatch{}, outcomes: map[string]*atomic.Int64{}}
	for _, o := range []string{heldOK, heldMoved, heldRefused, heldArmed, heldDropped, heldEvicted, heldNoPlaces} {
		h.outcomes[o] = new(atomic.Int64)
	}
	return h
}

// count counts a held apply's outcome o.
func (h *heldWatches) count(o string) { h.outcomes[o].Add(1) }

// take returns sc's held watch, marked busy, opening one if there is a
// place (evicting one idle for heldIdle if need be); nil when the scope's
// is busy (another apply of the scope) or there is no place.
func (h *heldWatches) take(rdb *goredis.Client, sc epochs.Scope) *heldWatch {
	if h.max == 0 {
		return nil // disabled (Config.HeldWatches negative)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.m[sc]; w != nil {
		if w.busy {
			return nil
		}
		w.busy = true
		return w
	}
	if len(h.m) >= h.max {
		var oldest epochs.Scope
		var ow *heldWatch
		for s, w := range h.m {
			if !w.busy && (ow == nil || w.used.Before(ow.used)) {
				oldest, ow = s, w
			}
		}
		if ow == nil || time.Since(ow.used) < heldIdle {
			h.count(heldNoPlaces)
			return nil
		}
		delete(h.m, oldest)
		_ = ow.conn.Close()
		h.count(heldEvicted)
	}
	w := &heldWatch{conn: rdb.EphemeralConn(), busy: true}
	h.m[sc] = w
	return w
}

// put gives w back; keep false closes it (an error: its connection's
// state is unknown).
func (h *heldWatches) put(sc epochs.Scope, w *heldWatch, keep bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.busy, w.used = false, time.Now()
	if w.stale {
		w.view, w.stale = nil, false
	}
	if keep {
		return
	}
	if h.m[sc] == w {
		delete(h.m, sc)
	}
	_ = w.conn.Close()
	h.count(heldDropped)
}

// written discards sc's view after this Sink wrote the fence on another
// connection (a claim, a dead letter, a reset, an apply that did not
// take the held watch). The watch would make the next EXEC write
// nothing and the batch's effects run again; a view read anew (WATCH and
// HMGET first) avoids that, at one round trip.
func (h *heldWatches) written(sc epochs.Scope) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.m[sc]; w != nil {
		if w.busy {
			w.stale = true
		} else {
			w.view = nil
		}
	}
}

// drop closes sc's held watch unless an apply is using it (that apply
// puts it back; a watch is never unsafe to keep, only a connection).
func (h *heldWatches) drop(sc epochs.Scope) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.m[sc]; w != nil && !w.busy {
		delete(h.m, sc)
		_ = w.conn.Close()
	}
}

// close closes every held watch.
func (h *heldWatches) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sc, w := range h.m {
		delete(h.m, sc)
		_ = w.conn.Close()
	}
}

// HeldStats are a Sink's counts of its held watches (docs: the package
// documentation, "The held watch"): package sink/redis/redisprom exports
// them as Prometheus series.
type HeldStats struct {
	// Applies counts the applies on a held watch by outcome: "ok", "moved"
	// (the fence was written since the WATCH; re-armed), "refused" (fenced
	// or a stale checkpoint), "armed" (a new connection's first WATCH),
	// "dropped" (an error closed it), "evicted" (idle, closed for another
	// scope), "no_place" (every held watch in use: the two-round-trip
	// watched path ran). An outcome is present once it happened.
	Applies map[string]int64
	// Watches is how many scopes hold a watch now (at most
	// Config.HeldWatches).
	Watches int
}

// HeldStats returns the Sink's counts of its held watches.
func (s *Sink) HeldStats() HeldStats {
	st := HeldStats{Applies: map[string]int64{}, Watches: s.held.len()}
	for o, n := range s.held.outcomes {
		if v := n.Load(); v > 0 {
			st.Applies[o] = v
		}
	}
	return st
}

// len returns how many scopes hold a watch.
func (h *heldWatches) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// applyHeld runs a watchable unit on w, sc's held watch (see the top of
// this file), replying as applyWatched does. On an error the caller puts
// w back with keep false.
func (s *Sink) applyHeld(ctx context.Context, sc epochs.Scope, u *unit, w *heldWatch) ([]any, error) {
	fk := s.fenceKey(sc)
	// arm reads a new view. UNWATCH first: a WATCH of a key the
	// connection watches already does not forget that the key was
	// written since the first one (the server flags the connection, and
	// its next EXEC writes nothing).
	arm := func() error {
		var f *goredis.SliceCmd
		if _, err := w.conn.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.Do(ctx, "unwatch")
			p.Do(ctx, "watch", fk)
			f = watchedFields(ctx, p, fk)
			return nil
		}); err != nil {
			return err
		}
		w.view = f.Val()
		s.held.count(heldArmed)
		return nil
	}
	fresh := w.view == nil
	if fresh {
		if err := arm(); err != nil {
			return nil, err
		}
	}
	r, iv, err := u.check(w.view)
	if err != nil {
		return nil, err
	}
	// A view may be older than the fence: a claim or apply since its
	// WATCH (this Sink's own claim of a new tenure, say) makes the next
	// EXEC write nothing, but the view itself still shows the fence
	// before it. So it may let a batch through to EXEC, never decide
	// without one: a refusal, or a replay (which sends no EXEC), is
	// decided on a view read now.
	if !fresh && (r != nil || u.newNext == "") {
		if err := arm(); err != nil {
			return nil, err
		}
		if r, iv, err = u.check(w.view); err != nil {
			return nil, err
		}
	}
	if r != nil {
		s.held.count(heldRefused)
		return r, nil
	}
	if u.newNext == "" {
		s.held.count(heldOK)
		return []any{"ok", strconv.FormatInt(u.expectNext, 10)}, nil
	}
	if s.hookBeforeExec != nil {
		s.hookBeforeExec(ctx)
	}
	// The view is spent whatever happens: a failed pipeline drops w, and
	// a complete one leaves the view its HMGET read.
	w.view = nil
	var exec *goredis.Cmd
	var f *goredis.SliceCmd
	cmds, err := w.conn.Pipelined(ctx, func(p goredis.Pipeliner) error {
		p.Do(ctx, "multi")
		u.queue(ctx, p, fk, s.idsKey(sc), iv)
		exec = p.Do(ctx, "exec")
		p.Do(ctx, "watch", fk)
		f = watchedFields(ctx, p, fk)
		return nil
	})
	if err != nil && !isRedisErr(err) {
		return nil, err // the connection failed: EXEC may have run
	}
	// Every reply was read. A command refused while being queued makes
	// EXEC abort the transaction (EXECABORT), writing nothing.
	for _, c := range cmds {
		if c == exec {
			break
		}
		if cerr := c.Err(); cerr != nil {
			return nil, fmt.Errorf("queueing %v: %w", c.Args(), cerr)
		}
	}
	if ferr := f.Err(); ferr != nil {
		return nil, fmt.Errorf("HMGET after EXEC: %w", ferr)
	}
	switch eerr := exec.Err(); {
	case errors.Is(eerr, goredis.Nil):
		w.view = f.Val()
		s.held.count(heldMoved)
		return []any{"moved"}, nil
	case eerr != nil:
		return nil, fmt.Errorf("EXEC: %w", eerr)
	}
	// EXEC ran every command; SET, DEL, ZADD, ZREMRANGEBYSCORE, HSET and
	// HINCRBY on the keys this sink owns do not fail at run time, but an
	// error inside EXEC's reply would mean part of the batch landed.
	if res, ok := exec.Val().([]any); ok {
		for _, v := range res {
			if e, isErr := v.(error); isErr {
				return nil, fmt.Errorf("EXEC ran a command that failed: %w", e)
			}
		}
	}
	w.view = f.Val()
	s.held.count(heldOK)
	return []any{"ok", u.newNext}, nil
}

// isRedisErr reports whether err is a reply of the server (the pipeline
// read every reply) rather than a failure of the connection.
func isRedisErr(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}
