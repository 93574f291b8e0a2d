package redis

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

func testToken(t testing.TB, epoch int32) epochs.Token {
	return epochs.Token{Group: "g-" + t.Name(), Topic: "t", Partition: 1, Epoch: epoch, Member: "m"}
}

func claimed(t *testing.T, s *Sink, tok epochs.Token) {
	t.Helper()
	if _, err := s.Claim(t.Context(), tok, sink.Observed{}); err != nil {
		t.Fatalf("Claim: %v", err)
	}
}

// A Tx's reads see its own buffered writes, also increments of a value it
// never read.
func TestTxReadsOwnWrites(t *testing.T) {
	s := openSink(t, "", Config{})
	tok := testToken(t, 1)
	claimed(t, s, tok)
	if err := s.Client().Set(t.Context(), s.Key("bal"), "10", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0, 1}}, func(ctx context.Context, tx *Tx, i int) error {
		tx.IncrBy("bal", 5)
		tx.HIncrBy("h", "f", 2)
		v, _, err := tx.Get(ctx, "bal")
		if err != nil {
			return err
		}
		hv, _, err := tx.HGet(ctx, "h", "f")
		got = append(got, v, hv)
		return err
	})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if want := []string{"15", "2", "20", "4"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("reads inside the batch = %v, want %v", got, want)
	}
	if v, _, _ := getKV(t.Context(), s, "bal"); v != "20" {
		t.Fatalf("bal = %q after the batch, want 20", v)
	}
}

// A value a Tx read that changes before the script runs makes the sink
// run the effects again on the new value: the read is checked inside the
// fenced unit.
func TestTxReadCheckedInScript(t *testing.T) {
	s := openSink(t, "", Config{})
	tok := testToken(t, 1)
	claimed(t, s, tok)
	ctx := t.Context()
	s.Client().Set(ctx, s.Key("bal"), "10", 0)
	runs := 0
	_, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx *Tx, i int) error {
		runs++
		v, _, err := tx.Get(ctx, "bal")
		if err != nil {
			return err
		}
		if runs == 1 {
			// Another writer moves the value after the read.
			s.Client().Set(ctx, s.Key("bal"), "100", 0)
		}
		tx.Set("copy", v)
		return nil
	})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if runs != 2 {
		t.Fatalf("effect ran %d times, want 2 (the changed read must be caught by the script)", runs)
	}
	if v, _, _ := getKV(ctx, s, "copy"); v != "100" {
		t.Fatalf("copy = %q, want 100 (the value as of the script)", v)
	}
}

// A buffered command the server would refuse fails the whole batch before
// any write: a script is atomic but not transactional.
func TestTxInvalidCommandWritesNothing(t *testing.T) {
	s := openSink(t, "", Config{})
	tok := testToken(t, 1)
	claimed(t, s, tok)
	ctx := t.Context()
	s.Client().HSet(ctx, s.Key("h"), "f", "x")
	s.Client().Set(ctx, s.Key("s"), "abc", 0)
	cases := map[string]func(tx *Tx){
		"incr-on-hash":        func(tx *Tx) { tx.IncrBy("h", 1) },
		"incr-on-text":        func(tx *Tx) { tx.IncrBy("s", 1) },
		"hincr-on-text-field": func(tx *Tx) { tx.HIncrBy("h", "f", 1) },
		"sadd-on-string":      func(tx *Tx) { tx.SAdd("s", "m") },
		"set-then-hset":       func(tx *Tx) { tx.Set("n", "1"); tx.HSet("n", "f", "v") },
		"overflow":            func(tx *Tx) { tx.IncrBy("big", 1<<52); tx.IncrBy("big", 1<<52) },
	}
	for name, bad := range cases {
		_, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1}}, func(ctx context.Context, tx *Tx, i int) error {
			tx.Set("before-"+name, "v")
			if i == 1 {
				bad(tx)
			}
			return nil
		})
		var ee *sink.EffectError
		if !errors.Is(err, ErrCommand) || !errors.As(err, &ee) || ee.Index != 1 {
			t.Fatalf("%s: Apply = %v, want an *sink.EffectError at index 1 matching ErrCommand", name, err)
		}
		if _, ok, _ := getKV(ctx, s, "before-"+name); ok {
			t.Fatalf("%s: the batch's earlier write landed", name)
		}
	}
	if next, _ := nextOf(s.Claim(ctx, tok, sink.Observed{})); next != 0 {
		t.Fatalf("NextOffset = %d after refused batches, want 0", next)
	}
}

