package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
)

// unit is one attempt of an Apply as the server sees it: the view it was
// decided on, what it changes, and the buffered commands. Either the
// apply script runs it (scriptArgs) or, when none of its commands can
// fail and it read nothing, WATCH/MULTI/EXEC does (applyWatched); both
// reply in the script's shape.
type unit struct {
	epoch       int32
	member      string
	expectNext  int64
	expectSpans string
	newNext     string // "" for a replay: nothing to write
	newSpans    string
	expectIV    string // "" for Apply (no command IDs)
	horizon     string // "" when no prune is due
	dups        int
	rowMember   string // "" for no ID row
	rowLast     string
	cmds        []command
	reads       []readCheck
}

// watchable reports whether u may run as WATCH/MULTI/EXEC: it read no
// committed value (the script would check them) and its commands are SET
// and DEL only, which cannot fail at run time, so that EXEC applies all of
// them or, refused whole (over maxmemory, a queued command rejected),
// none: the script's validation has nothing to refuse.
func (u *unit) watchable() bool {
	return len(u.reads) == 0 && onlySetDel(u.cmds)
}

// scriptArgs returns applyScript's ARGV for u and, for each of the
// script's commands, the index in u.cmds of its first buffered command
// (a run of SETs is one MSET).
func (u *unit) scriptArgs() (args []any, groupFirst []int) {
	validate := "1" // SET and DEL cannot fail: a batch of only those skips the validation
	if onlySetDel(u.cmds) {
		validate = "0"
	}
	args = make([]any, 0, 16+5*len(u.reads)+3*len(u.cmds))
	args = append(args, u.epoch, u.member, u.expectNext, u.newNext, u.expectIV, u.horizon, u.dups, u.rowMember, u.rowLast,
		validate, len(u.reads), 0, u.expectSpans, u.newSpans)
	const ncIndex = 11
	nc := 0
	for j := 0; j < len(u.cmds); {
		c := u.cmds[j]
		nc++
		groupFirst = append(groupFirst, j)
		if c.op != "set" {
			args = append(args, c.op, c.key, c.a1)
			if c.op == "hset" || c.op == "hincrby" {
				args = append(args, c.a2)
			}
			j++
			continue
		}
		// A run of SETs (at most 500: Lua's unpack) is one MSET.
		k := j
		for k < len(u.cmds) && k-j < 500 && u.cmds[k].op == "set" {
			k++
		}
		args = append(args, "mset", k-j)
		for _, c := range u.cmds[j:k] {
			args = append(args, c.key, c.a1)
		}
		j = k
	}
	args[ncIndex] = nc
	for _, r := range u.reads {
		args = append(args, r.kind, r.key, r.field, r.present, r.value)
	}
	return args, groupFirst
}

// onlySetDel reports whether cmds are SET and DEL only.
func onlySetDel(cmds []command) bool {
	for _, c := range cmds {
		if c.op != "set" && c.op != "del" {
			return false
		}
	}
	return true
}

// check is the apply script's view check on the fence fields e, m, n, iv,
// sp as HMGET returned them: nil when u may write, else the script's
// reply (fenced, redo). iv is the stored IDs version.
func (u *unit) check(f []any) (reply []any, iv int64, err error) {
	hm := str(f[1])
	if hm == "" {
		return []any{"fenced", int64(0), int64(0), ""}, 0, nil
	}
	he, err := strconv.ParseInt(str(f[0]), 10, 32)
	if err != nil || int32(he) != u.epoch || hm != u.member {
		return []any{"fenced", int64(1), he, hm}, 0, nil
	}
	next, err := strconv.ParseInt(str(f[2]), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("the fence's NextOffset %q: %w", str(f[2]), err)
	}
	sp := str(f[4])
	if next != u.expectNext || sp != u.expectSpans {
		return []any{"redo", strconv.FormatInt(next, 10), "", sp}, 0, nil
	}
	if s := str(f[3]); s != "" {
		if iv, err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, 0, fmt.Errorf("the fence's IDs version %q: %w", s, err)
		}
	}
	if u.expectIV != "" && strconv.FormatInt(iv, 10) != u.expectIV {
		return []any{"redo", strconv.FormatInt(next, 10), strconv.FormatInt(iv, 10), sp}, 0, nil
	}
	return nil, iv, nil
}

// watchedFields queues, on p, the HMGET of the fence fields that a
// watched or held apply checks (unit.check): holder epoch and member,
// NextOffset, IDs version and spans. The watched and the held paths read
// the same fields through it.
func watchedFields(ctx context.Context, p goredis.Pipeliner, fk string) *goredis.SliceCmd {
	return p.HMGet(ctx, fk, "e", "m", "n", "iv", "sp")
}

