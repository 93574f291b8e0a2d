package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchMaxWait bounds how long the broker may hold a fetch open waiting for
// data. A partition whose queue filled up is paused and later resumed; a
// resumed partition joins only the next fetch request, so it sits idle
// behind a long poll on partitions that are caught up, for as long as the
// broker holds that poll (kgo's default: 5s). At the end of a backlog that
// wait comes at every resume of every partition still behind, and whatever
// of it exceeds the time the partition takes to apply the half queue it
// kept is time the partition does nothing (docs/performance.md, "the fetch
// wait"). The price is an idle worker's fetch requests: one per broker per
// wait. ClientOpts can override it (kgo.FetchMaxWait).
const fetchMaxWait = 25 * time.Millisecond

// pollLoop takes whole fetches and hands each partition's records to its
// tenure's queue (docs/design.md#protocol, fetch). Records of partitions
// this member does not process (not yet claimed, fenced, released) are
// dropped here: the next tenure refetches them from the sink's checkpoint.
func (w *Worker[Tx]) pollLoop() {
	defer w.wg.Done()
	backoff := time.Duration(0)
	for {
		// Take everything buffered: kgo drops (and later refetches) the
		// buffered records of a partition that is paused, so records left
		// in kgo's buffer when enqueue pauses a full queue would be
		// fetched twice. A queue therefore exceeds QueueSize by at most
		// one fetch of its partition (FetchMaxPartitionBytes).
		fetches := w.cl.PollFetches(w.ctx)
		if fetches.IsClientClosed() || w.ctx.Err() != nil {
			return
		}
		var fatal error
		failed := false
		fetches.EachError(func(topic string, p int32, err error) {
			failed = true
			if errors.Is(err, context.Canceled) {
				return
			}
			if topic == "" {
				p = -1 // the client's or the group's error (kgo reports it as partition 0 of no topic)
			}
			w.obs.emit(FetchFailed{Topic: topic, Partition: p, Err: err})
			if topic == w.cfg.Topic && errors.Is(err, kerr.UnknownTopicID) {
				w.topicIDUnknown()
			}
			var loss *kgo.ErrDataLoss
			if topic == w.cfg.Topic && (errors.Is(err, kerr.OffsetOutOfRange) || errors.As(err, &loss)) {
				w.positionLost(p, err)
			}
			if fatal == nil && isFatalGroupErr(err) {
				fatal = err
			}
		})
		if fatal != nil {
			w.stopAsync(&FatalError{Err: fatal})
			return
		}
		fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if ftp.Topic != w.cfg.Topic || len(ftp.Records) == 0 {
				return
			}
			w.mu.Lock()
			t := w.tenures[ftp.Partition]
			w.mu.Unlock()
			if t == nil || !t.started.Load() {
				return // not ours (any more): the next tenure refetches from the sink's checkpoint
			}
			t.enqueue(ftp.Records)
		})
		// A poll that only failed is retried after a growing pause: kgo
		// returns some errors (UNKNOWN_TOPIC_ID after the topic was
		// recreated) at once, again and again.
		if !failed || fetches.NumRecords() > 0 {
			backoff = 0
			continue
		}
		backoff = min(max(2*backoff, w.cfg.RetryBackoff), w.cfg.MaxRetryBackoff)
		select {
		case <-time.After(backoff):
		case <-w.ctx.Done():
			return
		}
	}
}

// isFatalGroupErr reports whether err, from a poll, is a group error that
// no retry can fix: the member is not allowed in the group, or its
// configuration is refused by the coordinator. kgo retries these for ever;
// the Worker stops instead, so that Done says so.
func isFatalGroupErr(err error) bool {
	var gs *kgo.ErrGroupSession
	if !errors.As(err, &gs) {
		return false
	}
	for _, fatal := range []error{
		kerr.GroupAuthorizationFailed, kerr.TopicAuthorizationFailed, kerr.InvalidSessionTimeout,
		kerr.InconsistentGroupProtocol, kerr.InvalidGroupID, kerr.FencedInstanceID, kerr.UnsupportedVersion,
		kerr.UnsupportedAssignor,
	} {
		if errors.Is(gs.Err, fatal) {
			return true
		}
	}
	return false
}

// enqueue appends fetched records to the tenure's queue and pauses the
// partition's fetching when the queue is full. It is called by the poll
// loop.
func (t *tenure[Tx]) enqueue(recs []*kgo.Record) {
	if t.fenced.Load() {
		return
	}
	t.pauseMu.Lock()
	defer t.pauseMu.Unlock()
	t.mu.Lock()
	t.queue = append(t.queue, recs...)
	queued := len(t.queue)
	pause := !t.paused && queued >= t.w.cfg.QueueSize
	if pause {
		t.paused = true
	}
	t.mu.Unlock()
	if pause && t.w.pauseIfCurrent(t) {
		t.w.obs.emit(Paused{Token: t.tok, Queued: queued})
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// take removes up to max records from the queue, resuming the partition's
// fetching once the queue has drained to half. It is called by the
// tenure's goroutine; the batch it returns is valid until its next call
// (its memory is reused).
func (t *tenure[Tx]) take(max int) []*kgo.Record {
	t.pauseMu.Lock()
	defer t.pauseMu.Unlock()
	t.mu.Lock()
	n := min(len(t.queue), max)
	if cap(t.taken) < n {
		t.taken = make([]*kgo.Record, n)
	}
	batch := t.taken[:n]
	copy(batch, t.queue)
	clear(t.queue[:n]) // the queue's array no longer holds what it handed out
	t.queue = t.queue[n:]
	if len(t.queue) == 0 {
		t.queue = nil
	}
	queued := len(t.queue)
	resume := t.paused && queued <= t.w.cfg.QueueSize/2
	if resume {
		t.paused = false
	}
	t.mu.Unlock()
	if resume && t.w.resumeIfCurrent(t) {
		t.w.obs.emit(Resumed{Token: t.tok, Queued: queued})
	}
	return batch
}
