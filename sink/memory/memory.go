// Package memory is the in-process backend of the workrouter fenced-sink
// contract ([sink.Sink]): a transactional key-value store that keeps, per
// [epochs.Scope], the holder token and NextOffset, and that records its own
// history so tests can check the invariants of docs/design.md#invariants.
//
// It is meant for tests, examples and demos: nothing survives the process.
// A [Sink] passes the conformance suite in sink/sinktest.
//
// # Concurrency
//
// [Sink.Apply] does not hold the sink's lock while it runs effects, so a
// handler that blocks inside Apply never blocks another tenure's
// [Sink.Claim]. It uses optimistic concurrency instead: it reads NextOffset,
// runs the effects against a private write set ([Tx]), and then, in one
// critical section, verifies that the holder is exactly the offered token,
// that NextOffset has not moved and that no key the effects read has
// changed, and only then installs the writes and the new NextOffset. If
// NextOffset or a read key moved, the write set is discarded and the
// effects are run again (they may therefore run more than once, as
// [sink.Effect] allows). The check and the install are one atomic unit.
//
// # History
//
// Every fence decision (accepted or refused claim and apply, and every
// reset) is appended to an ordered log ([Sink.Events]); [Sink.Verify]
// checks invariants F, O and X (docs/design.md#invariants) over it, and
// [Sink.Rejected] counts refusals so that a fault test can assert that its
// fault actually happened.
package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
)

// ErrNoReason is matched by the error [Sink.ResetFence] (and the dead
// letters' ResolveDeadLetter) returns when called with an empty reason: a
// reset lifts the fence and must say why. It is [sink.ErrNoReason].
var ErrNoReason = sink.ErrNoReason

// Compile-time checks of the capabilities a *Sink provides.
var (
	_ sink.Sink[*Tx]       = (*Sink)(nil)
	_ fenceadmin.Lister    = (*Sink)(nil)
	_ fenceadmin.Resetter  = (*Sink)(nil)
	_ fenceadmin.Historian = (*Sink)(nil)

	_ dlq.Store = (*Sink)(nil)
)

// EventKind is the kind of a fence decision recorded in a [Sink]'s history.
type EventKind int

// The kinds of events.
const (
	// Claim is a call to [Sink.Claim].
	Claim EventKind = iota + 1
	// Apply is a call to [Sink.Apply] that reached the fence check.
	Apply
	// Reset is a call to [Sink.ResetFence] that cleared a holder.
	Reset
	// DeadLetter is a call to [Sink.DeadLetter] that reached the fence
	// check; Offsets holds the dead-lettered offset when it was stored.
	DeadLetter
)

