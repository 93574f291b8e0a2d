package postgres

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// The tests of the apply on a view (view.go): a tenure's later batches
// skip the early read, and the checked advance alone decides.

// putOffsets is an effect writing kv(<prefix><offset>) = v, recording the
// offsets it ran.
func putOffsets(offsets []int64, prefix, v string, ran *[]int64) sink.Effect[pgx.Tx] {
	return func(ctx context.Context, tx pgx.Tx, i int) error {
		*ran = append(*ran, offsets[i])
		_, err := tx.Exec(ctx, upsertKV, prefix+strconv.FormatInt(offsets[i], 10), v)
		return err
	}
}

func mustApplyOffsets(t *testing.T, s *Sink, tok epochs.Token, prefix, v string, offsets ...int64) {
	t.Helper()
	var ran []int64
	if _, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offsets}, putOffsets(offsets, prefix, v, &ran)); err != nil {
		t.Fatalf("Apply(%v) by %s: %v", offsets, tok, err)
	}
}

// viewAfterOneBatch returns a Sink whose tenure tok applied offset 0
// (k0 = s), so that it holds a view, and another Sink of the schema.
func viewAfterOneBatch(t *testing.T) (s, other *Sink, tok epochs.Token) {
	t.Helper()
	schema := newTestSchema(t)
	s, other = openSink(t, schema, nil), openSink(t, schema, nil)
	tok = tokenOf(testScope(t), 1, "m")
	mustClaim(t, s, tok)
	mustApplyOffsets(t, s, tok, "k", "s", 0)
	return s, other, tok
}

// A tenure fenced by another process since its last apply: its batch
// runs on the view, the checked advance refuses it, nothing is visible,
// and the refusal names the new holder.
func TestViewFencedByAnotherProcess(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s, other := openSink(t, schema, nil), openSink(t, schema, nil)
	old, newer := tokenOf(testScope(t), 1, "old"), tokenOf(testScope(t), 2, "new")
	mustClaim(t, s, old)
	mustApplyOffsets(t, s, old, "k", "first", 0)
	if _, ok := s.views.get(old); !ok {
		t.Fatal("no view after a committed apply")
	}
	mustClaim(t, other, newer)
	var ran []int64
	_, err := s.Apply(t.Context(), old, sink.Batch{Offsets: []int64{1}}, putOffsets([]int64{1}, "k", "zombie", &ran))
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored != newer || fe.Offered != old {
		t.Fatalf("Apply of the superseded tenure = %v, want a FencedError naming %s", err, newer)
	}
	if len(ran) != 1 {
		t.Fatalf("the effect ran %v, want once: the batch must have taken the view (no early read)", ran)
	}
	if _, ok, err := getKV(t.Context(), other, "k1"); err != nil || ok {
		t.Fatalf("the fenced batch's write is visible (ok=%v, err=%v)", ok, err)
	}
	if next := mustClaim(t, other, newer); next != 1 {
		t.Fatalf("NextOffset after the refused batch = %d, want 1", next)
	}
	if _, ok := s.views.get(old); ok {
		t.Fatal("the refused apply left its view")
	}
}

// Another process of the same tenure moved NextOffset: the view's check
// fails, and the batch runs again on the early read, applying only the
// record left.
func TestViewMovedBySameTenure(t *testing.T) {
	t.Parallel()
	s, other, tok := viewAfterOneBatch(t)
	mustApplyOffsets(t, other, tok, "k", "other", 1)
	var ran []int64
	offs := []int64{1, 2}
	res, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offs}, putOffsets(offs, "k", "s", &ran))
	if err != nil || res.Applied != 1 || res.Skipped != 1 || res.NextOffset != 3 {
		t.Fatalf("Apply on a stale view = %+v, %v; want 1 applied, 1 skipped, NextOffset 3", res, err)
	}
	if v, _, _ := getKV(t.Context(), s, "k1"); v != "other" {
		t.Fatalf("k1 = %q, want other's (the stale attempt rolled back)", v)
	}
	if len(ran) != 3 { // [1 2] on the view, rolled back; [2] on the read
		t.Fatalf("the effects ran %v, want [1 2 2]", ran)
	}
}

