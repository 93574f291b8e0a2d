// Package consumer runs the consumer-group side of workrouter: a Worker
// joins a group, runs one goroutine per owned partition, and applies the
// partition's commands in offset order, in batches, to a fenced sink.
//
// The tenure protocol (DESIGN.md §3), per partition:
//
//  1. On assignment the Worker captures the tenure token {Group, Topic,
//     Partition, Epoch, Member}: Epoch is the group generation (classic) or
//     member epoch (KIP-848) at that moment. It stays fixed for the tenure,
//     even when later rebalances bump the generation while the member keeps
//     the partition.
//  2. Before any record is fetched, the Worker claims the scope in the sink
//     and starts fetching at the sink's NextOffset: the sink, not Kafka's
//     committed offset, is the source of truth.
//  3. Each batch is one sink Apply: the holder check, the handlers' effects
//     and the new NextOffset commit atomically.
//  4. After Apply the Kafka offset is committed (for lag visibility); a
//     rejected commit is not an error of the work.
//  5. A fenced Claim or Apply stops the partition at once; it is counted,
//     logged and reported to Config.OnFenced, and never retried. Any other
//     failure (a handler error, the sink unreachable) is retried with
//     exponential backoff and never skipped.
//  6. On revoke or loss the partition goroutine finishes its in-flight batch
//     (bounded by Config.RevokeTimeout) and stops.
//
// # Metrics
//
// With Config.Registerer set, a Worker registers these Prometheus series,
// each with the constant label group (labels are bounded: never keys or
// payloads; partition is the partition number):
//
//   - workrouter_consumer_records_applied_total{topic,partition} and
//     workrouter_consumer_batches_applied_total{topic,partition}: counters
//     of records whose effects were applied and of accepted Applies.
//   - workrouter_consumer_batch_size: histogram of records per batch.
//   - workrouter_consumer_apply_duration_seconds: histogram of one sink
//     Apply attempt; workrouter_consumer_handler_duration_seconds: of one
//     handler call.
//   - workrouter_consumer_fenced_total{topic,partition,op="claim"|"apply"}:
//     claims and batches the sink refused (step 5).
//   - workrouter_consumer_claims_total{topic,outcome="ok"|"fenced"|"error"}.
//   - workrouter_consumer_partitions_assigned_total{topic},
//     workrouter_consumer_partitions_revoked_total{topic} and
//     workrouter_consumer_partitions_lost_total{topic}.
//   - workrouter_consumer_owned_partitions{topic}: gauge of partitions
//     claimed and not fenced.
//   - workrouter_consumer_tenure_epoch{topic,partition}: gauge of the epoch
//     held, set on claim and deleted when the partition is revoked, lost or
//     fenced: two members showing the same partition is a zombie.
//   - workrouter_consumer_retries_total{topic,kind="apply"|"claim"} and
//     workrouter_consumer_sink_errors_total{topic,kind="effect"|"sink"}:
//     failed attempts that are retried, and failed Applies by cause.
//   - workrouter_consumer_lag{topic,partition}: gauge of records between
//     the partition's end offset (kadm ListEndOffsets, the high watermark)
//     and the next offset to apply, refreshed every Config.LagInterval by
//     a goroutine the Worker stops in Close; deleted with the partition.
//
// [MetricNames] lists the names; [Worker.Stats] keeps the cumulative counts
// without Prometheus.
package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// ErrNoHandler is matched by the error a batch fails with when a record's
// command Type has no registered handler. The batch is retried, never skipped.
var ErrNoHandler = errors.New("consumer: no handler for command type")

// ErrUndecodable is matched by the error a batch fails with when a record
// is not a workrouter command. The batch is retried, never skipped.
var ErrUndecodable = errors.New("consumer: record is not a workrouter command")

// Stats are cumulative counters of a Worker.
type Stats struct {
	Assigned      int64 // partitions assigned
	Revoked       int64 // partitions revoked
	Lost          int64 // partitions lost
	Claims        int64 // successful claims
	FencedClaims  int64 // claims refused by the sink
	FencedApplies int64 // batches refused by the sink
	Batches       int64 // batches applied
	Records       int64 // records whose effects were applied
	Skipped       int64 // records skipped by the sink as already applied
	Retries       int64 // failed batch or claim attempts that were retried
	Pauses        int64 // times a partition's fetching was paused because its queue was full
}