// String returns "claim", "apply" or "reset". It may be called from any
// goroutine.
func (k EventKind) String() string {
	switch k {
	case Claim:
		return "claim"
	case Apply:
		return "apply"
	case Reset:
		return "reset"
	case DeadLetter:
		return "dead-letter"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one fence decision in a [Sink]'s history.
type Event struct {
	// Seq is the event's position in the sink-wide log, starting at 1.
	Seq uint64
	// Kind says which operation the event records.
	Kind EventKind
	// Scope is the scope the operation addressed.
	Scope epochs.Scope
	// Token is the offered token (zero for a Reset).
	Token epochs.Token
	// Offsets are the offsets actually applied by an accepted Apply
	// (replayed offsets that were skipped are not listed, nor are
	// duplicates). Nil otherwise.
	Offsets []int64
	// IDs are the command IDs of Offsets (by index; "" for a record
	// without one) for an Apply of a batch with IDs; nil otherwise.
	IDs []string
	// Duplicates are the offsets an accepted Apply did not run
	// because their command ID was already applied.
	Duplicates []int64
	// Accepted reports whether the sink accepted the operation; a refused
	// Claim or Apply was fenced.
	Accepted bool
	// Stored is the holder the sink had when it decided.
	Stored epochs.Token
	// Reason is the reason given to a Reset.
	Reason string
	// NextOffset is the scope's NextOffset returned by an accepted Claim,
	// or kept by a Reset.
	NextOffset int64
	// Done are the done spans above NextOffset of an accepted Claim's
	// checkpoint, or those a Reset kept (fenceadmin.Entry.Done).
	Done []sink.Span
	// At is when the sink recorded the event (informational).
	At time.Time
	// Gapped reports an Apply of a lane's batch ([sink.Batch].From,
	// docs/design.md#gaps) or a lane's DeadLetter ([sink.DeadRecord].Lane):
	// its offsets need not follow the scope's other applies.
	Gapped bool
	// TopicID is the log identity of a claim, or the one a reset left.
	TopicID string
	// Detail is a reset's audited detail.
	Detail string
	// Proven reports an accepted Claim that came with a current proof of
	// membership (fenceadmin.Entry.Proven).
	Proven bool
}

// AuditEntry records one admin reset of a scope's fence.
type AuditEntry struct {
	// Scope is the reset scope.
	Scope epochs.Scope
	// Before is the scope's fence just before the reset.
	Before sink.Fence
	// Reason is the reason the caller gave.
	Reason string
	// Seq is the Seq of the matching Reset [Event].
	Seq uint64
}

// fenceState is the stored fence of one scope.
type fenceState struct {
	holder        epochs.Token
	nextOffset    int64
	topicID       string
	proofRequired bool
	duplicates    int64 // sink.Fence.Duplicates
	// done are the done spans above nextOffset (sink.Fence.Done): with
	// nextOffset, a sink.Checkpoint. Empty for a scope without gaps.
	done []sink.Span
	// gen moves with every accepted claim and reset: the checkpoint only
	// grows between two moves, which the optimistic check of a gapped
	// apply relies on. It is the fence's Version.
	gen uint64
	// cpVer moves with every change of the checkpoint (nextOffset or
	// done), for the optimistic check of a plain apply.
	cpVer uint64
}

// checkpoint returns the scope's checkpoint; its Done shares memory with
// st.done, so s.mu must be held while it is used (Clone it to keep it).
func (st *fenceState) checkpoint() sink.Checkpoint {
	return sink.Checkpoint{NextOffset: st.nextOffset, Done: st.done}
}

// setCheckpoint stores c as the scope's checkpoint. s.mu must be held for
// writing.
func (st *fenceState) setCheckpoint(c sink.Checkpoint) {
	st.nextOffset, st.done = c.NextOffset, c.Done
	st.cpVer++
}

// fence returns st as the sink.Fence of scope.
func (st *fenceState) fence(scope epochs.Scope) sink.Fence {
	return sink.Fence{Scope: scope, Holder: st.holder, NextOffset: st.nextOffset, TopicID: st.topicID,
		ProofRequired: st.proofRequired, Version: int64(st.gen), Done: slices.Clone(st.done), Duplicates: st.duplicates}
}

// entry is the committed state of one key. A deleted key keeps its entry
// (live == false) so that its version still moves and readers notice.
type entry struct {
	val  []byte
	ver  uint64
	live bool
}

// Sink is an in-process fenced sink with a transactional key-value store.
// It implements [sink.Sink] with *[Tx] as the transaction handle and
// every feature (command IDs, gaps, dead letters), and [fenceadmin.Lister],
// [fenceadmin.Resetter], [fenceadmin.Historian] and [dlq.Store]. The zero
// value is not usable: call [New] or
// [NewWithConfig]. All methods are safe for concurrent use by any number
// of goroutines.
type Sink struct {
	mu      sync.RWMutex
	scopes  map[epochs.Scope]*fenceState
	data    map[string]*entry
	version uint64 // version of the last commit that wrote keys
	events  []Event
	// eventIDs holds, by index of events, the IDs of an event that has
	// them (its IDs field is nil in events): packed in one string, so that
	// the history of a million applied IDs is a few thousand objects for
	// the garbage collector to mark, not a million strings.
	eventIDs []packedIDs
	audit    []AuditEntry
	rejected int

	ids    map[epochs.Scope]*idSet // applied command IDs (sink.Features.DedupeWindow)
	window int64                   // their retention horizon, in offsets
	seeds  [2]maphash.Seed         // of the IDs' keys (idKey)
	// scratch holds *applyScratch: the memory of apply calls, reused.
	scratch sync.Pool

	deadLetters []dlq.Letter // by ID (ID = index + 1)
	dlAudit     []dlq.Action
}

// New returns an empty sink with the default configuration (see
// [NewWithConfig]). It may be called from any goroutine.
func New() *Sink {
	return &Sink{
		scopes:  make(map[epochs.Scope]*fenceState),
		data:    make(map[string]*entry),
		ids:     make(map[epochs.Scope]*idSet),
		window:  cmdids.DefaultWindow,
		seeds:   [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		scratch: sync.Pool{New: func() any { return new(applyScratch) }},
	}
}

// record appends an event, assigning its Seq; it copies ev.IDs (into
// eventIDs), so the caller may reuse them. s.mu must be held for writing.
func (s *Sink) record(ev Event) uint64 {
	ev.Seq = uint64(len(s.events)) + 1
	ev.At = time.Now()
	if ev.IDs != nil || len(s.eventIDs) > 0 {
		for len(s.eventIDs) < len(s.events) {
			s.eventIDs = append(s.eventIDs, packedIDs{})
		}
		s.eventIDs = append(s.eventIDs, packIDs(ev.IDs))
		ev.IDs = nil
	}
	s.events = append(s.events, ev)
	if (ev.Kind == Claim || ev.Kind == Apply) && !ev.Accepted {
		s.rejected++
	}
	return ev.Seq
}

// holderOf returns the stored holder of scope (zero if none). s.mu must be
// held.
func (s *Sink) holderOf(scope epochs.Scope) epochs.Token {
	if st := s.scopes[scope]; st != nil {
		return st.holder
	}
	return epochs.Token{}
}

// Features returns the sink's features: command IDs within its dedupe
// window, gaps and dead letters ([sink.Features]). It may be called from
// any goroutine.
func (s *Sink) Features() sink.Features {
	return sink.Features{DedupeWindow: s.window, Gaps: true, DeadLetters: true}
}

// Claim makes tok the holder of its scope and returns the scope's
// checkpoint, following [sink.Sink.Claim]: it fails with a
// *[sink.FencedError] if the stored holder has a greater epoch, or the same
// epoch and another member (unless obs proves a takeover), with a
// *[sink.ProofRequiredError] without a current obs.Proof when the fence
// asks a proof of tok ([sink.Fence.CheckClaim]: after a reset), and with
// a *[sink.LogChangedError] when the log under the checkpoint changed
// ([sink.CheckLog] compares [sink.Checkpoint.End] with obs.LogEnd). A
// refused claim changes nothing; a fenced one is recorded in the history.
// The result shares no memory with the sink. Claim never waits for a
// running Apply. It may be called from any goroutine.
func (s *Sink) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return s.claim(ctx, tok, obs)
}

// claim is Claim.
func (s *Sink) claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	if err := tok.Validate(); err != nil {
		return sink.Checkpoint{}, err
	}
	if err := ctx.Err(); err != nil {
		return sink.Checkpoint{}, fmt.Errorf("memory: claim %s: %w", tok, err)
	}
	scope := tok.Scope()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.scopes[scope]
	var (
		holder epochs.Token
		stored = sink.Fence{Scope: scope}
	)
	if st != nil {
		holder, stored = st.holder, st.fence(scope)
	}
	takeover, err := stored.CheckClaim(tok, obs)
	if err != nil {
		if errors.Is(err, sink.ErrFenced) {
			s.record(Event{Kind: Claim, Scope: scope, Token: tok, Stored: holder})
			return sink.Checkpoint{}, err
		}
		return sink.Checkpoint{}, fmt.Errorf("memory: claim %s: %w", tok, err)
	}
	var (
		storedTopic string
		cp          sink.Checkpoint
	)
	if st != nil {
		storedTopic, cp = st.topicID, st.checkpoint()
	}
	cp, topic, err := sink.CheckLog(scope, st != nil, storedTopic, cp, obs)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	if st == nil {
		st = &fenceState{}
		s.scopes[scope] = st
	}
	if takeover {
		// As a reset of the earlier incarnation's holder, audited, then
		// the claim.
		detail := obs.TakeoverDetail(tok)
		st.gen++
		st.proofRequired = true
		seq := s.record(Event{Kind: Reset, Scope: scope, Accepted: true, Stored: holder, Reason: fenceadmin.TakeoverReason,
			NextOffset: st.nextOffset, TopicID: st.topicID, Detail: detail, Done: slices.Clone(st.done)})
		s.audit = append(s.audit, AuditEntry{Scope: scope, Before: stored, Reason: fenceadmin.TakeoverReason, Seq: seq})
	}
	if cp.NextOffset != st.nextOffset {
		st.cpVer++
	}
	st.holder, st.nextOffset, st.topicID = tok, cp.NextOffset, topic
	st.gen++
	s.record(Event{Kind: Claim, Scope: scope, Token: tok, Accepted: true, Stored: holder, NextOffset: cp.NextOffset, TopicID: topic,
		Done: slices.Clone(cp.Done), Proven: stored.ProvenBy(obs)})
	return cp.Clone(), nil
}

// Apply applies batch b of tok's scope, following [sink.Sink.Apply]:
// records that are done (below NextOffset, or in a done span) are
// skipped, with b.IDs duplicates are found, effect runs for each
// remaining record index in order against a fresh *[Tx], and the writes,
// the applied IDs and the new checkpoint are installed atomically only if
// tok is still exactly the holder at that moment (else a
// *[sink.FencedError] and nothing applied). Effects run without the
// sink's lock held and may be run more than once (see the package
// documentation): a serial batch installs only if the scope's checkpoint
// did not move since its snapshot; a lane's batch (b.From), whose lanes
// run concurrently, if the scope was not claimed or reset since, no
// record it ran became done meanwhile, and the stored IDs still give the
// same duplicate decisions, so that lanes of disjoint offsets and keys
// never make each other run again. A lane's result has the exact
// watermark the install left. A cancelled ctx aborts the call before the
// install, with nothing applied. Apply may be called from any goroutine;
// the effect is called on the calling goroutine.
func (s *Sink) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*Tx]) (sink.Result, error) {
	if err := sink.CheckBatch(tok, b, effect, s.Features()); err != nil {
		return sink.Result{}, err
	}
	return s.apply(ctx, tok, b.Offsets, b.From, b.IDs, effect)
}

