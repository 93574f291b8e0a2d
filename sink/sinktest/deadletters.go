package sinktest

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// poison is a dead record at offset off, with a 1 MB value and headers.
func poison(off int64) sink.DeadRecord {
	return sink.DeadRecord{
		TopicID: "topic-1", Offset: off, Key: []byte("acct-7"), Value: bytes.Repeat([]byte{0xfe, 'x'}, 512*1024),
		Headers:   []sink.RecordHeader{{Key: "workrouter-type", Value: []byte("bogus")}, {Key: "h", Value: nil}},
		Timestamp: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), Reason: "handler_error", Error: "boom", Attempts: 5,
	}
}

// testDeadLetters: a dead letter is fenced like Apply, stored once,
// advances NextOffset past it, and a replay stores nothing.
func (c *suite[Tx]) testDeadLetters(t *testing.T) {
	s := c.h.Open(t)
	dl, ok := s, s.Features().DeadLetters
	if !ok {
		t.Skip("sinktest: the sink does not declare Features.DeadLetters")
	}
	ctx := t.Context()
	scope := scopeFor(t)
	a, b := tokenFor(scope, 1, "a"), tokenFor(scope, 2, "b")
	c.claim(t, s, a)
	c.apply(t, s, a, offsetsRange(0, 3), c.putEffect(t, "k", offsetsRange(0, 3), "v"))

	if _, err := dl.DeadLetter(ctx, a, sink.DeadRecord{Offset: 3}); !errors.Is(err, sink.ErrBadBatch) {
		t.Fatalf("dead letter without a reason: %v, want sink.ErrBadBatch", err)
	}
	res, err := dl.DeadLetter(ctx, a, poison(3))
	if err != nil || !res.Stored || res.ID == 0 || res.NextOffset != 4 {
		t.Fatalf("DeadLetter = %+v, %v; want stored, NextOffset 4", res, err)
	}
	c.mustNext(t, s, a, 4)
	// A replay (the tenure retried after an unknown outcome) stores nothing.
	again, err := dl.DeadLetter(ctx, a, poison(3))
	if err != nil || again.Stored || again.NextOffset != 4 {
		t.Fatalf("replayed DeadLetter = %+v, %v; want not stored", again, err)
	}
	// A zombie cannot dead-letter: once b claimed, a is fenced.
	c.claim(t, s, b)
	_, err = dl.DeadLetter(ctx, a, poison(4))
	mustFenced(t, err, sink.OpDeadLetter, b, a)
	// The new owner resumes after the dead letter.
	res2, err := dl.DeadLetter(ctx, b, poison(4))
	if err != nil || !res2.Stored || res2.ID == res.ID {
		t.Fatalf("b's dead letter = %+v, %v", res2, err)
	}
	c.apply(t, s, b, offsetsRange(3, 7), c.putEffect(t, "k", offsetsRange(3, 7), "w"))
	c.mustNext(t, s, b, 7)
	c.mustAbsent(t, s, key(t, "k", 3))
	c.mustAbsent(t, s, key(t, "k", 4))
	c.mustGet(t, s, key(t, "k", 5), "w")

	store, ok := sink.As[dlq.Store](s)
	if !ok {
		return
	}
	got, err := store.DeadLetters(ctx, dlq.Filter{Group: scope.Group, Topic: scope.Topic})
	if err != nil || len(got) != 2 {
		t.Fatalf("DeadLetters = %d rows, %v; want 2 (one per poison record, none for the replay)", len(got), err)
	}
	d := got[0]
	want := poison(3)
	if d.ID != res.ID || d.Scope != scope || d.Token != a || d.State != dlq.Open || d.Mirrored || d.At.IsZero() ||
		d.Record.Offset != 3 || !bytes.Equal(d.Record.Key, want.Key) || !bytes.Equal(d.Record.Value, want.Value) ||
		d.Record.Reason != want.Reason || d.Record.Error != want.Error || d.Record.Attempts != want.Attempts ||
		d.Record.TopicID != want.TopicID || !d.Record.Timestamp.Equal(want.Timestamp) ||
		!slices.EqualFunc(d.Record.Headers, want.Headers, func(x, y sink.RecordHeader) bool { return x.Key == y.Key && bytes.Equal(x.Value, y.Value) }) {
		t.Fatalf("stored dead letter does not round-trip:\n got %+v\nwant %+v", summary(d.Record), summary(want))
	}
	if got[1].Token != b || got[1].Record.Offset != 4 {
		t.Fatalf("second dead letter %+v", got[1])
	}
}