// Open reads the server's persistence settings and warns, naming the
// risk, when they are weaker than appendonly yes + appendfsync always.
func TestPersistenceWarning(t *testing.T) {
	probe := openSink(t, "", Config{})
	ctx := t.Context()
	rdb := probe.Client()
	orig := map[string]string{}
	for _, k := range []string{"appendonly", "appendfsync"} {
		m, err := rdb.ConfigGet(ctx, k).Result()
		if err != nil {
			t.Fatalf("CONFIG GET %s: %v", k, err)
		}
		orig[k] = m[k]
	}
	t.Cleanup(func() {
		for _, k := range []string{"appendfsync", "appendonly"} {
			if err := rdb.ConfigSet(context.Background(), k, orig[k]).Err(); err != nil {
				t.Errorf("restore %s: %v", k, err)
			}
		}
	})
	set := func(aof, fsync string) {
		t.Helper()
		if err := rdb.ConfigSet(ctx, "appendonly", aof).Err(); err != nil {
			t.Fatalf("CONFIG SET appendonly %s: %v", aof, err)
		}
		if err := rdb.ConfigSet(ctx, "appendfsync", fsync).Err(); err != nil {
			t.Fatalf("CONFIG SET appendfsync %s: %v", fsync, err)
		}
	}
	open := func() (string, Persistence) {
		t.Helper()
		var buf bytes.Buffer
		s := openSink(t, "", Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		return buf.String(), s.Persistence()
	}
	for _, c := range []struct{ aof, fsync, want string }{
		{"no", "everysec", "appendonly is no"},
		{"yes", "everysec", "up to a second of acknowledged writes"},
		{"yes", "no", "appendfsync is no"},
	} {
		set(c.aof, c.fsync)
		out, p := open()
		if p.Durable() || !strings.Contains(out, "level=WARN") || !strings.Contains(out, c.want) {
			t.Fatalf("appendonly %s appendfsync %s: persistence %+v, log %q; want a warning naming %q", c.aof, c.fsync, p, out, c.want)
		}
	}
	set("yes", "always")
	if out, p := open(); !p.Durable() || strings.Contains(out, "WARN") {
		t.Fatalf("appendonly yes appendfsync always: persistence %+v, log %q; want durable, no warning", p, out)
	}
}

// Two Sink values on one prefix (two processes) with one tenure: the one
// whose cached NextOffset is stale must not run the effects of records the
// other applied; the script checks the NextOffset the effects were chosen
// for.
func TestStaleCachedNext(t *testing.T) {
	s1 := openSink(t, "", Config{})
	s2 := openSink(t, s1.Prefix(), Config{})
	ctx := t.Context()
	tok := testToken(t, 1)
	claimed(t, s1, tok) // s1 caches NextOffset 0
	incr := func(ctx context.Context, tx *Tx, i int) error { tx.IncrBy("n", 1); return nil }
	if _, err := s2.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1}}, incr); err != nil {
		t.Fatalf("Apply through s2: %v", err)
	}
	res, err := s1.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1, 2, 3}}, incr)
	if err != nil {
		t.Fatalf("Apply through s1: %v", err)
	}
	if !res.Equal(sink.Result{Applied: 2, Skipped: 2, NextOffset: 4}) {
		t.Fatalf("Apply with a stale cache = %+v, want 2 applied, 2 skipped", res)
	}
	if v, _, _ := getKV(ctx, s1, "n"); v != "4" {
		t.Fatalf("n = %q, want 4 (each record once)", v)
	}
}

// With WaitReplicas, a write that no replica acknowledges fails with
// ErrNotReplicated, a sink failure (the test server has no replica).
func TestWaitReplicasNotAcknowledged(t *testing.T) {
	s := openSink(t, "", Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	info, err := s.Client().Info(t.Context(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "connected_slaves:0") {
		t.Skipf("the test server has replicas (%q): the unacknowledged write cannot be provoked", info)
	}
	_, err = s.Claim(t.Context(), testToken(t, 1), sink.Observed{})
	if !errors.Is(err, ErrNotReplicated) || !s.IsSinkFailure(err) {
		t.Fatalf("Claim with WaitReplicas 1 and no replica: %v, want ErrNotReplicated, a sink failure", err)
	}
}

// Two Sink values on one prefix with one tenure and command IDs: the one
// whose cached IDs are stale must find the ID the other applied (the
// script checks the IDs version its decisions were made on).
func TestStaleCachedIDs(t *testing.T) {
	s1 := openSink(t, "", Config{})
	s2 := openSink(t, s1.Prefix(), Config{})
	ctx := t.Context()
	tok := testToken(t, 1)
	claimed(t, s1, tok)
	incr := func(ctx context.Context, tx *Tx, i int) error { tx.IncrBy("n", 1); return nil }
	if _, err := s1.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}, IDs: []string{"a"}}, incr); err != nil { // s1 caches the IDs
		t.Fatal(err)
	}
	if _, err := s2.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}, IDs: []string{"b"}}, incr); err != nil {
		t.Fatal(err)
	}
	res, err := s1.Apply(ctx, tok, sink.Batch{Offsets: []int64{2}, IDs: []string{"b"}}, incr)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Duplicates) != 1 || res.Applied != 0 {
		t.Fatalf("an Apply with IDs of b again through s1 = %+v, want it a duplicate", res)
	}
	if v, _, _ := getKV(ctx, s1, "n"); v != "2" {
		t.Fatalf("n = %q, want 2 (b applied once)", v)
	}
}