// Worker is one consumer group member. Create it with New; stop it with
// Close. All methods are safe to call from any goroutine.
type Worker[Tx any] struct {
	cfg Config[Tx]
	cl  *kgo.Client

	ctx    context.Context // cancelled by Close after the client has left
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	tenures map[int32]*tenure[Tx]

	commitMu  sync.Mutex // serializes the committer with final commits on revoke
	pendMu    sync.Mutex
	pending   map[int32]kgo.EpochOffset
	commitSig chan struct{}

	closeOnce sync.Once
	ready     chan struct{} // closed once New has filled in w

	m *metrics // nil without Config.Registerer

	assigned, revoked, lost, claims, fencedClaims, fencedApplies atomic.Int64
	batches, records, skipped, retries, pauses                   atomic.Int64
}

// New validates cfg, connects to the brokers and joins the group.
//
// The Worker owns the goroutines it starts: a poll loop, an offset
// committer, and one goroutine per owned partition. They run until Close.
// ctx bounds only the initial connection check.
func New[Tx any](ctx context.Context, cfg Config[Tx]) (*Worker[Tx], error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Worker[Tx]{
		cfg:       c,
		tenures:   make(map[int32]*tenure[Tx]),
		pending:   make(map[int32]kgo.EpochOffset),
		commitSig: make(chan struct{}, 1),
		ready:     make(chan struct{}),
	}
	if c.Registerer != nil {
		m := newMetrics(c.Group)
		if err := m.register(c.Registerer); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		m.initTopic(c.Topic)
		w.m = m
	}
	// The client joins the group as soon as it exists; its callbacks wait
	// on ready until w is complete.
	w.ctx, w.cancel = context.WithCancel(context.Background())
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.ConsumerGroup(c.Group),
		kgo.ConsumeTopics(c.Topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.OnPartitionsAssigned(w.onAssigned),
		kgo.OnPartitionsRevoked(w.onRevoked),
		kgo.OnPartitionsLost(w.onLost),
		kgo.AdjustFetchOffsetsFn(w.adjustOffsets),
	}
	switch c.Protocol {
	case Cooperative:
		opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
	case KIP848:
		opts = append(opts, kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer())
	}
	if c.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(c.SessionTimeout))
	}
	if c.RebalanceTimeout > 0 {
		opts = append(opts, kgo.RebalanceTimeout(c.RebalanceTimeout))
	}
	if c.HeartbeatInterval > 0 {
		opts = append(opts, kgo.HeartbeatInterval(c.HeartbeatInterval))
	}
	if c.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(c.InstanceID))
	}
	opts = append(opts, c.ClientOpts...)

	cl, err := kgo.NewClient(opts...)
	if err != nil {
		w.cancel()
		w.m.unregister()
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	w.cl = cl
	fail := func(err error) (*Worker[Tx], error) {
		w.cancel()
		close(w.ready)
		cl.Close()
		w.m.unregister()
		return nil, err
	}
	// An instance ID may also arrive through ClientOpts.
	if v := cl.OptValues(kgo.InstanceID); len(v) == 2 && v[1] == true && !c.AllowStaticMembership {
		return fail(fmt.Errorf("%w (instance ID %q set through ClientOpts)", ErrStaticMembership, v[0]))
	}
	if err := cl.Ping(ctx); err != nil {
		return fail(fmt.Errorf("consumer: brokers %v unreachable: %w", c.Brokers, err))
	}
	close(w.ready)
	w.wg.Add(2)
	go w.pollLoop()
	go w.committer()
	if w.m != nil {
		w.wg.Add(1)
		go w.lagLoop()
	}
	return w, nil
}

// Close leaves the group (revoked partitions finish their in-flight batch and
// commit their offsets), then stops every goroutine the Worker started and
// waits for them, and unregisters the Worker's metrics from
// Config.Registerer (so that a new Worker may register them again). It is
// idempotent. Handlers must honour their ctx, or Close
// waits for them.
func (w *Worker[Tx]) Close() error {
	w.closeOnce.Do(func() {
		w.cl.Close() // leaves the group; runs onRevoked for everything owned
		w.cancel()
		w.mu.Lock()
		for p, t := range w.tenures {
			t.stop()
			t.cancel()
			delete(w.tenures, p)
		}
		w.mu.Unlock()
		w.wg.Wait()
		w.m.unregister()
	})
	return nil
}

