package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// Config configures a Sink.
type Config struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// CheckpointTopic is the sink's own topic: every transaction writes
	// one record to it, keyed by the scope ("group/topic/partition"),
	// whose value is the committing token and the offset committed, so
	// that every transaction produces (a transaction that only commits
	// offsets could not be ended through kgo) and an operator can read
	// who committed what. Make it compacted. It must exist. Required.
	CheckpointTopic string
	// DeadLetterTopic is where DeadLetter produces a poison record, in
	// the transaction that commits the offset past it. Empty: the sink
	// declares no dead letters (Features.DeadLetters false) and a
	// consumer stalls on a poison record instead. It must exist.
	DeadLetterTopic string
	// MaxDeadLetterBytes is the largest record batch the producers send
	// to the dead-letter topic; default 1000012, kgo's default for every
	// topic. A dead letter is the poison record plus headers, so a record
	// near Kafka's default limit of 1 MiB needs more: raise it with the
	// dead-letter topic's max.message.bytes, or such a record stalls its
	// partition (its DeadLetter fails with MESSAGE_TOO_LARGE, a sink
	// failure the consumer retries).
	MaxDeadLetterBytes int32
	// TransactionalID prefixes the transactional IDs of the sink's
	// producers: each is TransactionalID-<random>-<n>, unique to this
	// Sink (per member, KIP-447 style: see the package doc for why the
	// ID is not per partition or per tenure); default "workrouter-sink".
	// <random> is drawn once per Sink; n counts from 0 over the Sink's
	// life: 0 to Producers-1 at New, and the next number for each
	// producer replaced after a transaction it could not recover from
	// (Stats.ProducersReplaced), so no ID is used twice.
	TransactionalID string
	// Producers is how many transactional producers (each a kgo client
	// with its own transactional ID, and a committer goroutine of its
	// own) serve Apply and DeadLetter concurrently: a producer runs one
	// transaction at a time, which takes every call queued when it
	// begins (a group commit: see Linger); default 4.
	Producers int
	// Linger is how long at most a free producer waits, once a call is
	// queued, for the next calls of the other scopes that had calls in
	// the last 250ms, so that they share its transaction (a group
	// commit: see the package doc); it waits only while such a scope has
	// no call queued, so a lone partition never waits. Zero means the
	// default, 2ms; negative, no wait: a transaction then takes the calls
	// queued when its producer is free, and calls share one only when
	// they arrive while every producer is busy. At most 1s.
	Linger time.Duration
	// TransactionTimeout is the producers' transaction timeout: how long
	// the coordinator lets a transaction of a process that froze stay
	// open (blocking read_committed consumers of its output partitions at
	// the last stable offset) before it aborts it; default 10s.
	TransactionTimeout time.Duration

	// ClientFenceOnly commits offsets without group metadata (generation
	// -1, no member ID): the coordinator then checks nothing, and only
	// the sink's client-side fence (one Sink value's claims) fences
	// writes. It is for tests of the contract with made-up tokens and
	// for a single process; never for a consumer group of several
	// processes. With it, GroupPrefix may rename the commits' group.
	ClientFenceOnly bool
	// GroupPrefix prefixes the consumer group of the commits; only with
	// ClientFenceOnly (the broker's fence needs the consumer's own group).
	GroupPrefix string

	// Logger, if set, receives the sink's own events that no error
	// returns: each aborted transaction and why, each offset commit
	// refused for a rebalance's generation and tried again. Nil logs
	// nothing.
	Logger *slog.Logger

	// ClientOpts are extra franz-go options for the sink's clients (TLS,
	// SASL, a dialer). Options that undo the transaction are not checked:
	// do not pass a transactional ID or a group. They come after the
	// sink's own client defaults, which they may override: a metadata
	// min age of 100ms (kgo.MetadataMinAge; kgo's default is 5s), so that
	// a produce the broker refused with a retriable error is retried
	// within about 100ms.
	ClientOpts []kgo.Opt
}

// ErrConfig is matched by every configuration error of New.
var ErrConfig = errors.New("kafka sink: invalid config")

// MemberFunc returns the consumer group member's current member ID and
// generation (classic protocol) or member epoch (KIP-848), as
// consumer.Worker.Member and kgo.Client.GroupMetadata return them.
type MemberFunc func() (member string, generation int32)