func summary(r sink.DeadRecord) string {
	r.Value = nil
	return strings.ReplaceAll(strings.TrimSpace(fmtRecord(r)), "\n", " ")
}

func fmtRecord(r sink.DeadRecord) string {
	var b strings.Builder
	b.WriteString(r.TopicID + " " + r.Reason + " " + r.Error + " " + string(r.Key) + " " + r.Timestamp.String())
	for _, h := range r.Headers {
		b.WriteString(" " + h.Key + "=" + string(h.Value))
	}
	return b.String()
}

// testDeadLetterStore: listing with filters, the compare-and-set state
// moves with their audit rows, and the DLQ mirror mark.
func (c *suite[Tx]) testDeadLetterStore(t *testing.T) {
	s := c.h.Open(t)
	dl, ok1 := s, s.Features().DeadLetters
	store, ok2 := sink.As[dlq.Store](s)
	if !ok1 || !ok2 {
		t.Skip("sinktest: the sink does not declare Features.DeadLetters or lacks dlq.Store")
	}
	ctx := t.Context()
	scope := scopeFor(t)
	other := scope
	other.Partition++
	var ids []int64
	for _, sc := range []epochs.Scope{scope, other} {
		tok := tokenFor(sc, 1, "m")
		c.claim(t, s, tok)
		for off := int64(0); off < 2; off++ {
			r := poison(off)
			r.Value = []byte("small")
			if off == 1 {
				r.Reason = "undecodable"
			}
			res, err := dl.DeadLetter(ctx, tok, r)
			if err != nil || !res.Stored {
				t.Fatalf("DeadLetter: %+v %v", res, err)
			}
			ids = append(ids, res.ID)
		}
	}
	p := other.Partition
	count := func(f dlq.Filter) int {
		t.Helper()
		f.Group = scope.Group
		got, err := store.DeadLetters(ctx, f)
		if err != nil {
			t.Fatalf("DeadLetters(%+v): %v", f, err)
		}
		return len(got)
	}
	if n := count(dlq.Filter{}); n != 4 {
		t.Fatalf("all: %d, want 4", n)
	}
	if n := count(dlq.Filter{Partition: &p}); n != 2 {
		t.Fatalf("partition filter: %d, want 2", n)
	}
	if n := count(dlq.Filter{Reason: "undecodable"}); n != 2 {
		t.Fatalf("reason filter: %d, want 2", n)
	}
	if n := count(dlq.Filter{Since: time.Now().Add(time.Hour)}); n != 0 {
		t.Fatalf("since filter: %d, want 0", n)
	}
	if n := count(dlq.Filter{IDs: ids[1:2]}); n != 1 {
		t.Fatalf("ID filter: %d, want 1", n)
	}
	if n := count(dlq.Filter{Limit: 3}); n != 3 {
		t.Fatalf("limit: %d, want 3", n)
	}

	id := ids[0]
	if _, err := store.ResolveDeadLetter(ctx, id, dlq.Open, dlq.Dropped, "", ""); !errors.Is(err, sink.ErrNoReason) {
		t.Fatalf("resolve without a reason: %v, want sink.ErrNoReason", err)
	}
	if _, err := store.ResolveDeadLetter(ctx, 1<<40, dlq.Open, dlq.Dropped, "r", ""); !errors.Is(err, sink.ErrNotFound) {
		t.Fatalf("resolve of an unknown id: %v, want sink.ErrNotFound", err)
	}
	d, err := store.ResolveDeadLetter(ctx, id, dlq.Open, dlq.Redriving, "sinktest: redrive", "")
	if err != nil || d.State != dlq.Redriving {
		t.Fatalf("open → redriving: %+v %v", d, err)
	}
	// A second redrive of the same row is refused: it is no longer open.
	if _, err := store.ResolveDeadLetter(ctx, id, dlq.Open, dlq.Redriving, "sinktest: again", ""); !errors.Is(err, dlq.ErrState) {
		t.Fatalf("second redrive: %v, want dlq.ErrState", err)
	}
	if d, err = store.ResolveDeadLetter(ctx, id, dlq.Redriving, dlq.Redriven, "sinktest: redrive", "produced at t/1@9"); err != nil || d.State != dlq.Redriven {
		t.Fatalf("redriving → redriven: %+v %v", d, err)
	}
	audit, err := store.DeadLetterAudit(ctx, id)
	if err != nil || len(audit) != 2 || audit[0].From != dlq.Open || audit[1].To != dlq.Redriven ||
		audit[1].Detail != "produced at t/1@9" || audit[0].ID != id || audit[0].At.IsZero() || audit[1].Seq <= audit[0].Seq {
		t.Fatalf("audit %+v %v", audit, err)
	}
	if n := count(dlq.Filter{States: []dlq.State{dlq.Open}}); n != 3 {
		t.Fatalf("open: %d, want 3", n)
	}
	if n := count(dlq.Filter{NotMirrored: true}); n != 4 {
		t.Fatalf("not mirrored: %d, want 4", n)
	}
	if err := store.MarkMirrored(ctx, ids[:2]); err != nil {
		t.Fatal(err)
	}
	if n := count(dlq.Filter{NotMirrored: true}); n != 2 {
		t.Fatalf("not mirrored after marking two: %d, want 2", n)
	}
}

