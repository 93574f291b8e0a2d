package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/router"
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
	router.Command
	Offset    int64
	Timestamp time.Time
	// Token is the fencing token of the tenure applying this command. Pass
	// it (and the idempotency key topic/partition/offset) downstream when
	// writing to a resource that cannot be fenced by the sink's transaction.
	Token epochs.Token
}

// Handler applies one command's effects through the sink's transaction
// handle tx. It runs inside the sink's atomic unit: return an error to abort
// the whole batch (it is retried with backoff, never skipped). A handler may
// run more than once for the same command if a batch is retried, so it must
// not have side effects outside tx. It is called from the partition's
// goroutine; handlers of different partitions run concurrently.
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
	// A record whose Type has no handler stalls its partition (retried with
	// backoff and logged) until a handler for it is deployed: commands are
	// never silently skipped.
	Handlers map[string]Handler[Tx]

	// Protocol selects the group protocol; default Cooperative.
	Protocol Protocol
	// MaxBatch is the most records applied in one sink Apply; default 256.
	MaxBatch int
	// QueueSize is how many fetched records a partition may buffer before
	// its fetching is paused (it resumes at half); default 32×MaxBatch.
	// A queue may exceed it by one fetch of its partition (at most kgo's
	// FetchMaxPartitionBytes, 1 MiB by default). Pausing is what keeps one
	// slow partition from stalling the others, but a resumed partition
	// waits for the broker's in-flight fetch (up to 200ms when the other
	// partitions are caught up), so a queue smaller than a fetch makes a
	// fast handler wait on every fetch: 4×MaxBatch ran the no-op W1
	// benchmark at 0.56 of raw kgo, 32×MaxBatch at 0.97.
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
	// AllowStaticMembership accepts InstanceID. Hazard (DESIGN.md §4.1): a
	// restarted static member replaces the old one without a rebalance, so
	// a paused zombie and its replacement share one generation and
	// generation fencing cannot tell their writes apart. Set it only if
	// something else fences the sink writes as well.
	AllowStaticMembership bool

	// ClientID names this member in the group; default "workrouter".
	ClientID string
	// ClientOpts are extra franz-go options appended after the worker's own
	// (TLS, SASL, dialer…). Options that change group semantics (balancers,
	// auto-commit, callbacks) break the worker's guarantees.
	ClientOpts []kgo.Opt
	// Logger receives structured logs; default discards.
	Logger *slog.Logger
	// Registerer, if set, receives the Worker's Prometheus metrics (see
	// the package documentation, "Metrics"), registered by New with a
	// constant label group=Group and unregistered by Close. New fails with
	// an error matching ErrConfig if they cannot be registered (for
	// instance, another Worker of the same group already registered them
	// on it). Nil disables metrics at no cost.
	Registerer prometheus.Registerer
	// LagInterval is how often, with metrics enabled, the Worker lists the
	// topic's end offsets to refresh workrouter_consumer_lag; default
	// DefaultLagInterval (10s).
	LagInterval time.Duration

	// OnFenced, if set, is called from the partition's goroutine (or the
	// group's assignment goroutine for claims) with every fenced outcome.
	// The error matches sink.ErrFenced, and also ErrEpochRegressed when the
	// group's epochs went backwards.
	OnFenced func(error)
}

// ErrConfig is matched by every configuration error returned by New.
var ErrConfig = errors.New("consumer: invalid config")

// ErrStaticMembership is matched by the error New returns when static
// membership is requested without AllowStaticMembership.
var ErrStaticMembership = errors.New("consumer: static membership refused: a restarted static member replaces the old one without a rebalance, " +
	"so a paused zombie and its replacement share one generation and generation fencing cannot tell their writes apart (DESIGN.md hazard 1); " +
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
	case out.Protocol != Cooperative && out.Protocol != KIP848:
		return out, fmt.Errorf("%w: unknown protocol %d", ErrConfig, int(out.Protocol))
	case out.MaxBatch < 0, out.QueueSize < 0, out.RevokeTimeout < 0, out.SessionTimeout < 0,
		out.RebalanceTimeout < 0, out.HeartbeatInterval < 0, out.RetryBackoff < 0, out.MaxRetryBackoff < 0,
		out.LagInterval < 0:
		return out, fmt.Errorf("%w: negative size or duration", ErrConfig)
	case out.InstanceID != "" && !out.AllowStaticMembership:
		return out, fmt.Errorf("%w (instance ID %q)", ErrStaticMembership, out.InstanceID)
	}
	for typ, h := range out.Handlers {
		if typ == "" || h == nil {
			return out, fmt.Errorf("%w: handler for type %q is empty or nil", ErrConfig, typ)
		}
	}
	if out.MaxBatch == 0 {
		out.MaxBatch = 256
	}
	if out.QueueSize == 0 {
		out.QueueSize = 32 * out.MaxBatch
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
	if out.ClientID == "" {
		out.ClientID = "workrouter"
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return out, nil
}
