package postgres

import (
	"sync"

	"github.com/workrouter/workrouter/epochs"
)

// The view: what a tenure's last apply through this Sink left in its
// scope's fence row (NextOffset and the IDs version), so that its next
// apply skips the early read. Such an apply (applyAttempt with a view)
// runs its effects in a transaction that begins at their first statement
// (laneTx: BEGIN goes in one round trip with it) and ends with the
// checked advance and COMMIT, whose WHERE requires the holder, the
// NextOffset and IDs version of the view and a scope without gaps: the
// authoritative check, in the transaction, as on every apply. A view
// that is no longer the fence (another process claimed, applied or
// reset the scope) fails that check; the attempt rolls back, reads the
// fence (afterFailedCheck) and, if the tenure still holds the scope,
// runs again on the early read. What the early read alone gave is lost
// in that case only: a tenure fenced by another process since its last
// apply runs its batch's effects (rolled back, never committed) before
// it learns it; a tenure this Sink has no view of, or one superseded
// through this Sink, is refused before any effect runs. An effect that
// fails on a view (a duplicate key the new holder wrote, say) is decided
// on a read too: the attempt rolls back and reads the fence, and a
// superseded tenure gets its FencedError, not the effect's error.
//
// A view is dropped on every path that may leave it stale through this
// Sink: a claim, a reset, a dead letter, a lane's apply (which makes the
// scope gapped) and every apply that did not commit. A drop also moves
// the scope's generation, and an apply records its view only if the
// generation it read before it began is still the scope's: an apply that
// committed just before a racing claim through this Sink must not record
// its view after that claim dropped the scope's (the superseded tenure's
// next batch would then run its effects before the checked advance
// refused it, instead of being refused before any effect runs).

// view is the fence row as tok's last committed apply left it.
type view struct {
	tok        epochs.Token
	next       int64
	idsVersion int64
}

// views is a Sink's views, per scope. The zero value is ready.
type views struct {
	mu   sync.Mutex
	m    map[epochs.Scope]view
	gens map[epochs.Scope]uint64 // moved by every drop
}

// gen returns sc's generation, to be given to set by an apply that reads
// it before it begins.
func (v *views) gen(sc epochs.Scope) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.gens[sc]
}

// get returns tok's view, if this Sink holds one.
func (v *views) get(tok epochs.Token) (view, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	w, ok := v.m[tok.Scope()]
	return w, ok && w.tok == tok
}

// set records w as its scope's view if the scope's generation is still
// gen (no drop since the apply began).
func (v *views) set(w view, gen uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.gens[w.tok.Scope()] != gen {
		return
	}
	if v.m == nil {
		v.m = map[epochs.Scope]view{}
	}
	v.m[w.tok.Scope()] = w
}

// drop forgets sc's view and moves its generation.
func (v *views) drop(sc epochs.Scope) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.m, sc)
	if v.gens == nil {
		v.gens = map[epochs.Scope]uint64{}
	}
	v.gens[sc]++
}