// A scope that became gapped after the view (a lane of the tenure through
// another process): the plain advance refuses to move a gapped scope's
// watermark, and the batch runs again on the early read, skipping the
// lane's done offset.
func TestViewGappedScope(t *testing.T) {
	t.Parallel()
	s, other, tok := viewAfterOneBatch(t)
	if _, err := other.Claim(t.Context(), tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	var laneRan []int64
	if _, err := other.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{3}, From: []int64{3}},
		putOffsets([]int64{3}, "k", "lane", &laneRan)); err != nil {
		t.Fatal(err)
	}
	var ran []int64
	offs := []int64{1, 2, 3, 4}
	res, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offs}, putOffsets(offs, "k", "s", &ran))
	if err != nil || res.Applied != 3 || res.Skipped != 1 || res.NextOffset != 5 {
		t.Fatalf("Apply on a view of a scope gapped since = %+v, %v; want 3 applied, 1 skipped, NextOffset 5", res, err)
	}
	if v, _, _ := getKV(t.Context(), s, "k3"); v != "lane" {
		t.Fatalf("k3 = %q, want the lane's (its done offset applied again)", v)
	}
}

// A tenure fenced since its view whose effect then fails on what the new
// holder wrote (a duplicate key): the refusal is the fence's, not the
// effect's, so the consumer counts a stale write rejected instead of
// retrying a handler error.
func TestViewEffectFailsAfterFence(t *testing.T) {
	t.Parallel()
	s, other, old := viewAfterOneBatch(t)
	newer := tokenOf(old.Scope(), 2, "new")
	mustClaim(t, other, newer)
	insert := func(v string) sink.Effect[pgx.Tx] {
		return func(ctx context.Context, tx pgx.Tx, _ int) error {
			_, err := tx.Exec(ctx, `INSERT INTO kv (k, v) VALUES ('once', $1)`, v)
			return err
		}
	}
	if _, err := other.Apply(t.Context(), newer, sink.Batch{Offsets: []int64{1}}, insert("new")); err != nil {
		t.Fatal(err)
	}
	_, err := s.Apply(t.Context(), old, sink.Batch{Offsets: []int64{1}}, insert("zombie"))
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored != newer {
		t.Fatalf("Apply of the superseded tenure whose effect failed = %v, want a FencedError naming %s", err, newer)
	}
	var ee *sink.EffectError
	if errors.As(err, &ee) {
		t.Fatalf("the refusal carries the effect's error: %v", err)
	}
}

// A claim through this Sink that lands between an apply's COMMIT and the
// moment that apply records its view: the view must not be recorded (the
// claim's drop came first), so the superseded tenure's next batch is
// refused on the early read before any effect runs. The conformance
// suite's ApplyRacingClaimAllOrNothing hits this window now and then;
// here the hook holds it open.
func TestViewNotRecordedAfterRacingClaim(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	old, newer := tokenOf(testScope(t), 1, "old"), tokenOf(testScope(t), 2, "new")
	mustClaim(t, s, old)
	claimed := false
	s.afterCommit = func() {
		if !claimed {
			claimed = true
			mustClaim(t, s, newer)
		}
	}
	mustApplyOffsets(t, s, old, "k", "old", 0)
	s.afterCommit = nil
	if !claimed {
		t.Fatal("the hook did not run: no claim raced the apply")
	}
	if _, ok := s.views.get(old); ok {
		t.Fatal("the apply recorded its view after the racing claim dropped the scope's")
	}
	var ran []int64
	_, err := s.Apply(t.Context(), old, sink.Batch{Offsets: []int64{1}}, putOffsets([]int64{1}, "k", "zombie", &ran))
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored != newer || fe.Offered != old {
		t.Fatalf("Apply of the superseded tenure = %v, want a FencedError naming %s", err, newer)
	}
	if len(ran) != 0 {
		t.Fatalf("the superseded tenure's effect ran for %v; want it refused before any effect", ran)
	}
}
