// Package broker runs an embedded, single-node Kafka-protocol broker
// (franz-go's kfake) for development, the demo, the CLI and tests.
//
// A Broker listens on exactly the host:port it was given (port 0 picks a
// free port; Addr reports the real one), optionally persists topics, records
// and consumer group commits in a data directory so that they survive a
// restart, and creates the configured topics if they are absent.
//
// The broker is a development tool: it has one node and no replication.
// It advertises the address it listens on (or Config.Advertise), so
// clients must be able to reach that address; listening on every interface
// (0.0.0.0, [::] or no host) needs Config.Advertise, since such an address
// names no host a client can connect to. It can serve TLS (Config.TLS) and
// require SASL authentication (Config.Users: PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512, with SaslHandshake v0 or v1, so that librdkafka, KafkaJS,
// kafka-python and franz-go clients all log in; see sasl.go), so that a
// secured setup can be tried locally.
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
)

// DefaultListen is the address Start listens on when Config.Listen is empty.
const DefaultListen = "127.0.0.1:9092"

// ErrConfig is wrapped by every error Start returns for a Config that
// is wrong in itself (malformed listen address, bad partition count, …).
var ErrConfig = errors.New("invalid config")

// ErrListen is wrapped by the error Start returns when it cannot listen on
// Config.Listen (port in use, address not local, …). The underlying network
// error is wrapped too, so errors.Is(err, syscall.EADDRINUSE) also matches.
var ErrListen = errors.New("cannot listen")

// ErrDataDir is wrapped by the error Start returns when Config.DataDir cannot
// be created, written, or loaded. The underlying error is wrapped too, so
// errors.Is(err, fs.ErrPermission) also matches where it applies.
var ErrDataDir = errors.New("unusable data dir")

// Config configures Start. The zero value is a valid in-memory broker on
// DefaultListen with no topics. Start copies what it needs, so the caller's
// goroutine may reuse or change a Config once Start has returned.
type Config struct {
	// Listen is the host:port to listen on; DefaultListen if empty. Port 0
	// picks a free port. The broker advertises this address to clients
	// unless Advertise is set; an address of every interface (0.0.0.0,
	// [::], an empty host) requires Advertise.
	Listen string

	// Advertise, if not empty, is the host:port the broker tells clients
	// to connect to (in Metadata and FindCoordinator responses) instead
	// of Listen: the address other machines reach this one at. Port 0
	// means the port the broker listens on.
	Advertise string

	// DataDir, if not empty, is where the broker keeps its state: topics,
	// records and consumer group commits survive a Close and a Start on the
	// same directory. It is created if needed. Empty means in memory.
	DataDir string

	// SyncWrites fsyncs every produced batch. Without it, the data dir is
	// flushed on segment roll and on Close, which is enough for a clean
	// shutdown but loses the newest batches on a crash. Requires DataDir.
	SyncWrites bool

	// Topics maps topic names to partition counts (each at least 1). A topic
	// that is absent is created; a topic that already exists (from DataDir)
	// is left as is, even if its partition count differs.
	Topics map[string]int32

	// MinSessionTimeout is the smallest consumer-group session timeout the
	// broker accepts. Zero keeps kfake's default (6s); set it lower for
	// tests that use short session timeouts such as 1s.
	MinSessionTimeout time.Duration

	// TLS, if set, is the server configuration of a TLS listener: clients
	// must connect with TLS. Nil listens in plaintext.
	TLS *tls.Config

	// Users, if any, turn on SASL authentication: every client must log
	// in as one of them, with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. They
	// are superusers (no ACLs). None means no authentication.
	Users []User

	// BrokerConfigs are broker-level configs (kfake.BrokerConfigs), such
	// as "group.consumer.session.timeout.ms" for KIP-848 groups, whose
	// session timeout the broker sets, not the client. Nil keeps kfake's
	// defaults. With a DataDir they are persisted too.
	BrokerConfigs map[string]string

	// Logger receives the broker's log records; nil discards them. kfake's
	// info-level chatter (per-request notes, group joins) is logged at
	// slog.LevelDebug; its warnings and errors at Warn and Error.
	Logger *slog.Logger
}

// User is a SASL user of the broker.
type User struct {
	Name     string
	Password string
}

// String returns the user's name, never its password.
func (u User) String() string { return u.Name }

// Broker is a running embedded broker. Its methods may be called from any
// goroutine.
type Broker struct {
	c          *kfake.Cluster
	addr       string
	advertised string
	logger     *slog.Logger
	klog       *kfakeLogger
	front      *saslFront // nil without Users

	closeOnce sync.Once
	closeErr  error
}