// A tenure this Sink still caches as the holder, superseded through
// another Sink (another process): its dead letter is refused by the
// script, which checks the holder itself.
func TestStaleTenureDeadLetterFenced(t *testing.T) {
	s1 := openSink(t, "", Config{})
	s2 := openSink(t, s1.Prefix(), Config{})
	ctx := t.Context()
	old, newer := testToken(t, 1), testToken(t, 2)
	claimed(t, s1, old) // s1 caches old as the holder
	claimed(t, s2, newer)
	_, err := s1.DeadLetter(ctx, old, sink.DeadRecord{Offset: 0, Reason: "permanent"})
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored != newer || fe.Op != sink.OpDeadLetter {
		t.Fatalf("DeadLetter by the superseded tenure: %v, want a *sink.FencedError naming %s", err, newer)
	}
	if dls, err := s2.DeadLetters(ctx, dlq.Filter{}); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after the refusal: %v, %v; want none", dls, err)
	}
}

// Two Sink values with one tenure: a lane of the other applied a span
// this Sink's view lacks; a dead letter of a record in that span is a
// replay (the script compares the stored spans with the view).
func TestStaleSpansDeadLetter(t *testing.T) {
	s1 := openSink(t, "", Config{})
	s2 := openSink(t, s1.Prefix(), Config{})
	ctx := t.Context()
	tok := testToken(t, 1)
	if _, err := s1.Claim(ctx, tok, sink.Observed{}); err != nil { // s1's view: nothing done
		t.Fatal(err)
	}
	set := func(ctx context.Context, tx *Tx, i int) error { tx.Set("k", "v"); return nil }
	if _, err := s2.Apply(ctx, tok, sink.Batch{Offsets: []int64{5}, From: []int64{5}}, set); err != nil {
		t.Fatal(err)
	}
	res, err := s1.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 5, Reason: "permanent"}.InLane(5))
	if err != nil || res.Stored {
		t.Fatalf("a lane's DeadLetter of a done record through the stale Sink = %+v, %v; want a replay", res, err)
	}
}

// A batch whose commands only the apply script can run (an INCRBY, which
// can fail, is not for WATCH/MULTI/EXEC) while the same member claims at a
// new epoch is fenced by the script: it compares the holder's epoch, not
// only its member. For Apply, an Apply with IDs and a lane's Apply, which all run
// the script for such a batch.
func TestScriptSameMemberNewEpochFenced(t *testing.T) {
	for _, call := range []string{"Apply", "an Apply with IDs", "a lane's Apply"} {
		t.Run(call, func(t *testing.T) {
			s := openSink(t, "", Config{})
			ctx := t.Context()
			m1, m2 := testToken(t, 1), testToken(t, 2)
			if _, err := s.Claim(ctx, m1, sink.Observed{}); err != nil {
				t.Fatal(err)
			}
			raced := false
			effect := func(ctx context.Context, tx *Tx, _ int) error {
				if !raced {
					raced = true
					if _, err := s.Claim(ctx, m2, sink.Observed{}); err != nil {
						return err
					}
				}
				tx.IncrBy("n", 1)
				return nil
			}
			var err error
			switch call {
			case "Apply":
				_, err = s.Apply(ctx, m1, sink.Batch{Offsets: []int64{0}}, effect)
			case "an Apply with IDs":
				_, err = s.Apply(ctx, m1, sink.Batch{Offsets: []int64{0}, IDs: []string{"cmd"}}, effect)
			default:
				_, err = s.Apply(ctx, m1, sink.Batch{Offsets: []int64{0}, From: []int64{0}}, effect)
			}
			var fe *sink.FencedError
			if !raced || !errors.As(err, &fe) || fe.Stored != m2 {
				t.Fatalf("%s by %s while the same member claimed at epoch 2 (raced %v): %v, want fenced by %s", call, m1, raced, err, m2)
			}
			if _, ok, _ := getKV(ctx, s, "n"); ok {
				t.Fatalf("%s: the fenced batch's INCRBY landed", call)
			}
		})
	}
}
