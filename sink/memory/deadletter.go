package memory

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// DeadLetter stores rec as a dead letter of tok's scope and moves its
// checkpoint past it, following [sink.Sink.DeadLetter], in one critical
// section: a token that is not exactly the holder is fenced, a replay
// (rec.Offset done: below NextOffset, or in a done span) stores nothing,
// and any other record (after a gap too) is stored; then NextOffset
// becomes rec.Offset+1 ([sink.Checkpoint.Raise]: the done spans below it
// are dropped), or, for a lane's record, [rec.From, rec.Offset+1) is
// added to the checkpoint. It may be called from any goroutine.
func (s *Sink) DeadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	if err := sink.CheckDeadLetter(tok, rec, s.Features()); err != nil {
		return sink.DeadLetterResult{}, err
	}
	return s.deadLetter(ctx, tok, rec)
}

// DeadLetters returns the dead letters that match f, by ID, following
// [dlq.Store]. It may be called from any goroutine.
func (s *Sink) DeadLetters(ctx context.Context, f dlq.Filter) ([]dlq.Letter, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: dead letters: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []dlq.Letter
	for _, d := range s.deadLetters {
		if f.Match(d) {
			out = append(out, d)
			if f.Limit > 0 && len(out) == f.Limit {
				break
			}
		}
	}
	return out, nil
}

// ResolveDeadLetter moves a dead letter between states and audits it,
// following [dlq.Store]. It may be called from any goroutine.
func (s *Sink) ResolveDeadLetter(ctx context.Context, id int64, from, to dlq.State, reason, detail string) (dlq.Letter, error) {
	if err := from.CheckResolve(to, strings.TrimSpace(reason)); err != nil {
		return dlq.Letter{}, fmt.Errorf("memory: dead letter %d: %w", id, err)
	}
	if err := ctx.Err(); err != nil {
		return dlq.Letter{}, fmt.Errorf("memory: dead letter %d: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id < 1 || id > int64(len(s.deadLetters)) {
		return dlq.Letter{}, fmt.Errorf("memory: dead letter %d: %w", id, sink.ErrNotFound)
	}
	d := &s.deadLetters[id-1]
	if d.State != from {
		return *d, fmt.Errorf("memory: dead letter %d is %s, not %s: %w", id, d.State, from, dlq.ErrState)
	}
	d.State = to
	s.dlAudit = append(s.dlAudit, dlq.Action{Seq: int64(len(s.dlAudit)) + 1, ID: id, From: from, To: to, Reason: reason, Detail: detail, At: time.Now()})
	return *d, nil
}

// DeadLetterAudit returns dead letter id's audit rows, following
// [dlq.Store]. It may be called from any goroutine.
func (s *Sink) DeadLetterAudit(ctx context.Context, id int64) ([]dlq.Action, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: dead letter %d audit: %w", id, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []dlq.Action
	for _, a := range s.dlAudit {
		if a.ID == id {
			out = append(out, a)
		}
	}
	return out, nil
}

// MarkMirrored records that dead letters ids were published to the DLQ
// topic, following [dlq.Store]. It may be called from any
// goroutine.
func (s *Sink) MarkMirrored(ctx context.Context, ids []int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: mark mirrored: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if id >= 1 && id <= int64(len(s.deadLetters)) {
			s.deadLetters[id-1].Mirrored = true
		}
	}
	return nil
}
