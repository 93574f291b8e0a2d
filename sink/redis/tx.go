package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// Tx is the transaction handle an effect (a consumer handler) receives. Its
// writes are buffered, never sent: the sink's Apply script runs them on
// the server after it has checked the holder, in the same atomic unit as
// the new NextOffset, or not at all. There is no method that writes to the
// server directly, so a handler cannot land a write outside the fence.
//
// Reads ([Tx.Get], [Tx.HGet]) see the Tx's own buffered writes first, then
// the server's committed value, read when asked; the script checks, inside
// the atomic unit, that every committed value the Tx read is still the
// same, and otherwise the sink runs the batch's effects again on a fresh
// Tx (so an effect may run more than once, as [sink.Effect] allows).
//
// Keys are the handler's own names: the server key is <Prefix>:k:<key>
// ([Sink.Key]). A Tx must be used only by the goroutine running the
// effect, during the effect: a write after the Apply attempt ended panics.
type Tx struct {
	s     *Sink
	cmds  []command
	reads []readCheck
	strs  map[string]*shadow            // string keys
	hash  map[string]map[string]*shadow // hash fields
	clear map[string]bool               // keys deleted or overwritten: no committed field left
	rec   int                           // index of the record whose effect runs
	done  bool
	// failed: a read from the server failed during the effect
	// (sink.EffectError.TxHealthy).
	failed bool
	// shadowed: strs, hash and clear are kept (from the first read on).
	shadowed bool
}

type command struct {
	op      string
	hk, key string // the handler's key and the server key
	a1, a2  string
	n       int64 // the increment of incrby and hincrby
	rec     int
}

type readCheck struct {
	key            string // the server key
	kind, field    string
	present, value string
}

// shadow is what a Tx knows of one string key or hash field: its value,
// if known, and the increments buffered on top of an unknown value.
type shadow struct {
	known, exists bool
	val           string
	delta         int64
}

func newTx(s *Sink) *Tx {
	return &Tx{s: s}
}

func (tx *Tx) check() {
	if tx.done {
		panic("redis: Tx used after its Apply attempt ended")
	}
}

func (tx *Tx) add(op, k, a1, a2 string, n int64) {
	tx.check()
	c := command{op: op, hk: k, key: tx.s.Key(k), a1: a1, a2: a2, n: n, rec: tx.rec}
	tx.cmds = append(tx.cmds, c)
	if tx.shadowed {
		tx.shadowApply(c)
	}
}

func (tx *Tx) str(k string) *shadow {
	sh := tx.strs[k]
	if sh == nil {
		sh = &shadow{}
		tx.strs[k] = sh
	}
	return sh
}

func (tx *Tx) field(k, f string) *shadow {
	m := tx.hash[k]
	if m == nil {
		m = map[string]*shadow{}
		tx.hash[k] = m
	}
	sh := m[f]
	if sh == nil {
		sh = &shadow{}
		if tx.clear[k] {
			sh.known = true
		}
		m[f] = sh
	}
	return sh
}

func (sh *shadow) set(v string) { *sh = shadow{known: true, exists: true, val: v} }

func (sh *shadow) incr(n int64) {
	if !sh.known {
		sh.delta += n
		return
	}
	cur := int64(0)
	if sh.exists {
		c, err := strconv.ParseInt(sh.val, 10, 64)
		if err != nil {
			return // the script refuses the batch (not an integer)
		}
		cur = c
	}
	sh.set(strconv.FormatInt(cur+n, 10))
}

// resolve returns sh's value given the committed one.
func (sh *shadow) resolve(v string, exists bool) (string, bool, error) {
	sh.known, sh.exists, sh.val = true, exists, v
	if sh.delta != 0 {
		d := sh.delta
		sh.delta = 0
		cur := int64(0)
		if exists {
			c, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return "", false, fmt.Errorf("%w: an increment of a value that is not an integer (%q)", ErrCommand, v)
			}
			cur = c
		}
		sh.set(strconv.FormatInt(cur+d, 10))
	}
	return sh.val, sh.exists, nil
}

