package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/observe"
	"github.com/workrouter/workrouter/internal/topicid"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// errBlocked marks a claim refused for a reason an operator must resolve:
// the partition waits, and reclaimLoop claims it again.
var errBlocked = errors.New("consumer: claim blocked")

// errClientOnOldTopic: a claim waits until the Worker's client consumes
// the topic the claim observed (after a recreation).
var errClientOnOldTopic = errors.New("consumer: the client is on the topic's previous incarnation")

// errTenureGone: the tenure is no longer its partition's (released or
// replaced); whatever it was doing is dropped.
var errTenureGone = errors.New("consumer: the tenure is no longer the partition's")

// adjustOffsets runs after onAssigned and before fetching starts: it claims
// every partition about to be fetched (docs/design.md#claim) and returns the
// sink's NextOffset as the fetch position. A partition whose claim is
// fenced by a newer tenure is removed, so it is never fetched in this
// tenure; one whose claim is blocked (the log changed, the epochs went
// backwards) is kept paused, and claimed again every ReclaimInterval.
func (w *Worker[Tx]) adjustOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	<-w.ready
	parts := offsets[w.cfg.Topic]
	type outcome struct {
		t    *tenure[Tx]
		next int64
		err  error
	}
	results := make(map[int32]outcome, len(parts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	// One look at the log for all the claims; a retry looks again.
	look, oerr := w.observe(ctx)
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
		var first *sink.Observed
		if oerr == nil {
			if obs, err := look.Observed(w.cfg.Topic, p); err == nil {
				first = &obs
			}
		}
		if t == nil {
			continue // released meanwhile
		}
		wg.Go(func() {
			// The claim ends with the session or with the tenure.
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(t.ctx, cancel)()
			next, err := w.claim(cctx, t, first)
			mu.Lock()
			results[p] = outcome{t, next, err}
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for p := range parts {
		r, ok := results[p]
		w.mu.Lock()
		t := w.tenures[p]
		w.mu.Unlock()
		switch {
		case !ok || t == nil || t != r.t:
			// Released or replaced while it claimed: the claim's outcome
			// was discarded (see claim); not fetched in this session.
			delete(parts, p)
		case errors.Is(r.err, errBlocked):
			// Keep the partition assigned but paused: a valid re-claim
			// sets its offset and resumes it.
			w.pauseIfCurrent(t)
			parts[p] = kgo.NewOffset().AtEnd()
		case r.err != nil:
			delete(parts, p)
		default:
			committed := parts[p].EpochOffset().Offset
			parts[p] = kgo.NewOffset().At(r.next).WithEpoch(-1)
			t.start(r.next)
			w.commitClaimed(t, r.next, committed)
		}
	}
	return offsets, nil
}

// commitClaimed commits the sink's checkpoint at a claim when it differs
// from Kafka's committed offset (e.g. a worker died between its sink commit
// and its Kafka commit), so that lag reaches zero even if no new record
// ever arrives on the partition.
func (w *Worker[Tx]) commitClaimed(t *tenure[Tx], next, committed int64) {
	if next > 0 && next != committed {
		t.appliedNext.Store(next)
		t.appliedEpoch.Store(-1)
		w.markApplied(t, next, -1)
	}
}

// observe reads, for the claims of partitions, the log's identity (the
// topic ID) and each partition's log start and end offsets
// (docs/design.md#log-identity), with observe.ReadLog: the topic ID from
// the brokers (never the client's metadata cache), read before and after
// the offsets, again until both agree.
func (w *Worker[Tx]) observe(ctx context.Context) (observe.Log, error) {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := observe.ReadLog(octx, w.cl, w.cfg.Topic)
	if err != nil {
		return observe.Log{}, fmt.Errorf("consumer: %w", err)
	}
	return l, nil
}

// observePartition returns what a claim of partition p observes.
func (w *Worker[Tx]) observePartition(ctx context.Context, p int32) (sink.Observed, error) {
	l, err := w.observe(ctx)
	if err != nil {
		return sink.Observed{}, err
	}
	obs, err := l.Observed(w.cfg.Topic, p)
	if err != nil {
		return sink.Observed{}, fmt.Errorf("consumer: %w", err)
	}
	return obs, nil
}

// claim claims t's scope (docs/design.md#claim), retrying failures other
// than fencing until ctx is done. It observes the log first, and proves the
// member's current membership when the sink asks for it (after a reset). A
// claim refused for a reason an operator must resolve returns an error
// matching errBlocked, after reporting it.
//
// A tenure that is gone never acts: claim makes no attempt once t is no
// longer its partition's tenure, and the sink's answer to an attempt made
// before is discarded (see discard) and errTenureGone returned, whatever
// it was: nothing is reported, blocked or paused for the partition.
//
// first, if not nil, is the first attempt's observation of the log.
func (w *Worker[Tx]) claim(ctx context.Context, t *tenure[Tx], first *sink.Observed) (int64, error) {
	backoff := w.cfg.RetryBackoff
	truncatedRetries, quickProofs, takeovers := 0, 0, 0
	// proof is the proof of membership this claim offers, made after
	// the sink named the fence version it is checked against; tookOver
	// the regression a proven takeover claims past, if the proof is one.
	var (
		proof    *sink.Proof
		tookOver *EpochRegressedError
	)
	for {
		if !w.current(t) {
			return 0, errTenureGone
		}
		start := time.Now()
		var obs sink.Observed
		var err error
		if first != nil {
			obs, first = *first, nil
		} else {
			obs, err = w.observePartition(ctx, t.tok.Partition)
		}
		var next int64
		if err == nil && obs.TopicID != "" {
			// A claim on a log the client does not consume yet (the topic
			// was recreated and the topic watch has not moved the client)
			// would succeed and then fetch nothing: move the client first.
			if cid := w.clientTopic.Load(); cid != nil && *cid != obs.TopicID {
				w.topicIDUnknown()
				err = fmt.Errorf("%w: the topic now has ID %s, the client still consumes %s; moving it to the new topic first", errClientOnOldTopic, obs.TopicID, *cid)
			}
		}
		if err == nil {
			if obs.TopicID != "" {
				t.topicID = obs.TopicID
			}
			obs.Proof = proof
			var cp sink.Checkpoint
			cp, err = w.cfg.Sink.Claim(ctx, t.tok, obs)
			next = cp.NextOffset
			if err == nil && t.keys != nil {
				t.claimedGapped(cp)
			}
			if !w.current(t) {
				w.discard(t, sink.OpClaim, err)
				return 0, errTenureGone
			}
		}
		if err == nil {
			if t.fenced.Load() {
				// Stopped for good meanwhile: a tenure that is gone
				// never acts.
				w.discard(t, sink.OpClaim, nil)
				return 0, errTenureGone
			}
			w.obs.emit(Claimed{Token: t.tok, NextOffset: next, TookOver: tookOver})
			// A re-claim after a resource's refusal stays blocked, its
			// since kept, until a batch applies: the refusals are not
			// over until the resource accepts a call (resourceFenced).
			if t.refused().IsZero() {
				t.progressed()
			}
			return next, nil
		}
		var (
			lc *sink.LogChangedError
			pe *sink.ProofRequiredError
		)
		switch {
		case errors.Is(err, sink.ErrFenced):
			err = w.diagnose(ctx, err)
			var re *EpochRegressedError
			if errors.As(err, &re) {
				// The holder is of an earlier incarnation of the group
				// (recreated, expired, lost by the broker): take the
				// scope over with a proof, or wait for an operator.
				if !w.cfg.NoTakeover && takeovers < 3 {
					takeovers++
					p, perr := w.takeoverProof(ctx, t, re)
					if perr == nil {
						proof, tookOver = p, re
						continue
					}
					err = fmt.Errorf("%w; no proven takeover: %w", err, perr)
				}
				w.block(t, BlockEpochRegressed, err)
				return 0, fmt.Errorf("%w: %w", errBlocked, err)
			}
			t.markFenced()
			w.obs.emit(Fenced{Token: t.tok, Op: sink.OpClaim, Err: err})
			return 0, err
		case errors.As(err, &pe) && (proof == nil || proof.Version != pe.Version):
			// The fence was reset (or it moved since our last proof):
			// prove against the version the sink names now. A proof
			// is evidence about the moment it was made, so the sink
			// takes it only if nothing was claimed or reset since.
			if _, perr := w.proveMembership(ctx, t); perr != nil {
				err = fmt.Errorf("%w; proving the membership failed: %w", err, perr)
				proof = nil
				break
			}
			proof = &sink.Proof{Version: pe.Version}
			if quickProofs < 3 {
				quickProofs++
				continue
			}
			// The fence keeps moving under our proofs (other claims
			// racing): claim again after the backoff.
		case errors.As(err, &lc):
			// A checkpoint past the end may be a race with the previous
			// owner, which applied records produced after our look at
			// the log: look again before deciding.
			if errors.Is(err, sink.ErrLogTruncated) && truncatedRetries < 3 {
				truncatedRetries++
				continue
			}
			newly := w.countLoss(t.tok.Partition, lc)
			w.block(t, BlockLogChanged, err, LogChanged{Token: t.tok, Err: lc, NewlyLost: newly})
			return 0, fmt.Errorf("%w: %w", errBlocked, err)
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if !w.current(t) {
			return 0, errTenureGone
		}
		attempt, since := t.stalled(err)
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

// block records that t's claim was refused for a reason an operator must
// resolve, then emits the events before (the cause's, if any) and
// Blocked, with cause (a Block* constant): the state comes first, so that
// an observer that reads Partitions on any of them sees the partition
// blocked.
func (w *Worker[Tx]) block(t *tenure[Tx], cause string, err error, before ...Event) {
	since := t.blocked(err)
	for _, e := range before {
		w.obs.emit(e)
	}
	w.obs.emit(Blocked{Token: t.tok, Since: since, Err: err, Cause: cause})
}

// discard drops the sink's answer err (nil: accepted) to an op of t that
// the sink decided while t stopped being its partition's tenure (released
// or replaced): a tenure that is gone never acts, so the answer changes
// nothing of the partition, which may have a successor tenure by now. It
// is reported as a Discarded event (counted in Stats.Discarded), which
// the logging observer logs.
func (w *Worker[Tx]) discard(t *tenure[Tx], op sink.Op, err error) {
	w.obs.emit(Discarded{Token: t.tok, Op: op, Err: err})
}

// proveMembership proves to the broker that t's token belongs to the
// group's current incarnation (docs/design.md#admin-reset): an offset
// commit for t's partition as t's member, which the coordinator accepts
// only from a current member. A member of the group's previous
// incarnation is unknown to it and fails.
//
// The commit is made at the token's own epoch. Under KIP-848 that is the
// only proof accepted: member IDs are the client's own and survive a
// rejoin into a recreated group, so only the epoch ties the token to this
// incarnation, and the coordinator checks it against the epoch at which
// the partition was assigned to the member (KIP-1251). Under the classic
// protocol the coordinator accepts only the current generation, which a
// cooperative rebalance may have moved past the token's epoch while the
// member kept the partition; then the commit is made at the current
// generation, which proves the token too: classic member IDs are issued
// by the coordinator and never outlive the incarnation that issued them,
// and the current generation is not below the token's epoch.
//
// The commit is of the partition's current checkpoint (the sink's, read
// through fenceadmin.Lister, or Kafka's committed offset), so it moves nothing.
//
// It returns the epoch the coordinator accepted the commit at: the
// token's, or (classic) the current generation.
func (w *Worker[Tx]) proveMembership(ctx context.Context, t *tenure[Tx]) (int32, error) {
	member, gen := w.cl.GroupMetadata()
	if member != t.tok.Member {
		return 0, fmt.Errorf("consumer: %s is no longer this client's member ID (now %q)", t.tok.Member, member)
	}
	offset := int64(-1)
	if l, ok := sink.As[fenceadmin.Lister](w.cfg.Sink); ok {
		if fences, err := l.Fences(ctx); err == nil {
			for _, f := range fences {
				if f.Scope == t.tok.Scope() {
					offset = f.NextOffset
				}
			}
		}
	}
	if offset < 0 {
		adm := kadm.NewClient(w.cl)
		if offs, err := adm.FetchOffsets(ctx, w.cfg.Group); err == nil {
			if o, ok := offs.Lookup(w.cfg.Topic, t.tok.Partition); ok && o.Err == nil && o.At >= 0 {
				offset = o.At
			}
		}
	}
	if offset < 0 {
		offset = 0
	}
	err := commitAs(ctx, w.cl, w.cfg.Group, member, t.tok.Epoch, w.cfg.Topic, w.topicIDBytes(t), t.tok.Partition, offset, member)
	if w.cfg.Protocol == KIP848 && errors.Is(err, kerr.StaleMemberEpoch) && gen > t.tok.Epoch {
		return t.tok.Epoch, fmt.Errorf("%w (token epoch %d, member epoch %d): Apache Kafka before 4.3 (without KIP-1251) accepts a commit only at the member's current epoch, "+
			"and 4.3 or later only for a partition the member still holds from that epoch: %w", ErrOlderEpochProofRefused, t.tok.Epoch, gen, err)
	}
	if err == nil || w.cfg.Protocol == KIP848 || !errors.Is(err, kerr.IllegalGeneration) || gen <= t.tok.Epoch {
		return t.tok.Epoch, err
	}
	return gen, commitAs(ctx, w.cl, w.cfg.Group, member, gen, w.cfg.Topic, w.topicIDBytes(t), t.tok.Partition, offset, member)
}

// takeoverProof proves t's membership for a claim below the stored holder
// that re diagnosed as a member of an earlier incarnation of the group
// (docs/design.md#expired-groups), and returns the proof to claim with:
// at the fence version the refusal named, with the group epoch observed
// after it (the generation the coordinator accepted the proof at, under
// the classic protocol; the group epoch the diagnosis described, under
// KIP-848). It fails, and no takeover is tried, when that group epoch is
// not below the holder's (the sink would refuse it: an equal epoch after
// the broker lost its state needs an operator's reset).
func (w *Worker[Tx]) takeoverProof(ctx context.Context, t *tenure[Tx], re *EpochRegressedError) (*sink.Proof, error) {
	at, err := w.proveMembership(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("proving the membership failed: %w", err)
	}
	ge := at
	if w.cfg.Protocol == KIP848 {
		ge = re.GroupEpoch
	}
	if ge >= re.Fenced.Stored.Epoch || ge < t.tok.Epoch {
		return nil, fmt.Errorf("the group epoch %d is not below the stored holder's %d: only an operator's reset can tell this incarnation from the holder's", ge, re.Fenced.Stored.Epoch)
	}
	return &sink.Proof{Version: re.Fenced.Version, GroupEpoch: ge}, nil
}

// commitAs commits offset for topic/partition with metadata as member at
// generation gen, and returns the coordinator's refusal, if any: the
// broker-validated proof that member is a current member of group.
//
// topicID is the topic's ID (the zero ID if unknown): OffsetCommit v10+
// names topics by ID.
func commitAs(ctx context.Context, cl *kgo.Client, group, member string, gen int32, topic string, topicID [16]byte, partition int32, offset int64, metadata string) error {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation, req.MemberID = group, gen, member
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = partition, offset, -1, &metadata
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(cctx, cl)
	if err != nil {
		return fmt.Errorf("consumer: offset commit as member %s at generation %d: %w", member, gen, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("consumer: the coordinator refused an offset commit as member %s at generation %d: %w", member, gen, err)
			}
		}
	}
	return nil
}

// topicIDBytes returns the topic ID t observed, as bytes (zero if none).
func (w *Worker[Tx]) topicIDBytes(t *tenure[Tx]) [16]byte {
	id, _ := topicid.Parse(t.topicID) // zero if none (a broker without topic IDs)
	return id
}

// reclaimLoop claims again, every ReclaimInterval until the Worker stops,
// the partitions whose claim was blocked; one that succeeds resumes where
// the sink says. Each blocked tenure is claimed by a goroutine of its own
// (reclaim; at most one per tenure at a time), so that a claim that hangs
// or keeps failing (a sink that does not answer, a member ID that changed)
// holds up only its own partition, never the re-claims of the others: a
// bound per attempt instead would be a timeout too short for a slow sink
// or long enough to keep delaying the others, and would not end a Claim
// that ignores its context. Each goroutine ends with its tenure's context,
// which is cancelled as soon as the tenure is released or replaced.
func (w *Worker[Tx]) reclaimLoop() {
	defer w.wg.Done()
	tick := time.NewTicker(w.cfg.ReclaimInterval)
	defer tick.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-tick.C:
		case <-w.reclaimSig:
		}
		w.mu.Lock()
		for _, t := range w.tenures {
			if t.isBlocked() && !t.started.Load() && t.reclaiming.CompareAndSwap(false, true) {
				w.wg.Add(1)
				go w.reclaim(t)
			}
		}
		w.mu.Unlock()
	}
}

// reclaim claims the blocked tenure t again, once the tenure it replaces
// (if any) has exited, and starts it if the claim is accepted while t is
// still its partition's tenure. It is a goroutine of reclaimLoop.
func (w *Worker[Tx]) reclaim(t *tenure[Tx]) {
	defer w.wg.Done()
	defer t.reclaiming.Store(false)
	if t.after != nil {
		select { // the tenure it replaces has not exited yet
		case <-t.after:
		case <-t.ctx.Done():
			return
		}
	}
	next, err := w.claim(t.ctx, t, nil)
	if errors.Is(err, sink.ErrFenced) && !errors.Is(err, ErrEpochRegressed) {
		// A re-claim with a token of a member ID this client left,
		// while it still owns the partition: claimed with its current one.
		w.rejoined(t, err)
		return
	}
	if err != nil {
		return
	}
	// The check that t is current, the new position and the start are one
	// step under w.mu, which release takes to remove t: t either starts
	// before its release (which then stops it) or never.
	w.mu.Lock()
	current := w.tenures[t.tok.Partition] == t
	if current {
		// Fetching restarts at the sink's checkpoint, which a reset may
		// have moved: SetOffsets drops what was buffered from the old
		// position.
		w.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{w.cfg.Topic: {t.tok.Partition: {Epoch: -1, Offset: next}}})
		t.start(next)
		w.cl.ResumeFetchPartitions(map[string][]int32{w.cfg.Topic: {t.tok.Partition}})
	}
	w.mu.Unlock()
	if !current {
		w.discard(t, sink.OpClaim, nil)
		return
	}
	w.commitClaimed(t, next, -1)
}

// diagnose tells a zombie's stale claim from a group whose epochs went
// backwards (docs/design.md#hazard-3). A claim refused because the sink
// has seen a higher epoch is a regression when the coordinator cannot
// have issued that epoch: under KIP-848 the group epoch is below it; under
// the classic protocol this member is in the group but the stored holder
// is not.
func (w *Worker[Tx]) diagnose(ctx context.Context, err error) error {
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored.Epoch < fe.Offered.Epoch {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, w.cfg.diagnoseTimeout)
	defer cancel()
	which := observe.Classic
	if w.cfg.Protocol == KIP848 {
		which = observe.Consumer
	}
	// The group's assignments are not needed here: no topic ID to match.
	g, derr := observe.DescribeGroup(dctx, w.cl, w.cfg.Group, w.cfg.Topic, [16]byte{}, which)
	if derr != nil {
		return err
	}
	if w.cfg.Protocol == KIP848 && g.Epoch < fe.Stored.Epoch {
		return &EpochRegressedError{Fenced: fe, GroupEpoch: g.Epoch,
			Evidence: fmt.Sprintf("the coordinator's group epoch is %d", g.Epoch)}
	}
	members := g.MemberIDs()
	// A holder with a higher or equal epoch that is not a member, while
	// this member is: the epochs restarted under the holder (after data
	// loss the new group hands out epoch 1 again, often the very epoch
	// stored). A holder that is a member is a newer owner: this member is
	// the zombie.
	if slices.Contains(members, fe.Offered.Member) && !slices.Contains(members, fe.Stored.Member) {
		return &EpochRegressedError{Fenced: fe, GroupEpoch: fe.Offered.Epoch,
			Evidence: fmt.Sprintf("this member was assigned at epoch %d and is in the group; the stored holder is not a member", fe.Offered.Epoch)}
	}
	return err
}

// resetUnderTenure handles a write of t refused because nobody holds its
// scope: an operator reset the fence while t held it. It is called by t's
// goroutine, which returns right after. A tenure released meanwhile
// discards the refusal: its successor claims by itself.
func (w *Worker[Tx]) resetUnderTenure(t *tenure[Tx], op sink.Op, err error) {
	if !w.reclaimTenure(t, BlockFenceReset, fmt.Errorf("%w: %w", ErrFenceReset, err)) {
		t.markFenced()
		w.discard(t, op, err)
	}
}

// positionLost handles a fetch of partition p refused because its position
// is not in the log any more (OFFSET_OUT_OF_RANGE: records deleted before
// they were fetched, or a log truncated below it; or kgo's ErrDataLoss).
// The Worker never jumps to another position by itself: it claims the
// partition again, and the claim checks the log (a retention loss or a
// truncation is refused and reported; a position that is valid again
// resumes). It is called by the poll loop.
func (w *Worker[Tx]) positionLost(p int32, err error) {
	w.mu.Lock()
	t := w.tenures[p]
	w.mu.Unlock()
	if t == nil || !t.started.Load() || t.fenced.Load() {
		return
	}
	w.reclaimTenure(t, BlockPositionLost, fmt.Errorf("consumer: the broker no longer serves %s/%d at offset %d (%w); claiming it again to check the log",
		t.tok.Topic, p, t.next(), err))
}

// reclaimTenure stops t (its queue is dropped and its partition paused)
// and puts in its place a fresh tenure with the same token, blocked with
// err (a Blocked event of cause), which reclaimLoop claims at once: the
// claim observes the log and, after a reset, proves the membership; it
// starts the new tenure only once t's goroutine has exited. It returns false, and does nothing, if t is
// no longer its partition's tenure (released or replaced meanwhile: the
// successor claims by itself).
func (w *Worker[Tx]) reclaimTenure(t *tenure[Tx], cause string, err error) bool {
	return w.replaceBlocked(t, cause, err, time.Time{})
}

// replaceBlocked is reclaimTenure; with a non-zero since, the fresh tenure
// is blocked since then and waits for reclaimLoop's next tick instead of
// being claimed at once (resourceFenced).
func (w *Worker[Tx]) replaceBlocked(t *tenure[Tx], cause string, err error, since time.Time) bool {
	return w.replaceBlockedAs(t, func() (epochs.Token, bool) { return t.tok, true }, cause, err, since)
}

// replaceBlockedAs is replaceBlocked with the fresh tenure's token given
// by tok, which is called under w.mu once t is known to be its
// partition's tenure; if it returns false, nothing is done.
func (w *Worker[Tx]) replaceBlockedAs(t *tenure[Tx], tok func() (epochs.Token, bool), cause string, err error, since time.Time) bool {
	w.mu.Lock()
	if w.tenures[t.tok.Partition] != t {
		w.mu.Unlock()
		return false
	}
	ntok, ok := tok()
	if !ok {
		w.mu.Unlock()
		return false
	}
	nt := newTenure(w, ntok)
	nt.topicID, nt.after = t.topicID, t.done
	if !since.IsZero() {
		nt.refusedSince = since
		nt.st = stallState{state: StateBlocked, since: since}
	}
	w.tenures[t.tok.Partition] = nt
	// Paused for nt, which is blocked until its claim; under w.mu like
	// every pause of a current tenure (see pauseIfCurrent).
	w.cl.PauseFetchPartitions(map[string][]int32{t.tok.Topic: {t.tok.Partition}})
	w.mu.Unlock()
	t.markFenced()
	t.cancel()
	w.block(nt, cause, err)
	if since.IsZero() {
		select {
		case w.reclaimSig <- struct{}{}:
		default:
		}
	}
	return true
}

// resourceFenced handles a batch of t refused because a resource its
// handler called refused the tenure's token (the effect's error matches
// sink.ErrFenced; the sink did not refuse it). The group did not move the
// partition, so giving it up would stop it with no way back: it is
// blocked instead (visible in Partitions, /readyz, the metrics and
// status), in a fresh tenure with the same token, which reclaimLoop
// claims and starts again at its next tick, every ReclaimInterval, until
// the resource accepts the token again (its fence reset by an operator)
// or the group moves the partition. The block's since is the first
// refusal of the row. A tenure that is no longer its partition's (a
// zombie the resource refused) is reported Fenced instead. It is called
// by t's goroutine, which returns right after.
func (w *Worker[Tx]) resourceFenced(t *tenure[Tx], offset int64, err error) {
	since := t.refused()
	if since.IsZero() {
		since = time.Now()
	}
	cause := fmt.Errorf("%w (batch at offset %d): %w", ErrResourceFenced, offset, err)
	if w.current(t) {
		w.reportBlocked(t, since, cause)
		if w.replaceBlocked(t, BlockResourceFenced, cause, since) {
			return
		}
	}
	// The group moved the partition: a zombie's call, which the resource
	// refused as it should. Reported as the sink's refusal of a stale
	// batch is.
	t.markFenced()
	w.obs.emit(Fenced{Token: t.tok, Op: sink.OpApply, FirstOffset: offset, Err: err})
}

// lossMark is the retention loss last counted for a partition: on the log
// topicID, for the checkpoint next, lost records.
type lossMark struct {
	topicID string
	next    int64
	lost    int64
}

// countLoss returns how many of lc's lost records were not counted before
// for partition p (a blocked partition's re-claims see the same loss
// again), and remembers lc's. It may be called from any goroutine.
func (w *Worker[Tx]) countLoss(p int32, lc *sink.LogChangedError) int64 {
	lost := lc.Lost()
	if lost <= 0 {
		return 0
	}
	w.lossMu.Lock()
	defer w.lossMu.Unlock()
	mark, seen := w.losses[p]
	w.losses[p] = lossMark{topicID: lc.StoredTopicID, next: lc.NextOffset, lost: max(lost, mark.lost)}
	if seen && mark.topicID == lc.StoredTopicID && mark.next == lc.NextOffset {
		return max(lost-mark.lost, 0)
	}
	return lost
}
