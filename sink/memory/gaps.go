package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// deadLetter is DeadLetter: a lane's record (rec.Lane) covers
// [rec.From, rec.Offset+1).
func (s *Sink) deadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	gapped := rec.Lane
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
	d := dlq.Letter{ID: int64(len(s.deadLetters)) + 1, Scope: scope, Record: rec, Token: tok, At: time.Now(), State: dlq.Open}
	s.deadLetters = append(s.deadLetters, d)
	if gapped {
		cp.Add(rec.From, rec.Offset+1)
	} else {
		cp.Raise(rec.Offset + 1)
	}
	st.setCheckpoint(cp)
	s.record(Event{Kind: DeadLetter, Scope: scope, Token: tok, Offsets: []int64{rec.Offset}, Accepted: true, Stored: st.holder, Gapped: gapped})
	return sink.DeadLetterResult{ID: d.ID, Stored: true, NextOffset: st.nextOffset}, nil
}