// Sink is the Kafka sink: see the package doc. It is safe for concurrent
// use.
type Sink struct {
	cfg   Config
	admin *kgo.Client // offset fetches, metadata
	// implicitOffsets: the cluster runs transaction version 2 (KIP-890
	// part 2), whose TxnOffsetCommit v5 adds the group to the
	// transaction itself, so no AddOffsetsToTxn is sent.
	implicitOffsets bool
	base            []kgo.Opt // the options of every client
	idBase          string    // TransactionalID-<random>-
	nextID          atomic.Int64

	allMu  sync.Mutex // guards all, closed and each producer's cl
	all    []*producer
	closed bool

	replaced, abortMarkers, abortFailed, startFailed atomic.Int64

	bound   chan struct{} // closed by BindMember
	bindMu  sync.Mutex
	member  MemberFunc
	members map[string]MemberFunc // BindGroupMember's, by group

	q queue // the calls waiting for a committer
	// runCtx is the committers' context, cancelled by Close; wg counts
	// the committers.
	runCtx    context.Context
	runCancel context.CancelFunc
	wg        sync.WaitGroup

	txns, shared atomic.Int64
	// The time spent, summed (nanoseconds): each transaction's produce,
	// offset commits and end (Stats); and each call's, from queued to
	// its result, with the calls counted.
	produceNs, offsetsNs, endNs, callNs, calls atomic.Int64

	mu     sync.Mutex
	scopes map[epochs.Scope]*scopeState

	closeOnce sync.Once
}

// producer is one transactional kgo client. A producer is in the pool or
// held by one commit; cl is nil while a replacement is not started yet
// (the next commit that draws it starts it).
type producer struct {
	cl    *kgo.Client
	txnID string
	// The producer ID and epoch of the last transaction begun and the
	// partitions it produced to: what replace aborts with markers.
	pid     int64
	epoch   int16
	touched map[string][]int32
}

// scopeState is the client-side fence of one scope: what this Sink
// knows of it. mu is held from the client-side check to the end of a
// transaction, and by a claim, so that no claim of this Sink lands
// between a tenure's check and its commit.
type scopeState struct {
	mu    sync.Mutex
	fence sink.Fence
	known bool // a claim of this Sink set fence
	// uncertain: a transaction's end failed with its outcome unknown; the
	// next Apply reads the committed offset before it runs anything.
	uncertain bool
}

