package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetCommitter is an optional capability of a sink that commits the
// group's offsets itself, inside its fenced unit (sink/kafka: a Kafka
// transaction whose offset commit the coordinator checks). With a sink
// whose CommitsOffsets reports true (found with sink.As, through
// wrappers), the Worker makes no offset commit of its own after a batch:
// a plain commit of an earlier batch that reached the coordinator after a
// later batch's transactional commit would move the committed offset,
// which is then the checkpoint, back.
type OffsetCommitter interface {
	CommitsOffsets() bool
}

// markApplied records next as the partition's commit candidate, if t is
// still the partition's tenure (docs/design.md#checkpoint-and-kafka-commits),
// unless the sink commits the offsets itself (OffsetCommitter).
func (w *Worker[Tx]) markApplied(t *tenure[Tx], next int64, leaderEpoch int32) {
	if w.sinkCommits {
		return
	}
	w.mu.Lock()
	if w.tenures[t.tok.Partition] == t {
		w.pendMu.Lock()
		w.pending[t.tok.Partition] = kgo.EpochOffset{Epoch: leaderEpoch, Offset: next}
		w.pendMu.Unlock()
	}
	w.mu.Unlock()
	w.signalCommit()
}

// commitPace is the least time between the starts of two commits of the
// committer. Kafka's offsets only say where a new owner starts reading (the
// sink's checkpoint says what was applied), so committing after every
// batch buys nothing: at a million records a second it was a commit
// request every few hundred microseconds, in the worker and the broker. A
// revoke still commits at once (release). Tests may set another pace in
// Config.commitPace.
const commitPace = 20 * time.Millisecond

// committer commits the latest applied offsets, coalescing the batches
// applied since its last commit, at most one commit per commit pace. A
// commit Kafka did not accept (a rebalance in progress, a coordinator
// move) is retried with backoff for the partitions still owned, so that
// lag returns to zero even when no new record arrives.
func (w *Worker[Tx]) committer() {
	defer w.wg.Done()
	backoff := w.cfg.RetryBackoff
	var last time.Time
	for {
		select {
		case <-w.commitSig:
		case <-w.ctx.Done():
			return
		}
		if wait := w.cfg.commitPace - time.Since(last); wait > 0 {
			select {
			case <-time.After(wait):
			case <-w.ctx.Done():
				return
			}
		}
		last = time.Now()
		w.commitMu.Lock()
		w.pendMu.Lock()
		snap := w.pending
		w.pending = make(map[int32]kgo.EpochOffset)
		w.pendMu.Unlock()
		var err error
		if len(snap) > 0 {
			err = w.commit(w.ctx, snap)
		}
		if err != nil {
			w.requeue(snap)
		}
		w.commitMu.Unlock()
		if err == nil {
			backoff = w.cfg.RetryBackoff
			continue
		}
		select {
		case <-time.After(backoff):
		case <-w.ctx.Done():
			return
		}
		backoff = min(2*backoff, w.cfg.MaxRetryBackoff)
		w.signalCommit()
	}
}

// requeue puts back the offsets of a failed commit for the partitions this
// worker still processes, unless a newer offset is already pending.
func (w *Worker[Tx]) requeue(offsets map[int32]kgo.EpochOffset) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pendMu.Lock()
	defer w.pendMu.Unlock()
	for p, eo := range offsets {
		t := w.tenures[p]
		if t == nil || t.fenced.Load() {
			continue
		}
		if _, newer := w.pending[p]; !newer {
			w.pending[p] = eo
		}
	}
}

func (w *Worker[Tx]) signalCommit() {
	select {
	case w.commitSig <- struct{}{}:
	default:
	}
}

// commit commits offsets synchronously. Kafka rejects commits from stale
// generations: that is not an error of the work, so it is only reported
// (CommitFailed); the error is returned for the committer to retry.
func (w *Worker[Tx]) commit(ctx context.Context, offsets map[int32]kgo.EpochOffset) error {
	var cerr error
	w.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{w.cfg.Topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err == nil && resp != nil {
				for _, t := range resp.Topics {
					for _, p := range t.Partitions {
						if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil && err == nil {
							err = fmt.Errorf("partition %d: %w", p.Partition, perr)
						}
					}
				}
			}
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
				cerr = err
			}
		})
	if len(w.obs.all) > 0 {
		plain := make(map[int32]int64, len(offsets))
		for p, eo := range offsets {
			plain[p] = eo.Offset
		}
		if cerr != nil {
			w.obs.emit(CommitFailed{Group: w.cfg.Group, Topic: w.cfg.Topic, Offsets: plain, Err: cerr})
		} else if ctx.Err() == nil {
			w.obs.emit(Committed{Group: w.cfg.Group, Topic: w.cfg.Topic, Offsets: plain})
		}
	}
	return cerr
}