// apply is Apply of the batch (offsets, from, ids): a lane's when from is
// not nil (offsets[i] covers [from[i], offsets[i]+1)).
func (s *Sink) apply(ctx context.Context, tok epochs.Token, offsets, from []int64, ids []string, effect sink.Effect[*Tx]) (sink.Result, error) {
	scope := tok.Scope()
	gapped := from != nil
	sc := s.scratch.Get().(*applyScratch)
	defer s.putScratch(sc)
	var keys []idKey // by index: the key of ids[i] (idKey)
	if ids != nil {
		keys = resize(&sc.keys, len(ids))
		for i, id := range ids {
			if id != "" {
				keys[i] = s.keyOf(id)
			}
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return sink.Result{}, fmt.Errorf("memory: apply %s: %w", tok, err)
		}

		// Snapshot the checkpoint and the applied IDs; refuse early if
		// tok is not the holder (a refusal is safe to decide at any
		// moment).
		s.mu.Lock()
		st := s.scopes[scope]
		if st == nil || !tok.Holds(st.holder) {
			stored := s.holderOf(scope)
			s.record(Event{Kind: Apply, Scope: scope, Token: tok, Stored: stored, Gapped: gapped})
			s.mu.Unlock()
			return sink.Result{}, &sink.FencedError{Op: sink.OpApply, Stored: stored, Offered: tok}
		}
		gen, cpVer := st.gen, st.cpVer
		cp := st.checkpoint()
		first, _ := slices.BinarySearch(offsets, cp.NextOffset)
		var (
			done   []bool // by index: done already (in a span), skipped
			dup    []bool // by index: a duplicate, not run
			hints  []int  // by index: the hint of find for record
			lookup []int  // on a lane: the indexes looked up in the stored IDs
			dupAt  []bool // by index of lookup: the stored IDs' decision
			idVer  uint64
			moves  uint64 // of the stored IDs' index, for hints
		)
		if len(cp.Done) > 0 {
			done = resize(&sc.done, len(offsets))
			for i := first; i < len(offsets); i++ {
				done[i] = cp.Contains(offsets[i])
			}
		}
		if ids != nil {
			// cmdids.Plan, on the IDs' keys: the first occurrence
			// of an ID in the batch is looked up, a later one is a
			// duplicate whatever the store holds. The scope's set is
			// made here if it has none yet, so that the lookups leave
			// hints; an empty set decides as no set.
			dup, hints = resize(&sc.dup, len(offsets)), resize(&sc.hints, len(offsets))
			clear(dup)
			set := s.ids[scope]
			if set == nil {
				set = &idSet{window: s.window}
				s.ids[scope] = set
			}
			set.reserve(len(offsets) - first)
			idVer, moves = set.ver, set.moves
			sc.touched = set.touch(keys[first:])
			sc.seen.reset(len(offsets)-first, len(offsets))
			lookup, dupAt = sc.lookup[:0], sc.dupAt[:0]
			for i := first; i < len(offsets); i++ {
				if ids[i] == "" {
					continue
				}
				k := keys[i]
				if sc.seen.add(keys, i) {
					dup[i] = true
					continue
				}
				p, hint, ok := set.find(k)
				d := ok && cmdids.IsDuplicate(offsets[i], p, s.window)
				dup[i], hints[i] = d, hint
				if gapped {
					lookup, dupAt = append(lookup, i), append(dupAt, d)
				}
			}
			sc.lookup, sc.dupAt = lookup, dupAt
		}
		s.mu.Unlock()
		skip := func(i int) bool { return done != nil && done[i] }

		tx := &Tx{s: s}
		var effErr error
		for i := first; i < len(offsets); i++ {
			if err := ctx.Err(); err != nil {
				return sink.Result{}, fmt.Errorf("memory: apply %s: %w", tok, err)
			}
			if skip(i) || dup != nil && dup[i] {
				continue
			}
			if err := effect(ctx, tx, i); err != nil {
				effErr = &sink.EffectError{Index: i, Offset: offsets[i], Err: err, TxHealthy: true} // no I/O: always the handler's
				break
			}
		}
		tx.done = true

		s.mu.Lock()
		if effErr != nil {
			// The effect may have failed because it saw writes of
			// several commits; if its reads are stale, run it again on
			// a consistent view instead of reporting the failure.
			stale := !s.validLocked(tx)
			s.mu.Unlock()
			if stale {
				continue
			}
			return sink.Result{}, effErr
		}
		if err := ctx.Err(); err != nil {
			s.mu.Unlock()
			return sink.Result{}, fmt.Errorf("memory: apply %s: %w", tok, err)
		}
		st = s.scopes[scope]
		if st == nil || !tok.Holds(st.holder) {
			stored := s.holderOf(scope)
			s.record(Event{Kind: Apply, Scope: scope, Token: tok, Stored: stored, Gapped: gapped})
			s.mu.Unlock()
			return sink.Result{}, &sink.FencedError{Op: sink.OpApply, Stored: stored, Offered: tok}
		}
		set := s.ids[scope] // not nil if ids is not: made by the snapshot, never removed
		var current bool
		if gapped {
			current = st.gen == gen && s.gapSnapshotCurrentLocked(st, set, offsets, keys, first, done, lookup, dupAt)
		} else {
			current = st.cpVer == cpVer && (ids == nil || set.ver == idVer)
		}
		if !current || !s.validLocked(tx) {
			s.mu.Unlock()
			continue // conflict: discard the write set and run again
		}
		s.installLocked(tx)
		var (
			applied    = make([]int64, 0, len(offsets)-first)
			appliedIDs []string
			appliedAt  []int // by index of applied: the record's index
			dups       []int64
			res        sink.Result
		)
		if ids != nil {
			appliedIDs, appliedAt = sc.appliedIDs[:0], sc.appliedAt[:0] // record copies the IDs
			if appliedIDs == nil {
				appliedIDs = make([]string, 0, len(offsets)-first) // not nil: an event of a batch with IDs has IDs
			}
		}
		cp = st.checkpoint()
		for i := first; i < len(offsets); i++ {
			if skip(i) {
				res.Skipped++
				continue
			}
			if gapped {
				cp.Add(from[i], offsets[i]+1)
			}
			if dup != nil && dup[i] {
				dups = append(dups, offsets[i])
				res.Duplicates = append(res.Duplicates, i)
				continue
			}
			applied = append(applied, offsets[i])
			if ids != nil {
				appliedIDs, appliedAt = append(appliedIDs, ids[i]), append(appliedAt, i)
			}
		}
		res.Skipped += first
		if !gapped && first < len(offsets) {
			cp.Raise(offsets[len(offsets)-1] + 1)
		}
		if gapped || first < len(offsets) {
			st.setCheckpoint(cp)
		}
		st.duplicates += int64(len(dups))
		if ids != nil {
			sc.appliedIDs, sc.appliedAt = appliedIDs, appliedAt
		}
		if ids != nil && first < len(offsets) {
			for k, o := range applied {
				if appliedIDs[k] != "" {
					i := appliedAt[k]
					set.record(keys[i], o, hints[i], moves)
				}
			}
			set.prune(cmdids.Horizon(st.nextOffset, s.window))
			set.ver++
		}
		s.record(Event{Kind: Apply, Scope: scope, Token: tok, Offsets: applied, IDs: appliedIDs, Duplicates: dups, Accepted: true, Stored: st.holder, Gapped: gapped})
		res.Applied, res.NextOffset = len(applied), st.nextOffset
		s.mu.Unlock()
		return res, nil
	}
}