// New connects to the brokers, checks that the topics exist, and starts
// the producers, all at once (each initializes its transactional ID); if
// one cannot start, New closes the others and returns its error. The
// Sink fences with the broker from the first BindMember (unless
// ClientFenceOnly); claims wait for it.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	switch {
	case len(cfg.Brokers) == 0:
		return nil, fmt.Errorf("%w: no brokers", ErrConfig)
	case cfg.CheckpointTopic == "":
		return nil, fmt.Errorf("%w: no checkpoint topic", ErrConfig)
	case cfg.CheckpointTopic == cfg.DeadLetterTopic:
		return nil, fmt.Errorf("%w: the checkpoint topic is the dead-letter topic", ErrConfig)
	case cfg.Producers < 0 || cfg.TransactionTimeout < 0 || cfg.MaxDeadLetterBytes < 0:
		return nil, fmt.Errorf("%w: negative Producers, TransactionTimeout or MaxDeadLetterBytes", ErrConfig)
	case cfg.Linger > time.Second:
		return nil, fmt.Errorf("%w: Linger %v is above 1s", ErrConfig, cfg.Linger)
	case cfg.GroupPrefix != "" && !cfg.ClientFenceOnly:
		return nil, fmt.Errorf("%w: GroupPrefix renames the commits' group, and the broker fences only commits to the consumer's own group: set it only with ClientFenceOnly", ErrConfig)
	}
	if cfg.TransactionalID == "" {
		cfg.TransactionalID = "workrouter-sink"
	}
	if cfg.Producers == 0 {
		cfg.Producers = 4
	}
	if cfg.MaxDeadLetterBytes == 0 {
		cfg.MaxDeadLetterBytes = 1000012
	}
	if cfg.TransactionTimeout == 0 {
		cfg.TransactionTimeout = 10 * time.Second
	}
	if cfg.Linger == 0 {
		cfg.Linger = 2 * time.Millisecond
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	suffix := hex.EncodeToString(rnd[:])
	// Offsets go by topic name: TxnOffsetCommit v6 and OffsetFetch v10
	// carry topic IDs instead, which a commit for a topic this client has
	// no metadata of could not name.
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(kmsg.TxnOffsetCommit.Int16(), 5)
	versions.SetMaxKeyVersion(kmsg.OffsetFetch.Int16(), 9)
	base := slices.Clip(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.MaxVersions(versions),
		kgo.MetadataMinAge(metadataMinAge)}, cfg.ClientOpts...))
	s := &Sink{cfg: cfg, bound: make(chan struct{}), scopes: map[epochs.Scope]*scopeState{},
		base: base, idBase: cfg.TransactionalID + "-" + suffix + "-", members: map[string]MemberFunc{}}
	s.q.init()
	s.runCtx, s.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	if cfg.ClientFenceOnly {
		close(s.bound)
	}
	var err error
	if s.admin, err = kgo.NewClient(base...); err != nil {
		s.runCancel()
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := s.checkTopics(ctx); err != nil {
		s.admin.Close()
		s.runCancel()
		return nil, err
	}
	s.implicitOffsets = implicitOffsets(ctx, s.admin)
	// The producers start at once: each InitProducerId is a round trip
	// to its transaction coordinator, and a sink waits for all of them.
	for range cfg.Producers {
		s.all = append(s.all, &producer{txnID: s.newTxnID()})
	}
	errs := make([]error, len(s.all))
	var wg sync.WaitGroup
	for i, p := range s.all {
		wg.Go(func() { errs[i] = s.start(ctx, p) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			s.Close() // closes the producers that started
			return nil, err
		}
	}
	for _, p := range s.all {
		s.wg.Add(1)
		go s.committer(p)
	}
	return s, nil
}

// newTxnID returns the next transactional ID of the Sink's producers:
// TransactionalID-<random>-<n>, n counting from 0 over the Sink's life
// (the first Producers at New, each replacement the next).
func (s *Sink) newTxnID() string {
	return s.idBase + strconv.FormatInt(s.nextID.Add(1)-1, 10)
}

// start starts p's client (p.cl nil) with p.txnID and initializes its
// transactional ID (InitProducerId).
func (s *Sink) start(ctx context.Context, p *producer) error {
	cl, err := kgo.NewClient(append(s.base, s.producerOpts(p.txnID)...)...)
	if err == nil {
		if _, _, err = cl.ProducerID(ctx); err != nil {
			cl.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("kafka sink: start transactional producer %q: %w", p.txnID, err)
	}
	s.allMu.Lock()
	defer s.allMu.Unlock()
	if s.closed {
		cl.Close()
		return fmt.Errorf("kafka sink: start transactional producer %q: %w", p.txnID, kgo.ErrClientClosed)
	}
	p.cl = cl
	return nil
}

// log logs msg at level on Config.Logger, if any.
func (s *Sink) log(level slog.Level, msg string, args ...any) {
	if s.cfg.Logger != nil {
		s.cfg.Logger.Log(context.Background(), level, msg, args...)
	}
}

// metadataMinAge is the least time between two metadata requests of
// each of the Sink's clients (Config.ClientOpts may override it). kgo retries a batch the broker refused with a retriable
// error (NOT_ENOUGH_REPLICAS, a leader that moved) only after a metadata
// refresh, and waits for this age since the last one: at kgo's default
// (5s) every such refusal held the transaction, and the partitions whose
// calls it carried, for up to 5s. Apache Kafka refuses a transaction's
// produce this way whenever it cannot yet verify that the partition is in
// the transaction (KIP-890; its ReplicaManager reports the coordinator's
// CONCURRENT_TRANSACTIONS as NOT_ENOUGH_REPLICAS), which happens in normal
// operation. 100ms is the Java producer's retry.backoff.ms. The price is at
// most a metadata request per client per 100ms while a broker keeps
// refusing.
const metadataMinAge = 100 * time.Millisecond

// producerOpts are the options of a transactional producer with ID id.
func (s *Sink) producerOpts(id string) []kgo.Opt {
	return []kgo.Opt{kgo.TransactionalID(id), kgo.TransactionTimeout(s.cfg.TransactionTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
			if topic == s.cfg.DeadLetterTopic {
				return s.cfg.MaxDeadLetterBytes
			}
			return 1000012
		})}
}

// implicitOffsets reports whether the cluster finalized transaction
// version 2 and serves TxnOffsetCommit v5 (KIP-890 part 2): kgo's own
// test before it skips AddOffsetsToTxn. An error reports false (the
// AddOffsetsToTxn is then sent, which every version accepts).
func implicitOffsets(ctx context.Context, cl *kgo.Client) bool {
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		return false
	}
	tv2 := false
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" && f.MaxVersionLevel >= 2 {
			tv2 = true
		}
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == kmsg.TxnOffsetCommit.Int16() && k.MaxVersion >= 5 {
			return tv2
		}
	}
	return false
}

// checkTopics fails when the checkpoint or dead-letter topic is missing.
func (s *Sink) checkTopics(ctx context.Context) error {
	topics := []string{s.cfg.CheckpointTopic}
	if s.cfg.DeadLetterTopic != "" {
		topics = append(topics, s.cfg.DeadLetterTopic)
	}
	md, err := kadm.NewClient(s.admin).Metadata(ctx, topics...)
	if err != nil {
		return fmt.Errorf("kafka sink: metadata of %v: %w", topics, err)
	}
	for _, t := range topics {
		if td, ok := md.Topics[t]; !ok || td.Err != nil {
			return fmt.Errorf("%w: topic %q does not exist; create it first (the checkpoint topic compacted)", ErrConfig, t)
		}
	}
	return nil
}