// testDeadLetterAfterGap: a dead letter above the checkpoint is stored and
// moves NextOffset past it, as Apply accepts offsets with gaps: with
// read_committed consumers, transaction markers, aborted records and
// compaction leave offsets with no record, and a poison record right after
// such a gap must not stall its partition.
func (c *suite[Tx]) testDeadLetterAfterGap(t *testing.T) {
	s := c.h.Open(t)
	dl, ok := s, s.Features().DeadLetters
	if !ok {
		t.Skip("sinktest: the sink does not declare Features.DeadLetters")
	}
	ctx := t.Context()
	scope := scopeFor(t)
	a := tokenFor(scope, 1, "a")
	c.claim(t, s, a)
	c.apply(t, s, a, []int64{0}, c.putEffect(t, "k", []int64{0}, "v"))
	// Offset 1 is a commit marker: the poison record is at 2.
	res, err := dl.DeadLetter(ctx, a, poison(2))
	if err != nil || !res.Stored || res.ID == 0 || res.NextOffset != 3 {
		t.Fatalf("DeadLetter at 2 with the checkpoint at 1 = %+v, %v; want stored, NextOffset 3", res, err)
	}
	c.mustNext(t, s, a, 3)
	// Its replay, and a dead letter of the gap's offset, are no-ops.
	for _, off := range []int64{2, 1} {
		again, err := dl.DeadLetter(ctx, a, poison(off))
		if err != nil || again.Stored || again.ID != 0 || again.NextOffset != 3 {
			t.Fatalf("DeadLetter at %d below the checkpoint 3 = %+v, %v; want not stored, NextOffset 3", off, again, err)
		}
	}
	// Processing goes on after the dead letter, past another gap.
	if r := c.apply(t, s, a, []int64{4}, c.putEffect(t, "k", []int64{4}, "v")); r.Applied != 1 || r.NextOffset != 5 {
		t.Fatalf("Apply at 4 after the dead letter = %+v, want 1 applied, NextOffset 5", r)
	}
	c.mustGet(t, s, key(t, "k", 4), "v")
	c.mustAbsent(t, s, key(t, "k", 2))
	c.mustNext(t, s, a, 5)
	if store, ok := sink.As[dlq.Store](s); ok {
		got, err := store.DeadLetters(ctx, dlq.Filter{Group: scope.Group})
		if err != nil || len(got) != 1 || got[0].ID != res.ID || got[0].Record.Offset != 2 || got[0].Token != a {
			t.Fatalf("DeadLetters = %+v, %v; want exactly the dead letter at offset 2", got, err)
		}
	}
}