// gapSnapshotCurrentLocked reports whether what a gapped apply decided on
// its snapshot still holds: no record from index first on that was not
// done then is done now (another call applied it meanwhile), and the
// stored IDs give the same duplicate decision for every looked-up record
// (lookup and dupAt are what the snapshot saw). The caller checked that
// the scope was neither claimed nor reset since, so what was done then is
// done now. s.mu must be held.
func (s *Sink) gapSnapshotCurrentLocked(st *fenceState, set *idSet, offsets []int64, keys []idKey, first int, done []bool, lookup []int, dupAt []bool) bool {
	cp := st.checkpoint()
	for i := first; i < len(offsets); i++ {
		if (done == nil || !done[i]) && cp.Contains(offsets[i]) {
			return false
		}
	}
	if keys == nil || set == nil {
		return true
	}
	for k, i := range lookup {
		p, ok := set.get(keys[i])
		now := ok && cmdids.IsDuplicate(offsets[i], p, s.window)
		if was := dupAt[k]; now != was {
			return false
		}
	}
	return true
}

// validLocked reports whether every read of tx is still current. s.mu must
// be held.
func (s *Sink) validLocked(tx *Tx) bool {
	for k, r := range tx.reads {
		if s.versionLocked(k) != r.ver {
			return false
		}
	}
	for prefix, keys := range tx.scans {
		if !slices.Equal(s.keysLocked(prefix), keys) {
			return false
		}
	}
	return true
}