// BindMember gives the Sink the consumer group member whose tenures it
// serves: each transaction's offset commit carries member's current
// member ID and generation, which the coordinator checks. Typically
// ks.BindMember(worker.Member) right after consumer.New; claims made
// before wait for it. A second call replaces the first. Not needed (and
// ignored) with ClientFenceOnly.
func (s *Sink) BindMember(member MemberFunc) { s.bind(nil, member) }

// BindGroupMember is BindMember for the scopes of one consumer group
// only: a Sink shared by the workers of several groups (one process, one
// set of producers) binds each group's member, and a transaction then
// carries one offset commit per group. A scope of a group bound here uses
// this member, any other scope BindMember's. Not needed (and ignored)
// with ClientFenceOnly.
func (s *Sink) BindGroupMember(group string, member MemberFunc) { s.bind(&group, member) }

// bind binds member to group's scopes, or to every other scope when
// group is nil, and releases the claims that wait for a first member.
func (s *Sink) bind(group *string, member MemberFunc) {
	if s.cfg.ClientFenceOnly || member == nil {
		return
	}
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	first := s.member == nil && len(s.members) == 0
	if group == nil {
		s.member = member
	} else {
		s.members[*group] = member
	}
	if first {
		close(s.bound)
	}
}

// groupMeta returns the group metadata a commit of tok carries, after the
// client-side check: the member must be tok's and its generation at or
// above tok's epoch.
func (s *Sink) groupMeta(op sink.Op, tok epochs.Token) (string, int32, error) {
	if s.cfg.ClientFenceOnly {
		return "", -1, nil
	}
	s.bindMu.Lock()
	f, ok := s.members[tok.Group]
	if !ok {
		f = s.member
	}
	s.bindMu.Unlock()
	if f == nil {
		return "", -1, &GroupFencedError{Op: op, Offered: tok, Generation: -1, Err: fmt.Errorf("%w: no member bound (BindMember)", ErrMemberChanged)}
	}
	member, gen := f()
	if member != tok.Member || gen < tok.Epoch || gen < 0 {
		return member, gen, &GroupFencedError{Op: op, Offered: tok, Member: member, Generation: gen, Err: ErrMemberChanged}
	}
	return member, gen, nil
}

// Close fails the calls still queued (kgo.ErrClientClosed), stops the
// committers, closes the Sink's clients and waits for the committers to
// return; a transaction still open is aborted by the coordinator when
// its producer's session ends or its timeout passes, and its calls fail.
// Close is idempotent.
func (s *Sink) Close() {
	s.closeOnce.Do(func() {
		s.q.stop()
		s.runCancel()
		s.allMu.Lock()
		s.closed = true
		for _, p := range s.all {
			if p.cl != nil {
				p.cl.Close()
			}
		}
		s.allMu.Unlock()
		s.wg.Wait()
		if s.admin != nil {
			s.admin.Close()
		}
	})
}

// PreferredBatch is the sink's sink.Features.PreferredBatch: the MaxBatch
// of a consumer that leaves it zero. A transaction costs several round
// trips to the brokers whatever its size, and a partition's next batch
// waits for its last one's commit, so the batch is what amortizes them.
const PreferredBatch = 2048

// Features declares dead letters when a dead-letter topic is configured;
// no dedupe window and no gaps (see the package doc); and a preferred
// batch of PreferredBatch records.
func (s *Sink) Features() sink.Features {
	return sink.Features{DeadLetters: s.cfg.DeadLetterTopic != "", PreferredBatch: PreferredBatch}
}

func (s *Sink) state(scope epochs.Scope) *scopeState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.scopes[scope]
	if !ok {
		st = &scopeState{fence: sink.Fence{Scope: scope}}
		s.scopes[scope] = st
	}
	return st
}

func (s *Sink) group(scope epochs.Scope) string { return s.cfg.GroupPrefix + scope.Group }

// Claim reads the scope's committed offset (with require_stable, so after
// any pending transaction of it ends) and its metadata (the token of the
// tenure that committed it, the log's topic ID), and decides the claim
// with sink.Fence.CheckClaim on this Sink's fence of the scope (its last
// accepted claim; before its first, the holder that committed last) and
// with sink.CheckLog. It writes nothing to Kafka: the broker's fence is
// the group's own assignment.
func (s *Sink) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	if err := tok.Validate(); err != nil {
		return sink.Checkpoint{}, err
	}
	if err := ctx.Err(); err != nil {
		return sink.Checkpoint{}, err
	}
	select {
	case <-s.bound:
	case <-ctx.Done():
		return sink.Checkpoint{}, fmt.Errorf("kafka sink: claim of %s waits for BindMember: %w", tok, ctx.Err())
	}
	scope := tok.Scope()
	st := s.state(scope)
	st.mu.Lock()
	defer st.mu.Unlock()
	c, err := fetchCommitted(ctx, s.admin, s.group(scope), scope.Topic, scope.Partition)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	f := st.merge(c)
	takeover, err := f.CheckClaim(tok, obs)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	cp, topicID, err := sink.CheckLog(scope, c.found || st.known, f.TopicID, sink.Checkpoint{NextOffset: f.NextOffset}, obs)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	f.Holder, f.NextOffset, f.TopicID = tok, cp.NextOffset, topicID
	f.Version++
	if takeover {
		f.ProofRequired = true
	}
	st.fence, st.known, st.uncertain = f, true, false
	return cp, nil
}

