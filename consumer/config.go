package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// Protocol selects the consumer group protocol.
type Protocol int

const (
	// Cooperative is the classic group protocol with the cooperative-sticky
	// balancer: partitions a member keeps across a rebalance are not
	// revoked. The tenure epoch is the group generation at assignment.
	// It is the default.
	Cooperative Protocol = iota
	// KIP848 is the next-generation protocol (KIP-848) where the broker
	// assigns partitions. The tenure epoch is the member epoch at
	// assignment. It needs a broker that supports it (Kafka 4.0+, kfake).
	KIP848
)

// String returns "cooperative" or "kip848".
func (p Protocol) String() string {
	switch p {
	case Cooperative:
		return "cooperative"
	case KIP848:
		return "kip848"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// Command is one record handed to a Handler: the producer's command plus
// where it came from and the tenure token it is applied under.
type Command struct {
	envelope.Command
	Offset    int64
	Timestamp time.Time
	// Token is the fencing token of the tenure applying this command. Pass
	// it (and the idempotency key topic ID/partition/offset) downstream
	// when writing to a resource that cannot be fenced by the sink's
	// transaction.
	Token epochs.Token
	// TopicID is the identity of the log the command was read from
	// (Kafka's topic ID; empty if the broker has none). A position
	// (partition, offset) is unique only within one log: key anything by
	// position together with it (docs/design.md#log-identity).
	TopicID string
}

// Handler applies one command's effects through the sink's transaction
// handle tx. It runs inside the sink's atomic unit: return an error to
// abort that unit. The records before the command in its batch are then
// applied without it, and the command is retried with backoff until
// Config.Poison decides (docs/design.md#dead-letters): by default it is
// dead-lettered once its retry budget is spent (Poison.MaxAttempts failed
// attempts or Poison.MaxRetryTime), or at once for an error marked
// Permanent; under PoisonStall it is retried until it applies. A command
// is passed over only with a dead letter, which the sink stores in the
// fenced unit that moves the checkpoint past it. A handler may run more
// than once for the same command if a batch is retried, so it must not
// have side effects outside tx. It is called from the partition's
// goroutine; handlers of different partitions run concurrently, and with
// Config.KeyConcurrency above 1 it is called from the partition's lanes:
// handlers of different keys of one partition run concurrently too (one
// key's commands never do).
//
// cmd's byte slices (Key, Payload, header values) belong to the handler
// once it is called: the Worker never reuses or overwrites them, so a
// handler may keep them after it returns without copying.
type Handler[Tx any] func(ctx context.Context, tx Tx, cmd Command) error

// Config configures a Worker. The zero value of every optional field is a
// documented default.
type Config[Tx any] struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Group is the consumer group. Required.
	Group string
	// Topic is the topic of commands. Required.
	Topic string
	// Sink is the fenced sink every batch is applied to. Required.
	Sink sink.Sink[Tx]
	// Handlers maps a command Type to its handler. At least one is required.
	// What happens to a record whose Type has no handler, that is not a
	// command, or whose handler keeps failing, is Poison's decision
	// (docs/design.md#dead-letters): by default a command without a
	// handler stalls its partition until one is deployed, a record that
	// is not a command is dead-lettered at once, and a command whose
	// handler fails is retried until Poison.MaxAttempts failed attempts
	// (8) or Poison.MaxRetryTime (1 minute), then dead-lettered (at once
	// for an error marked Permanent). A dead letter is the sink's row of
	// the record, stored in the fenced unit that moves the checkpoint past
	// it: a record is never passed over without one, and with a sink that
	// cannot store dead letters (no Features.DeadLetters) it stalls instead.
	Handlers map[string]Handler[Tx]
	// Poison says what happens to records that cannot be applied
	// (docs/design.md#dead-letters); the zero value is its documented
	// defaults.
	Poison PoisonPolicy
	// DeadLetterTopic, if set, is the Kafka topic the Worker mirrors the
	// dead letters of the partitions it owns to, from the sink's rows after
	// they commit (at least once, keyed like the original, with headers
	// naming the original topic, partition, offset, group, reason, error
	// and token). It needs a sink with dlq.Store; it must exist (New
	// fails with ErrDeadLetterTopicMissing) and must not be Topic
	// (ErrDeadLetterLoop). Empty disables the mirror; the sink's rows are
	// the record either way. A mirrored record has the dead letter's key,
	// value and headers, plus DLQHeaderOriginalTopic,
	// DLQHeaderOriginalPartition, DLQHeaderOriginalOffset, DLQHeaderGroup,
	// DLQHeaderReason, DLQHeaderExceptionClass, DLQHeaderExceptionMessage,
	// DLQHeaderToken and DLQHeaderID.
	DeadLetterTopic string
	// DeadLetterCompression is the codec of the record batches the
	// DeadLetterTopic mirror produces; default envelope.CompressionNone,
	// which every Kafka client reads without a plugin
	// (docs/interop.md#compression-what-each-consumer-needs). A
	// kgo.ProducerBatchCompression in ClientOpts overrides it.
	DeadLetterCompression envelope.Compression
	// ReclaimInterval is how often the Worker claims again a partition
	// whose claim was refused for a reason an operator must resolve (the
	// log changed, the epochs went backwards), so that it resumes by
	// itself once the operator's reset makes the claim valid; default
	// 10s.
	ReclaimInterval time.Duration

	// NoTakeover keeps a partition whose stored holder belongs to an
	// earlier incarnation of the group (ErrEpochRegressed: the group was
	// deleted and recreated, expired, or lost by the broker) blocked until
	// an operator resets its fence. By default (false) the Worker takes
	// such a partition over by itself with a proof of its membership
	// whose group epoch is below the holder's, which the sink audits as a
	// reset of that holder and which leaves a proof required of every
	// later claim (docs/design.md#expired-groups).
	NoTakeover bool

	// Partitioner is how the topic's producers map keys to partitions;
	// default envelope.Murmur2, the router's default. The Worker checks every
	// record against it and reports (or, under MisrouteRefuse, refuses)
	// the ones whose key maps to another partition (see Misrouted and
	// docs/design.md#hazard-11). Set envelope.CRC32 for a topic whose
	// producers use librdkafka's default partitioner.
	Partitioner envelope.Partitioner
	// Misroute is what happens to a misrouted record; default
	// MisrouteApply (apply it, report it).
	Misroute MisroutePolicy

	// Protocol selects the group protocol; default Cooperative.
	Protocol Protocol
	// KeyConcurrency is how many lanes apply one partition's records
	// concurrently (docs/operating.md#key-concurrency); default 1: the
	// partition is applied one batch at a time, in offset order, the
	// fastest path for fast handlers. With N > 1 a key is bound to one
	// lane while any of its records is queued or in flight there, so its
	// records are applied by one lane at a time, in offset order; a key
	// with nothing pending goes to the least-loaded lane (fewest pending
	// records). Each lane batches (MaxBatch) and applies through
	// the sink's checkpoint with gaps: the sink must declare
	// sink.Features.Gaps, else New fails with an error matching ErrConfig
	// and sink.ErrUnsupported. Records of different keys are then applied out of
	// offset order: a handler that must see a partition's records in
	// order across keys needs 1. Records without a key (not commands:
	// dead-lettered as undecodable by default) are one key, ordered
	// among themselves. A poison record holds up only the keys bound to
	// its lane until that lane's queue (max(QueueSize/N, MaxBatch)
	// records) is full; then the partition's fetching pauses. At most
	// MaxKeyConcurrency.
	KeyConcurrency int
	// MaxBatch is the most records applied in one sink Apply; default the
	// sink's preference (sink.Features.PreferredBatch; 2048 for package
	// sink/kafka), else 256.
	MaxBatch int
	// QueueSize is how many fetched records a partition may buffer before
	// its fetching is paused (it resumes at half); default 32×MaxBatch, or
	// 32×256 when MaxBatch is left to the sink's preference (whose larger
	// batches would otherwise have a worker buffer far ahead of what it
	// applies), and never below MaxBatch.
	// A queue may exceed it by one fetch of its partition (at most kgo's
	// FetchMaxPartitionBytes, 1 MiB by default). Pausing is what keeps one
	// slow partition from stalling the others, but a resumed partition
	// waits for the broker's in-flight fetch (up to 25ms when the other
	// partitions are caught up), so a queue smaller than a fetch makes a
	// fast handler wait on every fetch (docs/performance.md measures the
	// cost of a small queue).
	QueueSize int
	// RevokeTimeout bounds how long a revoked or lost partition's in-flight
	// batch may take before its context is cancelled; default 10s.
	RevokeTimeout time.Duration
	// SessionTimeout is the group session timeout; default 45s.
	SessionTimeout time.Duration
	// RebalanceTimeout is the group rebalance timeout; default 60s.
	RebalanceTimeout time.Duration
	// HeartbeatInterval is the group heartbeat interval; default 3s.
	HeartbeatInterval time.Duration
	// RetryBackoff is the first wait before retrying a failed batch or
	// claim; it doubles up to MaxRetryBackoff. Defaults 50ms and 5s.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration

	// InstanceID requests static membership (group.instance.id). It is
	// refused unless AllowStaticMembership is set: see ErrStaticMembership.
	InstanceID string
	// AllowStaticMembership accepts InstanceID. Hazard (docs/design.md#hazard-1): a
	// restarted static member replaces the old one without a rebalance, so
	// a paused zombie and its replacement share one generation and
	// generation fencing cannot tell their writes apart. Set it only if
	// something else fences the sink writes as well.
	AllowStaticMembership bool

	// ClientID names this member in the group; default "workrouter".
	ClientID string
	// ClientOpts are extra franz-go options appended after the worker's own:
	// TLS, SASL, a dialer, timeouts, fetch sizes, hooks. Options that would
	// undo the worker's guarantees are refused by New with an error naming
	// the option (matching ErrConfig): another group, topics or balancer,
	// automatic commits, the group callbacks or fetch offset adjustment,
	// read-uncommitted isolation, control records, reset or start offsets,
	// blocking rebalances on poll, share groups, and a group instance ID
	// (ErrStaticMembership) unless AllowStaticMembership is set.
	ClientOpts []kgo.Opt
	// Logger, if set, receives structured logs of every event (see
	// NewLogObserver); nil logs nothing.
	Logger *slog.Logger
	// LagInterval is how often the Worker lists the topic's end offsets
	// (Lag events, workrouter_consumer_lag) and checks that the topic
	// exists (TopicMissing, never twice within 5 s); default
	// DefaultLagInterval (10s).
	LagInterval time.Duration

	// Observers receive every event of the Worker (see Observer), after
	// the logging observer built from Logger. Use them to follow claims,
	// fences, stalls and commits in your own program: package
	// consumer/consumerprom turns them into Prometheus metrics, package
	// consumer/eventlog streams them as JSON lines.
	Observers []Observer

	// commitPace is the committer's least time between two commits;
	// default the constant commitPace. Only this package's tests set it.
	commitPace time.Duration
	// topicCheckEvery is the least time between two checks of whether
	// the topic exists; default minTopicCheckInterval. Only this
	// package's tests set it.
	topicCheckEvery time.Duration
	// diagnoseTimeout bounds the look at the group that tells a fenced
	// claim from a regression (diagnose); default diagnoseTimeout. Only
	// this package's tests set it.
	diagnoseTimeout time.Duration
}

// diagnoseTimeout bounds how long diagnose looks at the group before it
// reports a fenced claim as fenced (no regression shown). Tests may set
// another in Config.diagnoseTimeout.
const diagnoseTimeout = 5 * time.Second

// MaxKeyConcurrency is the most lanes Config.KeyConcurrency may give a
// partition. Each lane is a goroutine with a queue, and with its own
// fenced transactions a lane costs the sink a connection while it applies;
// lanes beyond the handlers that can usefully wait at once cost memory
// and sink load for nothing (docs/operating.md#key-concurrency gives the
// measured cost of an idle lane).
const MaxKeyConcurrency = 1024

// ErrConfig is matched by every configuration error returned by New.
var ErrConfig = errors.New("consumer: invalid config")

// ErrDeadLetterLoop is matched (with ErrConfig) by the error New returns
// when Config.DeadLetterTopic is Config.Topic: the Worker would consume its
// own dead letters as commands.
var ErrDeadLetterLoop = fmt.Errorf("%w: the dead-letter topic is the command topic, so the worker would consume its own dead letters as commands", ErrConfig)

// ErrDeadLetterTopicMissing is matched (with ErrConfig) by the error New
// returns when the brokers say Config.DeadLetterTopic does not exist: the
// mirror would fail on every dead letter, or create the topic with the
// broker's defaults where auto-creation is on.
var ErrDeadLetterTopicMissing = fmt.Errorf("%w: the dead-letter topic does not exist", ErrConfig)

// ErrStaticMembership is matched by the error New returns when static
// membership is requested without AllowStaticMembership.
var ErrStaticMembership = errors.New("consumer: static membership refused: a restarted static member replaces the old one without a rebalance, " +
	"so a paused zombie and its replacement share one generation and generation fencing cannot tell their writes apart (docs/design.md#hazard-1); " +
	"remove the instance ID, or set AllowStaticMembership only if the sink is fenced by something else too")

func (c *Config[Tx]) withDefaults() (Config[Tx], error) {
	out := *c
	switch {
	case len(out.Brokers) == 0:
		return out, fmt.Errorf("%w: no brokers", ErrConfig)
	case out.Group == "":
		return out, fmt.Errorf("%w: empty group", ErrConfig)
	case out.Topic == "":
		return out, fmt.Errorf("%w: empty topic", ErrConfig)
	case out.Sink == nil:
		return out, fmt.Errorf("%w: nil sink", ErrConfig)
	case len(out.Handlers) == 0:
		return out, fmt.Errorf("%w: no handlers", ErrConfig)
	case !out.Partitioner.Valid():
		return out, fmt.Errorf("%w: unknown Partitioner %v", ErrConfig, out.Partitioner)
	case out.Misroute != MisrouteApply && out.Misroute != MisrouteRefuse:
		return out, fmt.Errorf("%w: unknown Misroute policy %v", ErrConfig, out.Misroute)
	case out.Protocol != Cooperative && out.Protocol != KIP848:
		return out, fmt.Errorf("%w: unknown protocol %d", ErrConfig, int(out.Protocol))
	case out.KeyConcurrency < 0:
		return out, fmt.Errorf("%w: negative KeyConcurrency %d", ErrConfig, out.KeyConcurrency)
	case out.KeyConcurrency > MaxKeyConcurrency:
		return out, fmt.Errorf("%w: KeyConcurrency %d is above MaxKeyConcurrency (%d)", ErrConfig, out.KeyConcurrency, MaxKeyConcurrency)
	case out.MaxBatch < 0, out.QueueSize < 0, out.RevokeTimeout < 0, out.SessionTimeout < 0,
		out.RebalanceTimeout < 0, out.HeartbeatInterval < 0, out.RetryBackoff < 0, out.MaxRetryBackoff < 0,
		out.LagInterval < 0, out.ReclaimInterval < 0:
		return out, fmt.Errorf("%w: negative size or duration", ErrConfig)
	case !out.DeadLetterCompression.Valid():
		return out, fmt.Errorf("%w: unknown DeadLetterCompression %q", ErrConfig, out.DeadLetterCompression)
	case out.DeadLetterTopic != "" && out.DeadLetterTopic == out.Topic:
		return out, fmt.Errorf("%w (DeadLetterTopic %q); create a topic of its own for the dead letters", ErrDeadLetterLoop, out.DeadLetterTopic)
	case out.InstanceID != "" && !out.AllowStaticMembership:
		return out, fmt.Errorf("%w (instance ID %q)", ErrStaticMembership, out.InstanceID)
	}
	if err := out.checkClientOpts(); err != nil {
		return out, err
	}
	for typ, h := range out.Handlers {
		if typ == "" || h == nil {
			return out, fmt.Errorf("%w: handler for type %q is empty or nil", ErrConfig, typ)
		}
	}
	if out.KeyConcurrency == 0 {
		out.KeyConcurrency = 1
	}
	if out.KeyConcurrency > 1 && !out.Sink.Features().Gaps {
		return out, fmt.Errorf("%w: KeyConcurrency %d needs a sink with a checkpoint with gaps (sink.Features.Gaps), and %T declares none: %w; use KeyConcurrency 1",
			ErrConfig, out.KeyConcurrency, out.Sink, sink.ErrUnsupported)
	}
	if out.QueueSize == 0 { // of MaxBatch as given, not the sink's preference
		out.QueueSize = 32 * cmp.Or(out.MaxBatch, 256)
	}
	if out.MaxBatch == 0 {
		out.MaxBatch = cmp.Or(max(out.Sink.Features().PreferredBatch, 0), 256)
	}
	if out.QueueSize < out.MaxBatch {
		out.QueueSize = out.MaxBatch
	}
	if out.RevokeTimeout == 0 {
		out.RevokeTimeout = 10 * time.Second
	}
	if out.RetryBackoff == 0 {
		out.RetryBackoff = 50 * time.Millisecond
	}
	if out.MaxRetryBackoff == 0 {
		out.MaxRetryBackoff = 5 * time.Second
	}
	if out.MaxRetryBackoff < out.RetryBackoff {
		out.MaxRetryBackoff = out.RetryBackoff
	}
	if out.LagInterval == 0 {
		out.LagInterval = DefaultLagInterval
	}
	if out.ReclaimInterval == 0 {
		out.ReclaimInterval = 10 * time.Second
	}
	if out.topicCheckEvery <= 0 {
		out.topicCheckEvery = minTopicCheckInterval
	}
	if out.commitPace <= 0 {
		out.commitPace = commitPace
	}
	if out.diagnoseTimeout <= 0 {
		out.diagnoseTimeout = diagnoseTimeout
	}
	var err error
	if out.Poison, err = out.Poison.withDefaults(); err != nil {
		return out, err
	}
	if out.ClientID == "" {
		out.ClientID = "workrouter"
	}
	for i, o := range out.Observers {
		if o == nil {
			return out, fmt.Errorf("%w: Observers[%d] is nil", ErrConfig, i)
		}
	}
	return out, nil
}

// clientOpts returns the franz-go options of the Worker's client: its own,
// then Config.ClientOpts (checked by checkClientOpts once the client
// exists).
func (w *Worker[Tx]) clientOpts() []kgo.Opt {
	c := w.cfg
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.ConsumerGroup(c.Group),
		kgo.ConsumeTopics(c.Topic),
		kgo.DisableAutoCommit(),
		// Never jump over an out-of-range position: the poll loop sees
		// the error and the partition is claimed again, which checks
		// the log (docs/design.md#log-identity).
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.OnPartitionsAssigned(w.onAssigned),
		kgo.OnPartitionsRevoked(w.onRevoked),
		kgo.OnPartitionsLost(w.onLost),
		kgo.AdjustFetchOffsetsFn(w.adjustOffsets),
		// The client produces only the dead-letter mirror.
		c.DeadLetterCompression.Opt(),
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
	return append(opts, c.ClientOpts...)
}

// guardedOpts are the franz-go options a Worker sets itself and that
// Config.ClientOpts must not set, with why.
var guardedOpts = map[string]string{
	"ConsumerGroup":             "moves the worker to another group; use Config.Group",
	"ConsumeTopics":             "changes the topics; a worker consumes exactly Config.Topic",
	"ConsumeRegex":              "makes the topic a pattern; a worker consumes exactly Config.Topic",
	"ConsumeExcludeTopics":      "changes the topics; a worker consumes exactly Config.Topic",
	"ConsumePartitions":         "assigns partitions directly, bypassing the group epochs that fence the sink",
	"ShareGroup":                "makes a share group, which has no partition ownership to fence",
	"Balancers":                 "replaces the balancer of Config.Protocol",
	"ServerSideBalancer":        "changes the group protocol; use Config.Protocol",
	"GroupProtocol":             "changes the group protocol; use Config.Protocol",
	"AutoCommitMarks":           "turns on automatic commits; the worker commits its fenced Applies itself",
	"AutoCommitInterval":        "configures automatic commits; the worker commits its fenced Applies itself",
	"AutoCommitCallback":        "configures automatic commits; the worker commits its fenced Applies itself",
	"GreedyAutoCommit":          "turns on automatic commits; the worker commits its fenced Applies itself",
	"BlockRebalanceOnPoll":      "would block rebalances behind the worker's poll loop",
	"OnPartitionsAssigned":      "replaces the callback that captures the tenure token; use Config.Observers",
	"OnPartitionsRevoked":       "replaces the callback that stops a revoked partition; use Config.Observers",
	"OnPartitionsLost":          "replaces the callback that stops a lost partition; use Config.Observers",
	"AdjustFetchOffsetsFn":      "replaces the claim that starts fetching at the sink's checkpoint",
	"OnOffsetsFetched":          "may change where fetching starts; the sink's checkpoint decides it",
	"FetchIsolationLevel":       "could apply records of aborted transactions",
	"KeepControlRecords":        "would hand transaction markers to the handlers",
	"ConsumeResetOffset":        "could skip records silently when an offset is out of range",
	"ConsumeStartOffset":        "changes where fetching starts; the sink's checkpoint decides it",
	"InstanceID":                "requests static membership; use Config.InstanceID",
	"DisableAutoCommit":         "is set by the worker already",
	"RequireStableFetchOffsets": "is not needed: the sink's checkpoint decides where fetching starts",
}

// optName returns the name of the kgo option function that built o
// ("Balancers" for kgo.Balancers(…)), or "" if it cannot tell. kgo options
// are structs holding one closure, named after the option function;
// TestClientOptsRefused pins this for every guarded option.
func optName(o kgo.Opt) string {
	v := reflect.ValueOf(o)
	if v.Kind() != reflect.Struct || v.NumField() != 1 || v.Field(0).Kind() != reflect.Func || v.Field(0).IsNil() {
		return ""
	}
	fn := runtime.FuncForPC(v.Field(0).Pointer())
	if fn == nil {
		return ""
	}
	parts := strings.Split(fn.Name(), ".")
	if len(parts) < 2 || !strings.HasPrefix(parts[len(parts)-1], "func") {
		return ""
	}
	return parts[len(parts)-2]
}

// checkClientOpts refuses Config.ClientOpts that set an option the
// Worker's guarantees rest on (see guardedOpts), naming the option.
func (c *Config[Tx]) checkClientOpts() error {
	for i, o := range c.ClientOpts {
		if o == nil {
			return fmt.Errorf("%w: ClientOpts[%d] is nil", ErrConfig, i)
		}
		name := optName(o)
		why, guarded := guardedOpts[name]
		if !guarded {
			continue
		}
		if name == "InstanceID" {
			if c.AllowStaticMembership {
				continue
			}
			return fmt.Errorf("%w (set through ClientOpts[%d], kgo.InstanceID)", ErrStaticMembership, i)
		}
		return fmt.Errorf("%w: ClientOpts[%d] is kgo.%s, which %s; the worker refuses it because it would undo the fencing guarantees", ErrConfig, i, name, why)
	}
	return nil
}
