package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/sink"
)

// adjustOffsets runs after onAssigned and before fetching starts: it claims
// every partition about to be fetched (docs/design.md#claim) and returns the
// sink's NextOffset as the fetch position. Partitions whose claim is
// fenced are removed, so they are never fetched in this tenure.
func (w *Worker[Tx]) adjustOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	<-w.ready
	parts := offsets[w.cfg.Topic]
	type outcome struct {
		next int64
		err  error
	}
	results := make(map[int32]outcome, len(parts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p := range parts {
		w.mu.Lock()
		t := w.tenures[p]
		w.mu.Unlock()
		if t == nil {
			// Assigned in a session whose onAssigned we did not see: capture now.
			w.onAssigned(ctx, w.cl, map[string][]int32{w.cfg.Topic: {p}})
			w.mu.Lock()
			t = w.tenures[p]
			w.mu.Unlock()
		}
		wg.Go(func() {
			next, err := w.claim(ctx, t)
			mu.Lock()
			results[p] = outcome{next, err}
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for p, r := range results {
		w.mu.Lock()
		t := w.tenures[p]
		w.mu.Unlock()
		if r.err != nil || t == nil {
			delete(parts, p)
			continue
		}
		committed := parts[p].EpochOffset().Offset
		parts[p] = kgo.NewOffset().At(r.next).WithEpoch(-1)
		t.start(r.next)
		if r.next > 0 && r.next != committed {
			// The sink is ahead of (or behind) Kafka's commit, e.g. a
			// worker died between its sink commit and its Kafka commit.
			// Commit the sink's checkpoint now, so that lag reaches zero
			// even if no new record ever arrives on this partition.
			t.appliedNext.Store(r.next)
			t.appliedEpoch.Store(-1)
			w.markApplied(t, r.next, -1)
		}
	}
	return offsets, nil
}

// claim claims t's scope, retrying failures other than fencing until ctx
// is done.
func (w *Worker[Tx]) claim(ctx context.Context, t *tenure[Tx]) (int64, error) {
	backoff := w.cfg.RetryBackoff
	var since time.Time
	for attempt := 1; ; attempt++ {
		start := time.Now()
		next, err := w.cfg.Sink.Claim(ctx, t.tok, sink.Observed{})
		if err == nil {
			w.claims.Add(1)
			w.mu.Lock()
			current := w.tenures[t.tok.Partition] == t && !t.fenced.Load()
			w.mu.Unlock()
			if current {
				w.obs.emit(Claimed{Token: t.tok, NextOffset: next})
			}
			return next, nil
		}
		if errors.Is(err, sink.ErrFenced) {
			err = w.diagnose(ctx, err)
			w.fencedClaims.Add(1)
			t.markFenced()
			w.obs.emit(Fenced{Token: t.tok, Op: sink.OpClaim, Err: err})
			return 0, err
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if attempt == 1 {
			since = start
		}
		w.retries.Add(1)
		w.obs.emit(Stalled{Token: t.tok, Op: sink.OpClaim, Attempt: attempt, Since: since, Backoff: backoff,
			Cause: CauseSink, Err: err, Duration: time.Since(start)})
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		backoff = min(2*backoff, w.cfg.MaxRetryBackoff)
	}
}

// diagnose tells a zombie's stale claim from a group whose epochs went
// backwards (docs/design.md#hazards, hazard 3). A claim refused because the
// sink has seen a higher epoch is a regression when the coordinator cannot
// have issued that epoch: under KIP-848 the group epoch is below it; under
// the classic protocol this member is in the group but the stored holder
// is not.
func (w *Worker[Tx]) diagnose(ctx context.Context, err error) error {
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored.Epoch <= fe.Offered.Epoch {
		return err
	}
	adm := kadm.NewClient(w.cl) // shares the client; never closed here
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch w.cfg.Protocol {
	case KIP848:
		groups, derr := adm.DescribeConsumerGroups(dctx, w.cfg.Group)
		if derr != nil {
			return err
		}
		g, ok := groups[w.cfg.Group]
		if ok && g.Err == nil && g.Epoch < fe.Stored.Epoch {
			return &EpochRegressedError{Fenced: fe, GroupEpoch: g.Epoch,
				Evidence: fmt.Sprintf("the coordinator's group epoch is %d", g.Epoch)}
		}
	default:
		groups, derr := adm.DescribeGroups(dctx, w.cfg.Group)
		if derr != nil {
			return err
		}
		g, ok := groups[w.cfg.Group]
		if !ok || g.Err != nil {
			return err
		}
		var meIn, holderIn bool
		for _, m := range g.Members {
			meIn = meIn || m.MemberID == fe.Offered.Member
			holderIn = holderIn || m.MemberID == fe.Stored.Member
		}
		if meIn && !holderIn {
			return &EpochRegressedError{Fenced: fe, GroupEpoch: fe.Offered.Epoch,
				Evidence: fmt.Sprintf("this member was assigned at generation %d and is in the group; the stored holder is not a member", fe.Offered.Epoch)}
		}
	}
	return err
}