// merge returns the fence this Sink knows of the scope, brought up to
// what the coordinator has: the committed offset is the checkpoint, and
// the committed holder is the holder until this Sink accepts a claim.
func (st *scopeState) merge(c committed) sink.Fence {
	f := st.fence
	if c.found {
		f.NextOffset = c.offset
	} else if !st.known {
		f.NextOffset = 0
	}
	if !st.known {
		// A Sink that never claimed the scope (a new process): the
		// holder that committed last is the stored holder. Once this
		// Sink claimed, its own fence decides (a proven takeover may
		// have put a lower epoch above the committer's); a tenure of
		// another process is fenced by the coordinator, not here.
		f.Holder = c.holder
	}
	if f.TopicID == "" {
		f.TopicID = c.topicID
	}
	return f
}

// begin runs the client-side fence check of op by tok on st (whose mu the
// caller holds) and returns the scope's NextOffset, read from the
// coordinator first if a transaction's outcome was left unknown.
func (s *Sink) begin(ctx context.Context, op sink.Op, st *scopeState, tok epochs.Token) (int64, error) {
	if !st.known {
		// No claim of this Sink (a Sink reopened on the group): the
		// holder that committed last is the one to report.
		scope := tok.Scope()
		c, err := fetchCommitted(ctx, s.admin, s.group(scope), scope.Topic, scope.Partition)
		if err != nil {
			return 0, err
		}
		return 0, &sink.FencedError{Op: op, Stored: c.holder, Offered: tok}
	}
	if !st.fence.Holder.Holds(tok) {
		return 0, &sink.FencedError{Op: op, Stored: st.fence.Holder, Offered: tok}
	}
	if st.uncertain {
		scope := tok.Scope()
		c, err := fetchCommitted(ctx, s.admin, s.group(scope), scope.Topic, scope.Partition)
		if err != nil {
			return 0, err
		}
		if c.found {
			st.fence.NextOffset = c.offset
		}
		st.uncertain = false
	}
	return st.fence.NextOffset, nil
}

// Apply runs the effects of the records at or above NextOffset into a Tx
// (nothing is sent while they run), then, under the scope's client-side
// fence check, produces their records and the checkpoint record in one
// Kafka transaction that also commits the offset past the batch with the
// member's group metadata (KIP-447), and commits it; the transaction may
// be shared with other scopes' calls (the package doc's Group commit). A
// refused offset commit of this tenure aborts the transaction and fails
// with a *GroupFencedError; another tenure's refusal fails it with
// ErrSharedAbort (a sink failure, to be retried); an effect's error sends
// nothing (*sink.EffectError).
func (s *Sink) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*Tx]) (sink.Result, error) {
	if err := sink.CheckBatch(tok, b, effect, s.Features()); err != nil {
		return sink.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return sink.Result{}, err
	}
	st := s.state(tok.Scope())
	st.mu.Lock()
	next, err := s.begin(ctx, sink.OpApply, st, tok)
	st.mu.Unlock()
	if err != nil {
		return sink.Result{}, err
	}
	n := len(b.Offsets)
	first := 0
	for first < n && b.Offsets[first] < next {
		first++
	}
	if first == n {
		return sink.Result{Skipped: n, NextOffset: next}, nil
	}
	tx := newTx(s, n-first)
	for i := first; i < n; i++ {
		if err := effect(ctx, tx, i); err != nil {
			return sink.Result{}, &sink.EffectError{Index: i, Offset: b.Offsets[i], Err: err, TxHealthy: true}
		}
	}
	last := b.Offsets[n-1]
	if _, err := s.commit(ctx, sink.OpApply, st, tok, next, tx.recs, last+1); err != nil {
		return sink.Result{}, err
	}
	return sink.Result{Applied: n - first, Skipped: first, NextOffset: last + 1}, nil
}

// testBeforeOffsetCommit, if set (by this package's tests only), runs in
// every transaction between its records and its offset commit.
var testBeforeOffsetCommit func()