// versionLocked returns the version of key, 0 if it was never written.
// s.mu must be held.
func (s *Sink) versionLocked(key string) uint64 {
	if e := s.data[key]; e != nil {
		return e.ver
	}
	return 0
}

// installLocked commits the write set of tx. s.mu must be held for writing.
func (s *Sink) installLocked(tx *Tx) {
	if len(tx.writes) == 0 {
		return
	}
	s.version++
	for k, w := range tx.writes {
		e := s.data[k]
		if e == nil {
			e = &entry{}
			s.data[k] = e
		}
		e.ver = s.version
		e.live = !w.deleted
		e.val = w.val
	}
}

// keysLocked returns the sorted live committed keys with prefix. s.mu must
// be held.
func (s *Sink) keysLocked(prefix string) []string {
	var keys []string
	for k, e := range s.data {
		if e.live && strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// Get returns a copy of the committed value of key and whether it exists.
// It may be called from any goroutine.
func (s *Sink) Get(key string) ([]byte, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.data[key]
	if e == nil || !e.live {
		return nil, false
	}
	return slices.Clone(e.val), true
}

// Keys returns the committed keys that start with prefix, sorted. It may be
// called from any goroutine.
func (s *Sink) Keys(prefix string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.keysLocked(prefix)
}

// Fences returns the stored fence of every scope the sink knows, sorted by
// group, topic and partition. It implements [fenceadmin.Lister] and may be called
// from any goroutine.
func (s *Sink) Fences(ctx context.Context) ([]sink.Fence, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: fences: %w", err)
	}
	s.mu.RLock()
	fences := make([]sink.Fence, 0, len(s.scopes))
	for scope, st := range s.scopes {
		fences = append(fences, st.fence(scope))
	}
	s.mu.RUnlock()
	slices.SortFunc(fences, func(a, b sink.Fence) int { return compareScopes(a.Scope, b.Scope) })
	return fences, nil
}

// ResetFence resets a scope's fence following [fenceadmin.Resetter]: a
// compare-and-set on req.Expect that clears the holder, keeps or moves
// NextOffset and the topic ID, requires a proof of membership from every
// later claim (it stores [fenceadmin.AfterReset]), and records req.Reason in the audit trail ([Sink.Audit]) and
// the history. It fails with an error matching [ErrNoReason] for an empty
// reason, [sink.ErrNotFound] for a scope the sink does not know and
// [fenceadmin.ErrConflict] if the fence is not req.Expect. It may be called
// from any goroutine, but only by an operator: it lifts the fence.
func (s *Sink) ResetFence(ctx context.Context, req fenceadmin.ResetRequest) (sink.Fence, error) {
	scope := req.Scope
	if err := scope.Validate(); err != nil {
		return sink.Fence{}, err
	}
	if strings.TrimSpace(req.Reason) == "" {
		return sink.Fence{}, fmt.Errorf("memory: reset %s: %w", scope, ErrNoReason)
	}
	if err := ctx.Err(); err != nil {
		return sink.Fence{}, fmt.Errorf("memory: reset %s: %w", scope, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.scopes[scope]
	if st == nil {
		return sink.Fence{}, fmt.Errorf("memory: reset %s: %w", scope, sink.ErrNotFound)
	}
	before := st.fence(scope)
	if e := req.Expect; e.Holder != before.Holder || e.NextOffset != before.NextOffset || e.TopicID != before.TopicID {
		return sink.Fence{}, fmt.Errorf("memory: reset %s: %w: expected holder %s at %d on %q, found %s at %d on %q", scope, fenceadmin.ErrConflict,
			e.Holder, e.NextOffset, e.TopicID, before.Holder, before.NextOffset, before.TopicID)
	}
	after := fenceadmin.AfterReset(before, req)
	st.holder, st.topicID, st.proofRequired = after.Holder, after.TopicID, after.ProofRequired
	st.setCheckpoint(sink.Checkpoint{NextOffset: after.NextOffset, Done: after.Done})
	st.gen++
	seq := s.record(Event{Kind: Reset, Scope: scope, Accepted: true, Stored: before.Holder, Reason: req.Reason,
		NextOffset: st.nextOffset, TopicID: st.topicID, Detail: req.Detail, Done: slices.Clone(after.Done)})
	s.audit = append(s.audit, AuditEntry{Scope: scope, Before: before, Reason: req.Reason, Seq: seq})
	return before, nil
}

// Events returns a copy of the sink's history in Seq order. It may be
// called from any goroutine.
func (s *Sink) Events() []Event {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Event, len(s.events))
	for i, ev := range s.events {
		ev.Offsets = slices.Clone(ev.Offsets)
		if i < len(s.eventIDs) {
			ev.IDs = s.eventIDs[i].unpack()
		}
		ev.Duplicates = slices.Clone(ev.Duplicates)
		out[i] = ev
	}
	return out
}

// Audit returns a copy of the reset audit trail in order. It may be called
// from any goroutine.
func (s *Sink) Audit() []AuditEntry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.audit)
}

// Rejected returns how many claims and applies the sink has fenced. Fault
// tests use it to assert that the fault they injected really happened. It
// may be called from any goroutine.
func (s *Sink) Rejected() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rejected
}

// Verify checks invariants F, O and X (docs/design.md#invariants) over the sink's
// history (see [VerifyError] for what each means here). It returns nil, or
// a *[VerifyError] listing every violation. It may be called from any
// goroutine, also while the sink is in use (it checks a snapshot).
func (s *Sink) Verify() error {
	if v := verifyEvents(s.Events()); len(v) > 0 {
		return &VerifyError{Violations: v}
	}
	return nil
}

// compareScopes orders scopes by group, topic, partition.
func compareScopes(a, b epochs.Scope) int {
	return cmp.Or(
		strings.Compare(a.Group, b.Group),
		strings.Compare(a.Topic, b.Topic),
		cmp.Compare(a.Partition, b.Partition),
	)
}