// Get returns the value of string key k as this transaction sees it (its
// own buffered writes, then the committed value) and whether it exists.
// Call it only from the effect's goroutine during the effect.
func (tx *Tx) Get(ctx context.Context, k string) (string, bool, error) {
	tx.check()
	tx.ensureShadow()
	sh := tx.str(k)
	if sh.known {
		return sh.val, sh.exists, nil
	}
	v, err := tx.s.rdb.Get(ctx, tx.s.Key(k)).Result()
	exists := true
	if errors.Is(err, goredis.Nil) {
		v, exists, err = "", false, nil
	}
	if err != nil {
		tx.failed = true
		return "", false, tx.s.wrap(ctx, "get "+k, err)
	}
	tx.reads = append(tx.reads, readCheck{key: tx.s.Key(k), kind: "g", present: boolArg(exists), value: v})
	return sh.resolve(v, exists)
}

// HGet returns field f of hash key k as this transaction sees it, and
// whether it exists. Call it only from the effect's goroutine during the
// effect.
func (tx *Tx) HGet(ctx context.Context, k, f string) (string, bool, error) {
	tx.check()
	tx.ensureShadow()
	sh := tx.field(k, f)
	if sh.known {
		return sh.val, sh.exists, nil
	}
	v, err := tx.s.rdb.HGet(ctx, tx.s.Key(k), f).Result()
	exists := true
	if errors.Is(err, goredis.Nil) {
		v, exists, err = "", false, nil
	}
	if err != nil {
		tx.failed = true
		return "", false, tx.s.wrap(ctx, "hget "+k, err)
	}
	tx.reads = append(tx.reads, readCheck{key: tx.s.Key(k), kind: "h", field: f, present: boolArg(exists), value: v})
	return sh.resolve(v, exists)
}

// Set buffers SET k v.
func (tx *Tx) Set(k, v string) { tx.add("set", k, v, "", 0) }

// Del buffers DEL k.
func (tx *Tx) Del(k string) { tx.add("del", k, "", "", 0) }

// IncrBy buffers INCRBY k n. The script refuses the whole batch (an
// *sink.EffectError matching [ErrCommand]) if k holds something other
// than an integer, or if the result leaves ±2^53.
func (tx *Tx) IncrBy(k string, n int64) { tx.add("incrby", k, strconv.FormatInt(n, 10), "", n) }

// HSet buffers HSET k f v.
func (tx *Tx) HSet(k, f, v string) { tx.add("hset", k, f, v, 0) }

// HDel buffers HDEL k f.
func (tx *Tx) HDel(k, f string) { tx.add("hdel", k, f, "", 0) }

// HIncrBy buffers HINCRBY k f n, checked as [Tx.IncrBy] is.
func (tx *Tx) HIncrBy(k, f string, n int64) { tx.add("hincrby", k, f, strconv.FormatInt(n, 10), n) }

// SAdd buffers SADD k m.
func (tx *Tx) SAdd(k, m string) { tx.add("sadd", k, m, "", 0) }

// SRem buffers SREM k m.
func (tx *Tx) SRem(k, m string) { tx.add("srem", k, m, "", 0) }

// RPush buffers RPUSH k v.
func (tx *Tx) RPush(k, v string) { tx.add("rpush", k, v, "", 0) }

// ensureShadow builds what the Tx knows of its own writes, at its first
// read: a batch that never reads keeps no shadow at all.
func (tx *Tx) ensureShadow() {
	if tx.shadowed {
		return
	}
	tx.shadowed = true
	tx.strs, tx.hash, tx.clear = map[string]*shadow{}, map[string]map[string]*shadow{}, map[string]bool{}
	for _, c := range tx.cmds {
		tx.shadowApply(c)
	}
}

// shadowApply records the effect of buffered command c on the shadow.
func (tx *Tx) shadowApply(c command) {
	k := c.hk
	switch c.op {
	case "set":
		tx.str(k).set(c.a1)
		tx.clear[k], tx.hash[k] = true, nil
	case "del":
		*tx.str(k) = shadow{known: true}
		tx.clear[k], tx.hash[k] = true, nil
	case "incrby":
		tx.str(k).incr(c.n)
	case "hset":
		tx.field(k, c.a1).set(c.a2)
	case "hdel":
		*tx.field(k, c.a1) = shadow{known: true}
	case "hincrby":
		tx.field(k, c.a1).incr(c.n)
	}
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