// testBeforeEndTxn, if set (by this package's tests only), runs in every
// transaction between its offset commit and its EndTxn.
var testBeforeEndTxn func()

// maxGenerationRetries bounds the attempts of one commit whose offset
// commit the coordinator refuses for a generation the member's client has
// not learned yet.
const maxGenerationRetries = 8

// ErrRebalancing is matched by the error of an Apply or DeadLetter whose
// offset commit the coordinator kept refusing for the member's generation
// (ILLEGAL_GENERATION, STALE_MEMBER_EPOCH, REBALANCE_IN_PROGRESS) while
// the member's client still had its member ID: a rebalance in progress.
// It is not ErrFenced: nothing was committed, and the call may be retried
// (the consumer does, as a sink failure).
var ErrRebalancing = errors.New("kafka sink: the group is rebalancing: the coordinator refused the member's generation")

// DeadLetter produces rec to the dead-letter topic (its key, value and
// headers, and headers naming the original topic, partition, offset,
// group, reason, error and token) in a transaction that commits the
// offset past it, fenced as Apply is. The result's ID is the dead
// letter's offset in its partition of the dead-letter topic, plus one.
func (s *Sink) DeadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	if err := sink.CheckDeadLetter(tok, rec, s.Features()); err != nil {
		return sink.DeadLetterResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return sink.DeadLetterResult{}, err
	}
	st := s.state(tok.Scope())
	st.mu.Lock()
	next, err := s.begin(ctx, sink.OpDeadLetter, st, tok)
	st.mu.Unlock()
	if err != nil {
		return sink.DeadLetterResult{}, err
	}
	if rec.Offset < next {
		return sink.DeadLetterResult{NextOffset: next}, nil
	}
	r := deadLetterRecord(s.cfg.DeadLetterTopic, tok, rec)
	out, err := s.commit(ctx, sink.OpDeadLetter, st, tok, next, []*kgo.Record{r}, rec.Offset+1)
	if err != nil {
		return sink.DeadLetterResult{}, err
	}
	return sink.DeadLetterResult{ID: out[0].Offset + 1, Stored: true, NextOffset: rec.Offset + 1}, nil
}

// Headers of a dead letter in the dead-letter topic: the names the
// consumer's dead-letter mirror uses (consumer.DLQHeader*).
const (
	HeaderOriginalTopic     = "workrouter-dlt-original-topic"
	HeaderOriginalPartition = "workrouter-dlt-original-partition"
	HeaderOriginalOffset    = "workrouter-dlt-original-offset"
	HeaderGroup             = "workrouter-dlt-group"
	HeaderReason            = "workrouter-dlt-reason"
	HeaderExceptionMessage  = "workrouter-dlt-exception-message"
	HeaderToken             = "workrouter-dlt-token"
	HeaderAttempts          = "workrouter-dlt-attempts"
)

func deadLetterRecord(topic string, tok epochs.Token, rec sink.DeadRecord) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp}
	for _, h := range rec.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	for _, h := range [][2]string{
		{HeaderOriginalTopic, tok.Topic},
		{HeaderOriginalPartition, strconv.Itoa(int(tok.Partition))},
		{HeaderOriginalOffset, strconv.FormatInt(rec.Offset, 10)},
		{HeaderGroup, tok.Group},
		{HeaderReason, rec.Reason},
		{HeaderExceptionMessage, rec.Error},
		{HeaderToken, tok.String()},
		{HeaderAttempts, strconv.Itoa(rec.Attempts)},
	} {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
	}
	return r
}

// IsSinkFailure reports whether err, from Apply or DeadLetter, is the
// sink's (Kafka's) rather than a handler's: effects only buffer records,
// so every error but an effect's own is the sink's (sink.Health).
func (s *Sink) IsSinkFailure(err error) bool {
	var ee *sink.EffectError
	if errors.As(err, &ee) {
		return false
	}
	return err != nil && !errors.Is(err, sink.ErrFenced)
}

// CommitsOffsets reports true: the sink commits the group's offsets in its
// transactions, so a consumer.Worker makes no commit of its own after a
// batch (consumer.OffsetCommitter).
func (s *Sink) CommitsOffsets() bool { return true }

// IsPermanent reports false: no effect error comes from Kafka.
func (s *Sink) IsPermanent(error) bool { return false }

// Ping checks that a broker answers.
func (s *Sink) Ping(ctx context.Context) error { return s.admin.Ping(ctx) }

var (
	_ sink.Sink[*Tx] = (*Sink)(nil)
	_ sink.Health    = (*Sink)(nil)
)

// scopeKey is the checkpoint record's key of scope.
func scopeKey(scope epochs.Scope) string {
	return strings.Join([]string{scope.Group, scope.Topic, strconv.Itoa(int(scope.Partition))}, "/")
}

