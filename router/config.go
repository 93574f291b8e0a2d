package router

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
)

// Default values used for zero fields of [Config].
const (
	// DefaultPartitionCheckInterval is the default Config.PartitionCheckInterval.
	DefaultPartitionCheckInterval = 10 * time.Second
	// DefaultCloseTimeout is the default Config.CloseTimeout.
	DefaultCloseTimeout = 30 * time.Second
)

// Policy says what a [Router] does when the topic's partition count changes.
type Policy int

const (
	// Refuse (the zero value, and the default) makes every send after the
	// change fail with a [*PartitionCountChangedError]. The router stays
	// refusing until it is replaced by one created after the topic has
	// been drained.
	Refuse Policy = iota
	// Alarm logs the change at Error level, calls Config.OnAlarm once per
	// change and keeps producing, partitioning keys by the new count. Use
	// it only where moving keys is acceptable (for instance, when the
	// consumers can tolerate two workers for one key during the move).
	Alarm
)

// String returns "refuse", "alarm" or "Policy(n)". Safe to call from any
// goroutine.
func (p Policy) String() string {
	switch p {
	case Refuse:
		return "refuse"
	case Alarm:
		return "alarm"
	default:
		return fmt.Sprintf("Policy(%d)", int(p))
	}
}

// Config configures a [Router]. The zero value of every optional field
// selects the documented default. A Config is read once by [New]; later
// changes to it have no effect.
type Config struct {
	// Brokers are the seed brokers ("host:port"). Required unless Client
	// is set; ignored if it is.
	Brokers []string

	// Topic is the command topic. Required. It must already exist.
	Topic string

	// Client, if set, is used instead of a client built by the router,
	// and the router does not close it. It must produce with
	// kgo.RecordPartitioner(kgo.ManualPartitioner()) (the router sets
	// every record's partition itself; New refuses a client whose
	// partitioner does not honour it) and must not be transactional.
	// Router.Flush and Router.Close flush every record buffered in it,
	// not only the router's; while a Router.Send waits, nothing buffered
	// in it lingers (see the package documentation, "Latency and
	// batching").
	Client *kgo.Client

	// ClientOpts are extra options for the client the router builds when
	// Client is nil (TLS, SASL, dialer, timeouts, …). The router appends
	// kgo.SeedBrokers(Brokers...) and Compression before them and
	// kgo.RecordPartitioner(kgo.ManualPartitioner()) after them. The kgo
	// producer defaults (idempotent, acks=all, a linger of 10ms to fill
	// batches) apply unless overridden. Router.Send does not wait for the
	// linger (see the package documentation, "Latency and batching").
	ClientOpts []kgo.Opt

	// Compression is the codec of the record batches the router's own
	// client produces; default envelope.CompressionNone, which every
	// Kafka client reads without a plugin
	// (docs/interop.md#compression-what-each-consumer-needs).
	// A kgo.ProducerBatchCompression in ClientOpts overrides it; a
	// caller's Client keeps its own.
	Compression envelope.Compression

	// Partitioner maps keys to partitions. Default envelope.Murmur2,
	// Kafka's own; set envelope.CRC32 where the topic's other producers
	// use librdkafka's default
	// partitioner. The workers (consumer.Config.Partitioner) must use the
	// same one, or they flag every record as misrouted
	// (docs/design.md#hazard-11).
	Partitioner envelope.Partitioner

	// OnPartitionCountChange selects what happens when the topic's
	// partition count changes. Default: Refuse.
	OnPartitionCountChange Policy

	// OnAlarm, if set, is called once per detected change under Alarm,
	// after the router has switched to the new count. It is called from
	// the goroutine that ran the check (the router's checker goroutine or
	// a caller of Router.CheckPartitions) while checks are serialized, so
	// it must return promptly and must not call Router.CheckPartitions or
	// Router.Close.
	OnAlarm func(PartitionCountChangedError)

	// PartitionCheckInterval is how often the router re-reads the topic's
	// partition count with a metadata request. Default
	// DefaultPartitionCheckInterval (10s). Must not be negative.
	PartitionCheckInterval time.Duration

	// CloseTimeout bounds how long Router.Close waits for outstanding
	// sends to finish. Default DefaultCloseTimeout (30s). Must not be
	// negative.
	CloseTimeout time.Duration

	// Logger receives the router's logs. Default: logs are discarded.
	Logger *slog.Logger

	// Observers receive the router's events (see Observer): package
	// router/routerprom turns them into Prometheus metrics. Default none;
	// without any, sends are neither timed nor reported.
	Observers []Observer
}

// withDefaults validates c and returns a copy with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Topic == "":
		return c, fmt.Errorf("%w: Topic is required", ErrConfig)
	case c.Client == nil && len(c.Brokers) == 0:
		return c, fmt.Errorf("%w: Brokers is required when Client is nil", ErrConfig)
	case c.OnPartitionCountChange != Refuse && c.OnPartitionCountChange != Alarm:
		return c, fmt.Errorf("%w: unknown OnPartitionCountChange %v", ErrConfig, c.OnPartitionCountChange)
	case !c.Compression.Valid():
		return c, fmt.Errorf("%w: unknown Compression %q", ErrConfig, c.Compression)
	case !c.Partitioner.Valid():
		return c, fmt.Errorf("%w: unknown Partitioner %v", ErrConfig, c.Partitioner)
	case c.PartitionCheckInterval < 0:
		return c, fmt.Errorf("%w: negative PartitionCheckInterval %v", ErrConfig, c.PartitionCheckInterval)
	case c.CloseTimeout < 0:
		return c, fmt.Errorf("%w: negative CloseTimeout %v", ErrConfig, c.CloseTimeout)
	}
	if c.PartitionCheckInterval == 0 {
		c.PartitionCheckInterval = DefaultPartitionCheckInterval
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Brokers = append([]string(nil), c.Brokers...)
	c.ClientOpts = append([]kgo.Opt(nil), c.ClientOpts...)
	for i, o := range c.Observers {
		if o == nil {
			return c, fmt.Errorf("%w: Observers[%d] is nil", ErrConfig, i)
		}
	}
	c.Observers = append([]Observer(nil), c.Observers...)
	return c, nil
}