// Start validates cfg, binds cfg.Listen, loads cfg.DataDir if it holds state,
// creates the missing topics and returns the running broker. Any goroutine may
// call it. The caller must Close the broker.
func Start(cfg Config) (*Broker, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := validate(cfg); err != nil {
		return nil, err
	}
	if cfg.DataDir != "" {
		if err := checkDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
	}

	// kfake always listens on 127.0.0.1; we bind the requested address
	// ourselves (clear errors, any host) and hand the listener to kfake.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("broker: %w on %s: %w", ErrListen, cfg.Listen, err)
	}
	advertised, err := advertise(cfg, ln.Addr())
	if err != nil {
		ln.Close()
		return nil, err
	}
	klnr := &listener{Listener: ln, advertised: advertAddr(advertised)}
	if cfg.TLS != nil {
		// TLS below the SASL front, which reads the protocol's frames.
		klnr.Listener = tls.NewListener(ln, cfg.TLS.Clone())
	}
	var front *saslFront
	if len(cfg.Users) > 0 {
		front = &saslFront{logger: logger}
		klnr.front = front
	}
	var handedOut atomic.Bool
	listenFn := func(string, string) (net.Listener, error) {
		if handedOut.Swap(true) {
			return nil, errors.New("broker: kfake asked for a second listener; the embedded broker has one node")
		}
		return klnr, nil
	}

	klog := &kfakeLogger{l: logger}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ListenFn(listenFn),
		kfake.WithLogger(klog),
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
		if cfg.SyncWrites {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	if cfg.MinSessionTimeout > 0 {
		opts = append(opts, kfake.GroupMinSessionTimeout(cfg.MinSessionTimeout))
	}
	if len(cfg.Users) > 0 {
		opts = append(opts, kfake.EnableSASL())
		for _, u := range cfg.Users {
			for _, m := range mechanisms {
				opts = append(opts, kfake.Superuser(m, u.Name, u.Password))
			}
		}
	}
	if len(cfg.BrokerConfigs) > 0 {
		opts = append(opts, kfake.BrokerConfigs(cfg.BrokerConfigs))
	}

	c, err := kfake.NewCluster(opts...)
	if err != nil {
		ln.Close() // kfake closes it too on most failure paths; a second Close is harmless
		if cfg.DataDir != "" {
			return nil, fmt.Errorf("broker: %w %s: %w", ErrDataDir, cfg.DataDir, err)
		}
		return nil, fmt.Errorf("broker: starting kfake: %w", err)
	}
	b := &Broker{c: c, addr: ln.Addr().String(), advertised: advertised, logger: logger, klog: klog, front: front}

	// Sorted for deterministic logs and error messages.
	names := make([]string, 0, len(cfg.Topics))
	for t := range cfg.Topics {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		if err := b.ensureTopic(t, cfg.Topics[t]); err != nil {
			b.Close()
			return nil, err
		}
	}
	logger.Info("broker started", "addr", b.addr, "advertised", b.advertised, "data_dir", cfg.DataDir, "topics", len(names))
	return b, nil
}

func validate(cfg Config) error {
	// An empty host means all interfaces, which net.Listen accepts (and
	// which needs Advertise, below).
	_, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return fmt.Errorf("broker: %w: listen address %q is not host:port (e.g. 127.0.0.1:9092): %w", ErrConfig, cfg.Listen, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("broker: %w: listen address %q: port %q is not a number in 0..65535", ErrConfig, cfg.Listen, port)
	}
	if cfg.Advertise != "" {
		host, port, err := net.SplitHostPort(cfg.Advertise)
		if err != nil {
			return fmt.Errorf("broker: %w: advertised address %q is not host:port (e.g. broker.example.com:9092): %w", ErrConfig, cfg.Advertise, err)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("broker: %w: advertised address %q: port %q is not a number in 0..65535", ErrConfig, cfg.Advertise, port)
		}
		if unspecified(host) {
			return fmt.Errorf("broker: %w: advertised address %q names no host a client can connect to: give this machine's name or IP address", ErrConfig, cfg.Advertise)
		}
	} else if host, _, _ := net.SplitHostPort(cfg.Listen); unspecified(host) {
		return fmt.Errorf("broker: %w: listen address %q is every interface, which is no address a client can connect back to: "+
			"give the address other machines reach this one at with --advertise HOST:PORT", ErrConfig, cfg.Listen)
	}
	if cfg.SyncWrites && cfg.DataDir == "" {
		return fmt.Errorf("broker: %w: SyncWrites needs a DataDir", ErrConfig)
	}
	if cfg.MinSessionTimeout < 0 {
		return fmt.Errorf("broker: %w: negative MinSessionTimeout %v", ErrConfig, cfg.MinSessionTimeout)
	}
	for _, u := range cfg.Users {
		if u.Name == "" || u.Password == "" {
			return fmt.Errorf("broker: %w: a SASL user needs a name and a password", ErrConfig)
		}
	}
	for t, n := range cfg.Topics {
		if t == "" {
			return fmt.Errorf("broker: %w: empty topic name", ErrConfig)
		}
		if n < 1 {
			return fmt.Errorf("broker: %w: topic %q: partitions must be at least 1, got %d", ErrConfig, t, n)
		}
	}
	return nil
}

// checkDataDir creates dir if needed and proves it is a writable directory,
// so that an unusable dir fails Start instead of silently losing state
// later (kfake only logs failed writes).
func checkDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("broker: %w %s: %w", ErrDataDir, dir, err)
	}
	f, err := os.CreateTemp(dir, ".workrouter-probe-*")
	if err != nil {
		return fmt.Errorf("broker: %w %s: not writable: %w", ErrDataDir, dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("broker: %w %s: %w", ErrDataDir, dir, err)
	}
	return nil
}