// errNoBegin and errNotEnded mark a transaction that failed in a way the
// producer does not recover from: its client refused to begin one (kgo
// holds its producer ID fatal, or it is still in a transaction), or the
// abort after a failure failed too (the client may still be in the
// transaction).
var (
	errNoBegin  = errors.New("kafka sink: the producer cannot begin a transaction")
	errNotEnded = errors.New("kafka sink: the transaction did not end")
)

// producerBroken reports whether err, a failed transaction, leaves its
// producer unusable, and names the cause: the broker fenced or forgot
// the producer's epoch (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
// INVALID_PRODUCER_ID_MAPPING: a broker restarted with the transaction
// lost does this, and under KIP-890 kgo holds such a producer ID fatal),
// the transaction's state is not the client's (INVALID_TXN_STATE), a
// record was never answered (kgo.ErrRecordTimeout), or the client could
// not begin or end the transaction (errNoBegin, errNotEnded).
func producerBroken(err error) (string, bool) {
	for _, e := range []error{kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.InvalidProducerIDMapping, kerr.InvalidTxnState} {
		if errors.Is(err, e) {
			return e.(*kerr.Error).Message, true
		}
	}
	switch {
	case errors.Is(err, kgo.ErrRecordTimeout):
		return "record never answered", true
	case errors.Is(err, errNoBegin):
		return "cannot begin a transaction", true
	case errors.Is(err, errNotEnded):
		return "abort failed", true
	}
	return "", false
}

// replaceTimeout bounds each step of a replacement (the old ID's abort,
// the new ID's InitProducerId).
func (s *Sink) replaceTimeout() time.Duration { return min(s.cfg.TransactionTimeout, 10*time.Second) }

// replace closes p's client, whose transaction failed with err (cause:
// producerBroken's name), and gives p a new transactional ID
// (newTxnID), never used before, whose client it starts. Before, it
// initializes the old transactional ID once more (InitProducerId), which
// makes its transaction coordinator abort the transaction the old client
// left open, writing ABORT markers to the partitions it touched, so that
// read_committed consumers and require_stable offset fetches do not wait
// for the transaction timeout (AbortMarkers counts these). If the broker
// is not back yet, the abort is left to the coordinator's transaction
// timeout, and the new client is started by the next commit that draws
// p. The caller holds p (it is not in the pool).
func (s *Sink) replace(ctx context.Context, p *producer, cause string, err error) {
	s.allMu.Lock()
	old := p.cl
	p.cl = nil
	closed := s.closed
	s.allMu.Unlock()
	if old != nil {
		old.Close()
	}
	if closed {
		// Close ends the Sink: nothing to replace p for.
		s.log(slog.LevelWarn, "kafka sink: transactional producer failed at Close, not replaced",
			"transactional_id", p.txnID, "cause", cause, "err", err)
		return
	}
	oldID := p.txnID
	p.txnID = s.newTxnID()
	s.replaced.Add(1)
	bctx := context.WithoutCancel(ctx)

	actx, cancel := context.WithTimeout(bctx, s.replaceTimeout())
	aerr := s.abortID(actx, oldID)
	markers := 0
	if aerr == nil {
		markers, aerr = s.writeAborts(actx, p.pid, p.epoch, p.touched)
	}
	cancel()
	s.abortMarkers.Add(int64(markers))
	if aerr != nil {
		s.abortFailed.Add(1)
	}
	sctx, cancel := context.WithTimeout(bctx, s.replaceTimeout())
	serr := s.start(sctx, p)
	cancel()
	if serr != nil {
		s.startFailed.Add(1)
	}
	s.log(slog.LevelWarn, "kafka sink: transactional producer replaced", "old_transactional_id", oldID,
		"new_transactional_id", p.txnID, "cause", cause, "err", err, "abort_markers", markers, "abort_err", aerr,
		"started", serr == nil, "start_err", serr)
}

