// Package ownsink is the smallest fenced sink that passes the conformance
// suite (sink/sinktest): a key-value map in memory, written to show what a
// backend of the one-door contract must do. The rules it follows, each in
// the one atomic unit of its write (here, one mutex):
//
//   - Claim checks the offered token against the stored holder
//     (sink.Fence.CheckClaim) and the log under the checkpoint
//     (sink.CheckLog) before it stores the new holder;
//   - Apply checks that the token is the holder's, skips replays, runs
//     the effects into a transaction and commits them with the new
//     NextOffset, or nothing;
//   - a batch needing a feature the sink lacks is refused (sink.CheckBatch,
//     sink.CheckDeadLetter): this one declares none.
//
// A real backend does this in its database's transaction, with the holder
// check a condition of the write itself, never a read before it.
package ownsink

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// Tx is the handle an effect writes through: writes are buffered and
// committed with the batch's new checkpoint, or dropped with it.
type Tx struct {
	s      *Sink
	writes map[string]string
}

// Put buffers key=value.
func (tx *Tx) Put(key, value string) { tx.writes[key] = value }

// Get reads key as the transaction sees it.
func (tx *Tx) Get(key string) (string, bool) {
	if v, ok := tx.writes[key]; ok {
		return v, true
	}
	v, ok := tx.s.data[key]
	return v, ok
}

// scope is one partition's fence: its holder, checkpoint and version.
type scope struct {
	holder        epochs.Token
	next, version int64
	topicID       string
	proofRequired bool // after a takeover, every claim proves membership
}

// Sink is the map. The zero value is not usable: call New.
type Sink struct {
	mu     sync.Mutex // the atomic unit of every call
	data   map[string]string
	scopes map[epochs.Scope]*scope
}

// New returns an empty Sink.
func New() *Sink {
	return &Sink{data: map[string]string{}, scopes: map[epochs.Scope]*scope{}}
}

// Features declares none: no dedupe window, no gaps, no dead letters.
func (s *Sink) Features() sink.Features { return sink.Features{} }

// Claim makes tok the holder of its scope and returns the checkpoint.
func (s *Sink) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	if err := tok.Validate(); err != nil {
		return sink.Checkpoint{}, err
	}
	if err := ctx.Err(); err != nil {
		return sink.Checkpoint{}, fmt.Errorf("ownsink: claim %s: %w", tok, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.scopes[tok.Scope()]
	stored, cp, topicID := sink.Fence{Scope: tok.Scope()}, sink.Checkpoint{}, ""
	if sc != nil {
		stored.Holder, stored.NextOffset, stored.TopicID = sc.holder, sc.next, sc.topicID
		stored.Version, stored.ProofRequired = sc.version, sc.proofRequired
		cp.NextOffset, topicID = sc.next, sc.topicID
	}
	takeover, err := stored.CheckClaim(tok, obs) // proven, below an older incarnation
	if err != nil {
		return sink.Checkpoint{}, err
	}
	cp, topicID, err = sink.CheckLog(tok.Scope(), sc != nil, topicID, cp, obs)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	s.scopes[tok.Scope()] = &scope{holder: tok, next: cp.NextOffset, topicID: topicID,
		version: stored.Version + 1, proofRequired: stored.ProofRequired || takeover}
	return cp, nil
}

// Apply runs effect for every record of b above the checkpoint and
// commits their writes with the new checkpoint, if tok holds the scope.
func (s *Sink) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*Tx]) (sink.Result, error) {
	if err := sink.CheckBatch(tok, b, effect, s.Features()); err != nil {
		return sink.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return sink.Result{}, fmt.Errorf("ownsink: apply %s: %w", tok, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.scopes[tok.Scope()]
	if sc == nil || sc.holder != tok {
		var stored epochs.Token
		if sc != nil {
			stored = sc.holder
		}
		return sink.Result{}, &sink.FencedError{Op: sink.OpApply, Stored: stored, Offered: tok}
	}
	tx := &Tx{s: s, writes: map[string]string{}}
	res := sink.Result{NextOffset: sc.next}
	for i, off := range b.Offsets {
		if off < sc.next {
			res.Skipped++ // a replay: applied before
			continue
		}
		if err := effect(ctx, tx, i); err != nil {
			return sink.Result{}, &sink.EffectError{Index: i, Offset: off, Err: err, TxHealthy: true}
		}
		res.Applied++
		res.NextOffset = off + 1
	}
	maps.Copy(s.data, tx.writes)
	sc.next = res.NextOffset
	return res, nil
}

// DeadLetter refuses: the sink stores no dead letters.
func (s *Sink) DeadLetter(_ context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	return sink.DeadLetterResult{}, sink.CheckDeadLetter(tok, rec, s.Features())
}

// Value returns the committed value of key.
func (s *Sink) Value(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[key]
	return v, ok
}
