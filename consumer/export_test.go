package consumer

import (
	"context"
	"time"

	"github.com/workrouter/workrouter/epochs"
)

// SetCommitPace sets the least time between two commits of the committer
// of a Worker made from c (20 ms by default), so that a test can put the
// committer's next tick out of reach. It exists in this package's tests
// only.
func SetCommitPace[Tx any](c *Config[Tx], d time.Duration) { c.commitPace = d }

// SetTopicCheckInterval sets the least time between two checks of whether
// the topic of a Worker made from c exists (minTopicCheckInterval by
// default), so that a test of a missing topic need not wait it out. It
// exists in this package's tests only.
func SetTopicCheckInterval[Tx any](c *Config[Tx], d time.Duration) { c.topicCheckEvery = d }

// SetDiagnoseTimeout sets how long a Worker made from c looks at the
// group to tell a fenced claim from a regression of the epochs (5 s by
// default), so that a test whose member cannot reach the coordinator need
// not wait it out. It exists in this package's tests only.
func SetDiagnoseTimeout[Tx any](c *Config[Tx], d time.Duration) { c.diagnoseTimeout = d }

// PendingKeys returns the keys bound to lanes and the records pending in
// them (KeyConcurrency > 1) of the tenure of w's partition p, and false
// when p has no tenure with lanes. It exists in this package's tests
// only.
func PendingKeys[Tx any](w *Worker[Tx], p int32) (keys, records int, ok bool) {
	w.mu.Lock()
	t := w.tenures[p]
	w.mu.Unlock()
	if t == nil || t.keys == nil {
		return 0, 0, false
	}
	keys, records = t.keys.pending()
	return keys, records, true
}

// ProveMembership makes the proof of membership that w's claim of tok's
// scope makes after a reset (an offset commit as tok's member, at tok's
// epoch) and returns the coordinator's refusal, if any; tok's partition
// need not be w's any more. It exists in this package's tests only.
func ProveMembership[Tx any](ctx context.Context, w *Worker[Tx], tok epochs.Token) error {
	t := &tenure[Tx]{w: w, tok: tok}
	w.mu.Lock()
	if cur := w.tenures[tok.Partition]; cur != nil {
		t.topicID = cur.topicID
	}
	for _, other := range w.tenures { // a partition w no longer holds: the topic's ID from another
		if t.topicID == "" {
			t.topicID = other.topicID
		}
	}
	w.mu.Unlock()
	_, err := w.proveMembership(ctx, t)
	return err
}

// TenureSignals are the channels of one tenure that a test waits on
// instead of sleeping through a window.
type TenureSignals struct {
	// Token is the tenure's fencing token.
	Token epochs.Token
	// Stopping is closed when the tenure is asked to stop after its
	// in-flight batches (a revoke, a release, Close).
	Stopping <-chan struct{}
	// Halted is closed when every lane of the tenure must stop at once
	// (a lane was fenced or stopped); nil on the serial path.
	Halted <-chan struct{}
	// Exited is closed when the tenure's goroutine, and every lane of it,
	// has exited.
	Exited <-chan struct{}
}

// TenureSignalsOf returns the signals of the tenure of w's partition p,
// and false when p has no tenure. It exists in this package's tests only.
func TenureSignalsOf[Tx any](w *Worker[Tx], p int32) (TenureSignals, bool) {
	w.mu.Lock()
	t := w.tenures[p]
	w.mu.Unlock()
	if t == nil {
		return TenureSignals{}, false
	}
	s := TenureSignals{Token: t.tok, Stopping: t.stopCh, Exited: t.done}
	if t.halt != nil {
		s.Halted = t.halt
	}
	return s, true
}

// TopicMissingErrorAfter is how long a topic may be missing before the
// logging observer reports it at ERROR. It exists in this package's tests
// only.
const TopicMissingErrorAfter = topicMissingErrorAfter

// Defaults returns c with its defaults filled in, as New uses it.
func Defaults[Tx any](c Config[Tx]) (Config[Tx], error) { return c.withDefaults() }
