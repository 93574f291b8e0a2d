package redis

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// The tests of the held watch (held.go): a scope's connection that keeps
// its fence watched between batches.

// heldCount returns the held applies counted with outcome o.
func heldCount(s *Sink, o string) int {
	return int(s.held.outcomes[o].Load())
}

// mustApply applies offs with set(v) and fails the test on an error.
func mustApply(t *testing.T, s *Sink, tok epochs.Token, v string, offs ...int64) {
	t.Helper()
	if _, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offs}, set(v)); err != nil {
		t.Fatalf("Apply(%v) by %s: %v", offs, tok, err)
	}
}

// heldAfterOneBatch returns a Sink whose tenure tok applied offset 0
// (k0 = first), so that it holds a watch, and another Sink of the same
// prefix.
func heldAfterOneBatch(t *testing.T) (s, other *Sink, tok epochs.Token) {
	t.Helper()
	s = openSink(t, "", Config{})
	other = openSink(t, s.Prefix(), Config{})
	tok = testToken(t, 1)
	claimed(t, s, tok)
	mustApply(t, s, tok, "first", 0)
	return s, other, tok
}

// A claim by another holder between two batches of a held watch (the
// view the first batch's pipeline read still shows the old holder): the
// next batch's EXEC writes nothing, and the apply fails fenced.
func TestHeldWatchClaimBetweenBatches(t *testing.T) {
	s, other, tok := heldAfterOneBatch(t)
	ctx := t.Context()
	if heldCount(s, heldOK) != 1 || s.held.len() != 1 {
		t.Fatalf("the first batch did not take the held watch: ok %d, held %d", heldCount(s, heldOK), s.held.len())
	}
	next := tok
	next.Epoch, next.Member = 2, "m2"
	claimed(t, other, next)
	_, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}}, set("zombie"))
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored != next {
		t.Fatalf("Apply after the claim = %v, want a *sink.FencedError naming %v", err, next)
	}
	if n := heldCount(s, heldMoved); n != 1 {
		t.Fatalf("moved = %d, want 1: the batch must have reached EXEC on the held watch, which wrote nothing", n)
	}
	if v, _, _ := getKV(ctx, s, "k0"); v != "first" { // set writes k<index in the batch>
		t.Fatalf("k0 = %q, want first: the fenced batch wrote it", v)
	}
	if n := fenceNext(t, s, tok); n != "1" {
		t.Fatalf("NextOffset = %s after the fenced batch, want 1", n)
	}
	if s.held.len() != 0 {
		t.Fatal("the fenced apply left its scope's held watch open")
	}
}

// A view older than the fence never refuses a batch by itself: another
// Sink claims a new tenure, and this Sink's held view, read before that
// claim, still shows the old holder; the apply of the new tenure reads
// the fence again and applies, running each effect once.
func TestHeldWatchStaleViewRechecks(t *testing.T) {
	s, other, tok := heldAfterOneBatch(t)
	ctx := t.Context()
	next := tok
	next.Epoch = 2
	claimed(t, other, next) // s's view still shows epoch 1
	runs := 0
	res, err := s.Apply(ctx, next, sink.Batch{Offsets: []int64{1, 2}}, func(ctx context.Context, tx *Tx, i int) error {
		runs++
		tx.Set("k"+strconv.Itoa(i), "second")
		return nil
	})
	if err != nil || res.Applied != 2 || res.NextOffset != 3 {
		t.Fatalf("Apply of the new tenure on a stale view = %+v, %v; want 2 applied, NextOffset 3", res, err)
	}
	if runs != 2 {
		t.Fatalf("the effects ran %d times, want 2 (once each)", runs)
	}
	if n := heldCount(s, heldArmed); n != 2 {
		t.Fatalf("armed = %d, want 2 (the first batch, then the re-read of the stale view)", n)
	}
}

// The held connection killed between batches (CLIENT KILL): the next
// apply fails as a sink failure and writes nothing; the one after arms a
// new connection and applies.
func TestHeldWatchConnectionKilled(t *testing.T) {
	s := openSink(t, "", Config{})
	ctx := t.Context()
	tok := testToken(t, 1)
	claimed(t, s, tok)
	mustApply(t, s, tok, "first", 0)
	w := s.held.m[tok.Scope()]
	if w == nil {
		t.Fatal("no held watch after the first batch")
	}
	id, err := w.conn.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Client().Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
		t.Fatalf("CLIENT KILL ID %d: %v", id, err)
	}
	_, err = s.Apply(ctx, tok, sink.Batch{Offsets: []int64{1}}, set("lost"))
	if err == nil || !s.IsSinkFailure(err) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Apply on the killed connection = %v, want ErrUnavailable, a sink failure", err)
	}
	if heldCount(s, heldDropped) != 1 {
		t.Fatalf("dropped = %d, want 1", heldCount(s, heldDropped))
	}
	if n := fenceNext(t, s, tok); n != "1" {
		t.Fatalf("NextOffset = %s after the failed batch, want 1", n)
	}
	mustApply(t, s, tok, "again", 1)
	if v, _, _ := getKV(ctx, s, "k0"); v != "again" {
		t.Fatalf("k0 = %q after the retry, want again", v)
	}
	if heldCount(s, heldArmed) != 2 {
		t.Fatalf("armed = %d, want 2 (a new connection after the kill)", heldCount(s, heldArmed))
	}
}

// HeldWatches caps the scopes holding a watch: the others take the
// watched path, counted; a negative HeldWatches holds none.
func TestHeldWatchesCapped(t *testing.T) {
	s := openSink(t, "", Config{HeldWatches: 1})
	a, b := testToken(t, 1), testToken(t, 1)
	b.Partition = 2
	claimed(t, s, a)
	claimed(t, s, b)
	mustApply(t, s, a, "a", 0)
	mustApply(t, s, b, "b", 0)
	if s.held.len() != 1 || heldCount(s, heldOK) != 1 || heldCount(s, heldNoPlaces) != 1 {
		t.Fatalf("held %d, ok %d, no_place %d; want 1, 1, 1", s.held.len(), heldCount(s, heldOK), heldCount(s, heldNoPlaces))
	}
	if st := s.HeldStats(); st.Watches != 1 || st.Applies[heldOK] != 1 || st.Applies[heldNoPlaces] != 1 {
		t.Fatalf("HeldStats() = %+v, want 1 watch, ok 1, no_place 1", st)
	}

	off := openSink(t, "", Config{HeldWatches: -1})
	claimed(t, off, a)
	mustApply(t, off, a, "a", 0)
	if off.held.len() != 0 || heldCount(off, heldOK) != 0 || heldCount(off, heldNoPlaces) != 0 {
		t.Fatal("HeldWatches -1 held a watch")
	}
}