// Stats returns the Worker's cumulative counters.
func (w *Worker[Tx]) Stats() Stats {
	return Stats{
		Assigned: w.assigned.Load(), Revoked: w.revoked.Load(), Lost: w.lost.Load(),
		Claims: w.claims.Load(), FencedClaims: w.fencedClaims.Load(), FencedApplies: w.fencedApplies.Load(),
		Batches: w.batches.Load(), Records: w.records.Load(), Skipped: w.skipped.Load(), Retries: w.retries.Load(),
		Pauses: w.pauses.Load(),
	}
}

// Owned returns the tokens of the partitions this Worker currently processes
// (claimed and not fenced), sorted by partition.
func (w *Worker[Tx]) Owned() []epochs.Token {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []epochs.Token
	for _, t := range w.tenures {
		if t.started.Load() && !t.fenced.Load() {
			out = append(out, t.tok)
		}
	}
	slices.SortFunc(out, func(a, b epochs.Token) int { return cmp.Compare(a.Partition, b.Partition) })
	return out
}

// Member returns the group member ID and the current group epoch as the
// client knows them ("" and -1 before the first join).
func (w *Worker[Tx]) Member() (string, int32) { return w.cl.GroupMetadata() }

func (w *Worker[Tx]) pollLoop() {
	defer w.wg.Done()
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
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				w.cfg.Logger.Warn("fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
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
	}
}

// committer commits the latest applied offsets, coalescing many batches into
// one commit request. A commit Kafka did not accept (a rebalance in
// progress, a coordinator move) is retried with backoff for the partitions
// still owned, so that lag returns to zero even when no new record arrives.
func (w *Worker[Tx]) committer() {
	defer w.wg.Done()
	backoff := w.cfg.RetryBackoff
	for {
		select {
		case <-w.commitSig:
		case <-w.ctx.Done():
			return
		}
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
// generations: that is not an error of the work, so it is only logged; the
// error is returned for the committer to retry.
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
				w.cfg.Logger.Debug("offset commit not accepted", "group", w.cfg.Group, "err", err)
				cerr = err
			}
		})
	return cerr
}

// markApplied records next as the partition's commit candidate, if t is
// still the partition's tenure.
func (w *Worker[Tx]) markApplied(t *tenure[Tx], next int64, leaderEpoch int32) {
	w.mu.Lock()
	if w.tenures[t.tok.Partition] == t {
		w.pendMu.Lock()
		w.pending[t.tok.Partition] = kgo.EpochOffset{Epoch: leaderEpoch, Offset: next}
		w.pendMu.Unlock()
	}
	w.mu.Unlock()
	w.signalCommit()
}

func (w *Worker[Tx]) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	<-w.ready
	member, epoch := cl.GroupMetadata()
	for _, p := range assigned[w.cfg.Topic] {
		tok := epochs.Token{Group: w.cfg.Group, Topic: w.cfg.Topic, Partition: p, Epoch: epoch, Member: member}
		w.mu.Lock()
		old := w.tenures[p]
		if old != nil && old.tok == tok {
			w.mu.Unlock()
			continue
		}
		t := newTenure(w, tok)
		w.tenures[p] = t
		w.mu.Unlock()
		if old != nil { // a stale tenure that was never revoked: stop it hard
			old.stop()
			old.cancel()
		}
		w.assigned.Add(1)
		w.m.partitionAssigned(w.cfg.Topic, p)
		w.cfg.Logger.Info("partition assigned", tokenAttrs(tok)...)
	}
}

// adjustOffsets runs after onAssigned and before fetching starts: it claims
// every partition about to be fetched and returns the sink's NextOffset as
// the fetch position. Partitions whose claim is fenced are removed, so they
// are never fetched in this tenure.
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			next, err := w.claim(ctx, t)
			mu.Lock()
			results[p] = outcome{next, err}
			mu.Unlock()
		}()
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
		w.mu.Lock()
		w.refreshOwnedLocked()
		w.mu.Unlock()
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