// abortID initializes transactional ID id with a client of its own and
// closes it: the coordinator aborts (with markers) a transaction of id
// still open and bumps its epoch.
func (s *Sink) abortID(ctx context.Context, id string) error {
	cl, err := kgo.NewClient(append(s.base, kgo.TransactionalID(id), kgo.TransactionTimeout(s.cfg.TransactionTimeout))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, _, err = cl.ProducerID(ctx)
	return err
}

// writeAborts writes an ABORT marker of producer pid at epoch to each
// partition in touched (WriteTxnMarkers, which kgo sends to each
// partition's leader) and returns how many were written. It is for a
// broker that lost the transaction at a restart and wrote no marker
// (kfake: its read_committed fetches then never return the transaction's
// last records, and a reader waiting for the partition's last offset
// waits forever). Sent after abortID, so a transaction the coordinator
// still had is complete (aborted, or committed if its commit was under
// way); a marker of a producer with no open transaction in the partition
// ends nothing, and one at an epoch the partition has seen superseded is
// refused. A broker that refuses the request (it is the coordinator's,
// and needs CLUSTER_ACTION where ACLs are on) writes nothing: the error
// says so.
func (s *Sink) writeAborts(ctx context.Context, pid int64, epoch int16, touched map[string][]int32) (int, error) {
	if pid < 0 || len(touched) == 0 {
		return 0, nil
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed = pid, epoch, false
	for _, t := range slices.Sorted(maps.Keys(touched)) {
		mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		mt.Topic, mt.Partitions = t, touched[t]
		m.Topics = append(m.Topics, mt)
	}
	req.Markers = []kmsg.WriteTxnMarkersRequestMarker{m}
	resp, err := req.RequestWith(ctx, s.admin)
	if err != nil {
		return 0, fmt.Errorf("kafka sink: write ABORT markers of producer %d: %w", pid, err)
	}
	n := 0
	var errs []error
	for _, rm := range resp.Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("kafka sink: ABORT marker of producer %d in %s/%d: %w", pid, rt.Topic, rp.Partition, err))
				} else {
					n++
				}
			}
		}
	}
	return n, errors.Join(errs...)
}

// Stats are the Sink's counters since New.
type Stats struct {
	// ProducersReplaced counts transactional producers closed and
	// replaced by one with a new transactional ID, after a transaction
	// failed in a way the producer does not recover from (a broker
	// restart that lost the transaction, a fenced or fatal producer ID,
	// INVALID_TXN_STATE, a record never answered): each is a Warn line.
	ProducersReplaced int64
	// AbortMarkers counts the ABORT markers a replacement wrote itself
	// (WriteTxnMarkers), one per partition the failed transaction
	// produced to, after initializing the old transactional ID once more
	// (which makes a coordinator that still has the transaction abort it
	// with markers of its own).
	AbortMarkers int64
	// AbortsFailed counts replacements whose old ID could not be
	// initialized (the broker was not back) or whose markers were
	// refused: a transaction the coordinator still has then ends at its
	// timeout; one it lost stays without a marker.
	AbortsFailed int64
	// StartsFailed counts replacement producers that could not
	// initialize their transactional ID; the next commit that draws one
	// tries again (and fails as a sink failure if it cannot).
	StartsFailed int64
	// Transactions counts the transactions begun (committed or not).
	Transactions int64
	// SharedCalls counts the calls (Apply, DeadLetter) that were in a
	// transaction with at least one other call, once per attempt.
	SharedCalls int64
	// Lingered counts the times a committer waited (Config.Linger) for
	// the calls of other active scopes before it began a transaction.
	Lingered int64

	// Calls counts the calls (Apply, DeadLetter) queued for a
	// transaction, and CallTime sums how long each waited for its
	// result, from queued to answered, whatever the result: the queue,
	// the linger and every transaction attempt it was in. A call's wait
	// covers the transactions it waited for, so once the calls have
	// returned, none of them given up by its context while its
	// transaction ran, CallTime is at least ProduceTime +
	// OffsetCommitTime + EndTime (a snapshot taken while calls are in
	// flight counts their transactions' finished steps, not yet their
	// waits); CallTime/Calls against (ProduceTime + OffsetCommitTime +
	// EndTime)/Transactions is how long a call waits beyond a
	// transaction.
	Calls    int64
	CallTime time.Duration
	// ProduceTime sums, over the transactions, the step that sends
	// their records and waits for every acknowledgement;
	// OffsetCommitTime the offset commits (TxnOffsetCommit, with
	// AddOffsetsToTxn where the cluster needs it); EndTime the EndTxn
	// requests (a commit, or an abort after a failed step).
	ProduceTime      time.Duration
	OffsetCommitTime time.Duration
	EndTime          time.Duration
}

// Stats returns the Sink's counters.
func (s *Sink) Stats() Stats {
	return Stats{ProducersReplaced: s.replaced.Load(), AbortMarkers: s.abortMarkers.Load(),
		AbortsFailed: s.abortFailed.Load(), StartsFailed: s.startFailed.Load(),
		Transactions: s.txns.Load(), SharedCalls: s.shared.Load(), Lingered: s.q.lingered.Load(),
		Calls: s.calls.Load(), CallTime: time.Duration(s.callNs.Load()),
		ProduceTime: time.Duration(s.produceNs.Load()), OffsetCommitTime: time.Duration(s.offsetsNs.Load()),
		EndTime: time.Duration(s.endNs.Load())}
}

// addSince adds the time since t, in nanoseconds, to a.
func addSince(a *atomic.Int64, t time.Time) { a.Add(int64(time.Since(t))) }
