package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
)

// MisroutePolicy says what a Worker does with a misrouted record: one
// whose key Config.Partitioner maps to another partition than the one the
// record arrived on (docs/design.md#hazard-11). Such a record was written
// by a producer that partitions keys differently, so the same key may also
// sit on another partition, where another worker applies it concurrently
// and out of order.
type MisroutePolicy int

const (
	// MisrouteApply (the default) applies the record like any other, and
	// reports it: a Misrouted event, which the logging observer logs at
	// WARN with the key and both partitions, and which
	// workrouter_consumer_misrouted_total counts.
	MisrouteApply MisroutePolicy = iota
	// MisrouteRefuse reports the record the same way and refuses to apply
	// it: it is handled as an undecodable record (PoisonPolicy.Undecodable,
	// reason ReasonMisrouted): dead-lettered at once by default
	// (docs/design.md#dead-letters), or, with PoisonStall or a sink that
	// stores no dead letters, the partition stalls (retried with backoff
	// and reported as Stalled) until the record is dealt with. Nothing is
	// skipped silently.
	MisrouteRefuse
)

// String returns "apply", "refuse" or "MisroutePolicy(n)".
func (p MisroutePolicy) String() string {
	switch p {
	case MisrouteApply:
		return "apply"
	case MisrouteRefuse:
		return "refuse"
	}
	return fmt.Sprintf("MisroutePolicy(%d)", int(p))
}

// ErrMisrouted is matched by the error a record fails with under
// MisrouteRefuse: its key maps to another partition under
// Config.Partitioner.
var ErrMisrouted = errors.New("consumer: record's key maps to another partition (a producer partitions keys differently)")

// routeCheck finds misrouted records. It is shared by the Worker's
// partition goroutines and its lag loop.
type routeCheck struct {
	partitioner envelope.Partitioner
	policy      MisroutePolicy

	// counts are the partition counts of the topic seen so far (none:
	// not checked yet), a slice never written once stored: check reads it
	// for every record of every partition without a lock (a mutex there
	// was the Worker's most contended one); seeCount replaces it under mu.
	mu     sync.Mutex
	counts atomic.Pointer[[]int32]
}

// seeCount records a partition count of the topic read from the broker.
// It is called by New and by the lag loop.
func (c *routeCheck) seeCount(n int32) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old []int32
	if p := c.counts.Load(); p != nil {
		old = *p
	}
	if !slices.Contains(old, n) {
		counts := append(slices.Clip(old), n) // a new array: old may be read meanwhile
		c.counts.Store(&counts)
	}
}

// check returns the partition r's key maps to and the count that mapping
// used if r is misrouted, and ok true if it is not (or cannot be judged: no
// count known yet, no key). A record is misrouted only if its key maps
// elsewhere under every partition count seen, so that records written
// before the topic grew are not flagged.
func (c *routeCheck) check(r *kgo.Record) (expected, count int32, ok bool) {
	if len(r.Key) == 0 {
		return 0, 0, true
	}
	p := c.counts.Load()
	if p == nil {
		return 0, 0, true
	}
	for _, n := range *p {
		if r.Partition >= n {
			continue
		}
		e := c.partitioner.Partition(r.Key, n)
		if e == r.Partition {
			return 0, 0, true
		}
		expected, count = e, n
	}
	return expected, count, count == 0
}

// checkRoute reports r as a Misrouted event if it is misrouted, and
// returns the error its effect must fail with under MisrouteRefuse (nil
// otherwise). It is called by the tenure's goroutine.
func (t *tenure[Tx]) checkRoute(r *kgo.Record) error {
	rc := t.w.route
	expected, count, ok := rc.check(r)
	if ok {
		return nil
	}
	refuse := rc.policy == MisrouteRefuse
	t.w.obs.emit(Misrouted{Token: t.tok, Offset: r.Offset, Key: r.Key, Expected: expected,
		Partitions: count, Partitioner: rc.partitioner, Refused: refuse})
	if !refuse {
		return nil
	}
	return fmt.Errorf("%w: offset %d, key %q is on partition %d but %s maps it to partition %d of %d",
		ErrMisrouted, r.Offset, r.Key, r.Partition, rc.partitioner, expected, count)
}

// Misrouted: a record's key maps, under Config.Partitioner, to another
// partition than the one it arrived on: some producer of the topic
// partitions keys differently (librdkafka's default CRC32 against
// workrouter's murmur2, for instance; docs/design.md#hazard-11). Expected
// is the partition Partitioner maps Key to with Partitions partitions.
// Refused says whether the record was refused (MisrouteRefuse) or applied
// (MisrouteApply). Key is the record's own bytes: an Observer must copy
// it to keep it. Counted in Stats.Misrouted.
type Misrouted struct {
	Token       epochs.Token
	Offset      int64
	Key         []byte
	Expected    int32
	Partitions  int32
	Partitioner envelope.Partitioner
	Refused     bool
}

// KindMisrouted is the Kind of a Misrouted event.
const KindMisrouted = "misrouted"

// Kind returns KindMisrouted.
func (Misrouted) Kind() string { return KindMisrouted }

func (Misrouted) isEvent() {}

// readPartitionCount reads the topic's partition count for the routing
// check. A failure is not fatal: the lag loop reads the count too, and
// records are checked once a count is known.
func (w *Worker[Tx]) readPartitionCount(ctx context.Context) {
	topics, err := kadm.NewClient(w.cl).ListTopics(ctx, w.cfg.Topic)
	if err != nil {
		w.obs.emit(FetchFailed{Topic: w.cfg.Topic, Partition: -1, Err: fmt.Errorf("reading the partition count for the routing check: %w", err)})
		return
	}
	if td, ok := topics[w.cfg.Topic]; ok && td.Err == nil {
		w.route.seeCount(int32(len(td.Partitions)))
	}
}
