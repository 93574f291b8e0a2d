package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// ClaimGapped is [Sink.Claim] that returns the scope's whole checkpoint:
// the watermark and the done spans above it, following
// [sink.GapApplier]. The log check compares [sink.Checkpoint.End] with
// obs.LogEnd ([sink.CheckLogGaps]); Claim itself checks the same way, so
// a plain claim of a gapped scope refuses the same truncations. The
// result shares no memory with the sink. It may be called from any
// goroutine.
func (s *Sink) ClaimGapped(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return s.claim(ctx, tok, obs, true)
}

// ApplyGapped applies a lane's batch of tok's scope, following
// [sink.GapApplier]: records whose offset the checkpoint contains are
// skipped, duplicates are found as [Sink.ApplyOnce] finds them when b.IDs
// is not nil, effect runs for each remaining record index in order
// against a fresh *[Tx], and the writes and the spans
// [b.From[i], b.Offsets[i]+1) are installed atomically only if tok is
// still exactly the holder (else a *[sink.FencedError] and nothing
// applied). Effects run without the sink's lock, so any number of a
// holder's ApplyGapped calls run their effects concurrently; the install
// runs them again only if another call applied one of the same offsets,
// changed a key they read, or changed the duplicate decision of one of
// their IDs, or if the scope was claimed or reset meanwhile (see the
// package documentation). The result's NextOffset is the exact watermark
// the install left. It may be called from any goroutine; the effect is
// called on the calling goroutine.
func (s *Sink) ApplyGapped(ctx context.Context, tok epochs.Token, b sink.GapBatch, effect sink.Effect[*Tx]) (sink.ApplyOnceResult, error) {
	if err := sink.CheckGapBatch(tok, b, effect); err != nil {
		return sink.ApplyOnceResult{}, err
	}
	return s.apply(ctx, tok, b.Offsets, b.From, b.IDs, effect)
}

// DeadLetterGapped stores rec as a dead letter of tok's scope for a lane,
// following [sink.GapApplier], in one critical section: a token that is
// not exactly the holder is fenced, a record whose offset the checkpoint
// contains stores nothing (Stored false), and any other record is stored
// and [from, rec.Offset+1) is added to the checkpoint. from must be in
// [0, rec.Offset], or it fails with [sink.ErrBadBatch]. It may be called
// from any goroutine.
func (s *Sink) DeadLetterGapped(ctx context.Context, tok epochs.Token, from int64, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	if err := sink.CheckDeadLetter(tok, rec); err != nil {
		return sink.DeadLetterResult{}, err
	}
	if from < 0 || from > rec.Offset {
		return sink.DeadLetterResult{}, fmt.Errorf("memory: dead letter %s@%d: %w: from %d is not in [0, %d]", tok, rec.Offset, sink.ErrBadBatch, from, rec.Offset)
	}
	return s.deadLetter(ctx, tok, from, true, rec)
}

// deadLetter is DeadLetter, and DeadLetterGapped (covering
// [from, rec.Offset+1)) when gapped.
func (s *Sink) deadLetter(ctx context.Context, tok epochs.Token, from int64, gapped bool, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	if err := ctx.Err(); err != nil {
		return sink.DeadLetterResult{}, fmt.Errorf("memory: dead letter %s@%d: %w", tok, rec.Offset, err)
	}
	scope := tok.Scope()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.scopes[scope]
	if st == nil || !tok.Holds(st.holder) {
		stored := s.holderOf(scope)
		s.record(Event{Kind: DeadLetter, Scope: scope, Token: tok, Stored: stored, Gapped: gapped})
		return sink.DeadLetterResult{}, &sink.FencedError{Op: sink.OpDeadLetter, Stored: stored, Offered: tok}
	}
	cp := st.checkpoint()
	if cp.Contains(rec.Offset) {
		return sink.DeadLetterResult{NextOffset: st.nextOffset}, nil
	}
	rec.Key, rec.Value, rec.Headers = slices.Clone(rec.Key), slices.Clone(rec.Value), slices.Clone(rec.Headers)
	if rec.TopicID == "" {
		rec.TopicID = st.topicID
	}
	d := sink.DeadLetter{ID: int64(len(s.deadLetters)) + 1, Scope: scope, Record: rec, Token: tok, At: time.Now(), State: sink.DeadLetterOpen}
	s.deadLetters = append(s.deadLetters, d)
	if gapped {
		cp.Add(from, rec.Offset+1)
	} else {
		cp.Raise(rec.Offset + 1)
	}
	st.setCheckpoint(cp)
	s.record(Event{Kind: DeadLetter, Scope: scope, Token: tok, Offsets: []int64{rec.Offset}, Accepted: true, Stored: st.holder, Gapped: gapped})
	return sink.DeadLetterResult{ID: d.ID, Stored: true, NextOffset: st.nextOffset}, nil
}