// claim claims t's scope, retrying transient errors until ctx is done.
func (w *Worker[Tx]) claim(ctx context.Context, t *tenure[Tx]) (int64, error) {
	backoff := w.cfg.RetryBackoff
	for {
		next, err := w.cfg.Sink.Claim(ctx, t.tok)
		if err == nil {
			w.claims.Add(1)
			w.mu.Lock()
			if w.tenures[t.tok.Partition] == t && !t.fenced.Load() {
				w.m.claimed(w.cfg.Topic, t.tok.Partition, t.tok.Epoch)
			}
			w.mu.Unlock()
			w.cfg.Logger.Info("partition claimed", append(tokenAttrs(t.tok), "next_offset", next)...)
			return next, nil
		}
		if errors.Is(err, sink.ErrFenced) {
			err = w.diagnose(ctx, err)
			w.fencedClaims.Add(1)
			w.m.claimFenced(w.cfg.Topic, t.tok.Partition)
			t.markFenced()
			w.cfg.Logger.Error("claim fenced; partition stopped", append(tokenAttrs(t.tok), "err", err)...)
			if w.cfg.OnFenced != nil {
				w.cfg.OnFenced(err)
			}
			return 0, err
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		w.retries.Add(1)
		w.m.claimFailed(w.cfg.Topic)
		w.cfg.Logger.Warn("claim failed; retrying", append(tokenAttrs(t.tok), "err", err, "backoff", backoff)...)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		backoff = min(2*backoff, w.cfg.MaxRetryBackoff)
	}
}

// diagnose tells a zombie's stale claim from a group whose epochs went
// backwards (DESIGN.md hazard 3). A claim refused because the sink has seen a
// higher epoch is a regression when the coordinator cannot have issued that
// epoch: under KIP-848 the group epoch is below it; under the classic
// protocol this member is in the group but the stored holder is not.
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

func (w *Worker[Tx]) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	w.release(ctx, revoked[w.cfg.Topic], true)
}

func (w *Worker[Tx]) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	w.release(ctx, lost[w.cfg.Topic], false)
}

// release stops the tenures of parts: each finishes its in-flight batch,
// bounded by RevokeTimeout, after which its context is cancelled. On a
// revoke (commit true) the final applied offsets are committed; a lost
// partition commits nothing.
func (w *Worker[Tx]) release(ctx context.Context, parts []int32, commit bool) {
	<-w.ready
	var ts []*tenure[Tx]
	w.mu.Lock()
	for _, p := range parts {
		if t := w.tenures[p]; t != nil {
			ts = append(ts, t)
			delete(w.tenures, p)
			w.m.dropPartition(w.cfg.Topic, p)
		}
	}
	w.refreshOwnedLocked()
	w.mu.Unlock()
	for _, t := range ts {
		t.stop()
		if commit {
			w.revoked.Add(1)
		} else {
			w.lost.Add(1)
		}
		w.m.released(w.cfg.Topic, commit)
	}
	deadline := time.NewTimer(w.cfg.RevokeTimeout)
	defer deadline.Stop()
	timedOut := false
	for _, t := range ts {
		if timedOut {
			t.cancel()
			continue
		}
		select {
		case <-t.done:
		case <-deadline.C:
			timedOut = true
			w.cfg.Logger.Warn("in-flight batch exceeded revoke timeout; cancelling it", tokenAttrs(t.tok)...)
			t.cancel()
		}
	}
	final := make(map[int32]kgo.EpochOffset)
	event := "partition revoked"
	if !commit {
		event = "partition lost"
	}
	for _, t := range ts {
		w.cl.ResumeFetchPartitions(map[string][]int32{w.cfg.Topic: {t.tok.Partition}})
		if eo, ok := t.lastApplied(); ok && !t.fenced.Load() {
			final[t.tok.Partition] = eo
		}
		w.cfg.Logger.Info(event, tokenAttrs(t.tok)...)
	}
	w.commitMu.Lock()
	defer w.commitMu.Unlock()
	w.pendMu.Lock()
	for _, t := range ts {
		delete(w.pending, t.tok.Partition)
	}
	w.pendMu.Unlock()
	if commit && len(final) > 0 {
		w.commit(ctx, final)
	}
}

func tokenAttrs(t epochs.Token) []any {
	return []any{"group", t.Group, "topic", t.Topic, "partition", t.Partition, "epoch", t.Epoch, "member", t.Member}
}

// fetchMaxWait bounds how long the broker may hold a fetch open waiting for
// data. A partition whose queue filled up is paused and later resumed; a
// resumed partition joins only the next fetch request, so with kgo's default
// (5s) it could sit idle behind a long poll on partitions that are caught
// up. Measured with the SQLite bench workload (100k records, 12 partitions):
// 7.6s with the default, 2.5s with 200ms. ClientOpts can override it.
const fetchMaxWait = 200 * time.Millisecond