func (b *Broker) ensureTopic(topic string, partitions int32) error {
	err := b.c.CreateTopic(topic, partitions, nil)
	switch {
	case err == nil:
		b.logger.Info("topic created", "topic", topic, "partitions", partitions)
		return nil
	case errors.Is(err, kerr.TopicAlreadyExists):
		have := b.Partitions(topic)
		if have != partitions {
			b.logger.Warn("topic exists with a different partition count; left as is",
				"topic", topic, "partitions", have, "requested", partitions)
		} else {
			b.logger.Debug("topic exists", "topic", topic, "partitions", have)
		}
		return nil
	default:
		return fmt.Errorf("broker: creating topic %q: %w", topic, err)
	}
}

// Addr returns the host:port the broker actually listens on (with the real
// port when Config.Listen asked for port 0). Any goroutine may call it.
func (b *Broker) Addr() string { return b.addr }

// Advertised returns the host:port the broker tells clients to connect to:
// Config.Advertise (with the real port if it gave port 0), or else Addr.
// Any goroutine may call it.
func (b *Broker) Advertised() string { return b.advertised }

// AuthFailures returns how many SASL logins the broker has refused (each
// is also logged at WARN). Any goroutine may call it.
func (b *Broker) AuthFailures() int64 {
	if b.front == nil {
		return 0
	}
	return b.front.failures.Load()
}

// Cluster returns the underlying kfake cluster, for tests that intercept
// requests (Control, Fault) or inspect groups (GroupInfo). Any goroutine may
// call it; the cluster must not be closed directly (use Close).
func (b *Broker) Cluster() *kfake.Cluster { return b.c }

// Partitions returns how many partitions topic has, or 0 if it does not
// exist. Any goroutine may call it while the broker is open.
func (b *Broker) Partitions(topic string) int32 {
	return int32(len(b.c.PartitionInfos(topic)))
}

// Close stops listening, drops client connections and, with a DataDir,
// flushes the broker's state to disk. It returns an error if that flush
// failed. It is idempotent: later calls, from any goroutine, wait for the
// first to finish and return its result.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		if b.front != nil {
			b.front.closing.Store(true) // the dropped logins are no refusals
		}
		b.klog.capture()
		b.c.Close()
		if errs := b.klog.captured(); len(errs) > 0 {
			b.closeErr = fmt.Errorf("broker: %w %w", ErrDataDir, errors.Join(errs...))
		}
		b.logger.Info("broker closed", "addr", b.addr, "err", b.closeErr)
	})
	return b.closeErr
}

// unspecified reports whether host means every interface.
func unspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// advertise returns the address the broker advertises, listening on bound.
func advertise(cfg Config, bound net.Addr) (string, error) {
	_, boundPort, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", fmt.Errorf("broker: listening on %s: %w", bound, err)
	}
	if cfg.Advertise == "" {
		return bound.String(), nil
	}
	host, port, _ := net.SplitHostPort(cfg.Advertise) // validated
	if port == "0" {
		port = boundPort
	}
	return net.JoinHostPort(host, port), nil
}

// listener is what kfake accepts clients from: the bound listener (TLS
// inside if configured), whose Addr is the advertised address (kfake
// advertises its listener's address) and whose connections go through the
// SASL front when there are users.
type listener struct {
	net.Listener
	advertised advertAddr
	front      *saslFront
}

// Accept returns the next client connection, behind the SASL front if
// any. kfake's accepting goroutine calls it.
func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.front == nil {
		return c, err
	}
	return l.front.wrap(c), nil
}

// Addr returns the advertised address.
func (l *listener) Addr() net.Addr { return l.advertised }

// advertAddr is a host:port as a net.Addr.
type advertAddr string

// Network returns "tcp".
func (advertAddr) Network() string { return "tcp" }

// String returns the host:port.
func (a advertAddr) String() string { return string(a) }

// kfakeLogger adapts kfake's printf logger to slog. While capturing (during
// Close) it also keeps error-level messages, which is the only way kfake
// reports a failed final flush.
type kfakeLogger struct {
	l *slog.Logger

	mu        sync.Mutex
	capturing bool
	errs      []error
}

func (k *kfakeLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	var sl slog.Level
	switch level {
	case kfake.LogLevelError:
		sl = slog.LevelError
		k.mu.Lock()
		if k.capturing {
			k.errs = append(k.errs, fmt.Errorf("kfake: "+msg, args...))
		}
		k.mu.Unlock()
	case kfake.LogLevelWarn:
		sl = slog.LevelWarn
	case kfake.LogLevelInfo:
		sl = slog.LevelDebug
	default:
		sl = slog.LevelDebug - 4
	}
	ctx := context.Background()
	if !k.l.Enabled(ctx, sl) {
		return
	}
	k.l.Log(ctx, sl, fmt.Sprintf(msg, args...), "component", "kfake")
}

func (k *kfakeLogger) capture() {
	k.mu.Lock()
	k.capturing = true
	k.mu.Unlock()
}

func (k *kfakeLogger) captured() []error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.errs)
}