// applyWatched runs a watchable unit: WATCH on the fence and HMGET of its
// holder, NextOffset, IDs version and done spans in one round trip; the
// apply script's checks on them (check); then, if they pass, the script's
// writes in the same order in one MULTI … EXEC, which the server runs only
// if no command touched the fence since the WATCH (a claim, a reset,
// another apply), so the checks hold when the writes land, as inside the
// script. An EXEC the server refused for that reason wrote nothing and
// replies "moved". It fails closed: MULTI is sent only after the checks
// passed on the reply read after WATCH, on the same connection (go-redis
// does not re-dial a transaction's connection: a broken one fails EXEC).
func (s *Sink) applyWatched(ctx context.Context, op string, sc epochs.Scope, u *unit) ([]any, error) {
	fk := s.fenceKey(sc)
	var reply []any
	err := s.rdb.Watch(ctx, func(tx *goredis.Tx) error {
		// WATCH goes in a pipeline with HMGET, which go-redis does not
		// track: release it on every path that does not reach EXEC, so
		// that the connection goes back to the pool without a watch.
		armed := true
		defer func() {
			if armed {
				_ = tx.Unwatch(context.WithoutCancel(ctx)).Err()
			}
		}()
		var f *goredis.SliceCmd
		if _, err := tx.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.Do(ctx, "watch", fk)
			f = watchedFields(ctx, p, fk)
			return nil
		}); err != nil {
			return err
		}
		r, iv, err := u.check(f.Val())
		if err != nil {
			return err
		}
		if r != nil {
			reply = r
			return nil
		}
		if u.newNext == "" {
			reply = []any{"ok", strconv.FormatInt(u.expectNext, 10)}
			return nil
		}
		if s.hookBeforeExec != nil {
			s.hookBeforeExec(ctx)
		}
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			u.queue(ctx, p, fk, s.idsKey(sc), iv)
			return nil
		})
		armed = !(err == nil || errors.Is(err, goredis.TxFailedErr) || goredis.IsExecAbortError(err))
		if errors.Is(err, goredis.TxFailedErr) {
			reply = []any{"moved"}
			return nil
		}
		if err != nil {
			return err
		}
		if s.cfg.WaitReplicas > 0 {
			// WAIT on the connection that wrote: it counts the replicas
			// that have this connection's writes.
			n, err := tx.Do(ctx, "WAIT", s.cfg.WaitReplicas, s.cfg.WaitTimeout.Milliseconds()).Int()
			if err != nil {
				return fmt.Errorf("WAIT: %w", err)
			}
			if n < s.cfg.WaitReplicas {
				return fmt.Errorf("%w: %d of %d replicas within %s", ErrNotReplicated, n, s.cfg.WaitReplicas, s.cfg.WaitTimeout)
			}
		}
		reply = []any{"ok", u.newNext}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNotReplicated) {
			return nil, fmt.Errorf("redis: %s: %w", op, err)
		}
		return nil, s.wrap(ctx, op, err)
	}
	return reply, nil
}

// queue queues u's writes as the apply script makes them: the commands (a
// run of SETs as one MSET), the ID row, the prune, NextOffset and the done
// spans, the duplicates count and the IDs version (iv, the stored one,
// plus one).
func (u *unit) queue(ctx context.Context, p goredis.Pipeliner, fenceKey, idsKey string, iv int64) {
	for j := 0; j < len(u.cmds); {
		if c := u.cmds[j]; c.op != "set" {
			// DEL here; the others only if watchable let them through
			// (it does not: they can fail half way).
			switch c.op {
			case "hset", "hincrby":
				p.Do(ctx, c.op, c.key, c.a1, c.a2)
			case "del":
				p.Do(ctx, c.op, c.key)
			default:
				p.Do(ctx, c.op, c.key, c.a1)
			}
			j++
			continue
		}
		k := j
		for k < len(u.cmds) && u.cmds[k].op == "set" {
			k++
		}
		args := make([]any, 0, 1+2*(k-j))
		args = append(args, "mset")
		for _, c := range u.cmds[j:k] {
			args = append(args, c.key, c.a1)
		}
		p.Do(ctx, args...)
		j = k
	}
	if u.rowMember != "" {
		p.Do(ctx, "zadd", idsKey, u.rowLast, u.rowMember)
	}
	if u.horizon != "" {
		p.Do(ctx, "zremrangebyscore", idsKey, "-inf", "("+u.horizon)
	}
	// Do, not the typed commands: inside the held watch's plain pipeline
	// each queued command replies QUEUED, which a typed reply would not
	// parse.
	p.Do(ctx, "hset", fenceKey, "n", u.newNext, "sp", u.newSpans)
	if u.dups > 0 {
		p.Do(ctx, "hincrby", fenceKey, "d", u.dups)
	}
	if u.expectIV != "" {
		p.Do(ctx, "hset", fenceKey, "iv", strconv.FormatInt(iv+1, 10))
	}
}
