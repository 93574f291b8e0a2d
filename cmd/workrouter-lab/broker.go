package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/cli"
)

// brokerFlags holds the values of `workrouter-lab broker`'s flags.
type brokerFlags struct {
	listen            string
	advertise         string
	dataDir           string
	syncWrites        bool
	topics            []string
	partitions        int32
	minSessionTimeout time.Duration
	metricsAddr       string
	tlsCert           string
	tlsKey            string
	saslUsers         []string
}

// newBrokerCmd builds `workrouter-lab broker`, which runs the embedded
// Kafka-protocol broker until its context ends.
func newBrokerCmd() *cobra.Command {
	var f brokerFlags
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run an embedded single-node Kafka-protocol broker (kfake) for development",
		Long: `Run an embedded single-node Kafka-protocol broker (franz-go's kfake) until
interrupted (Ctrl-C, SIGINT or SIGTERM), then shut it down cleanly.

The first line on stdout says where it listens, e.g.
  workrouter broker listening on 127.0.0.1:9092 (data dir ./data; topics commands:12)
With --data-dir, topics, records and consumer group commits survive restarts.
Topics given with --topic are created if absent; existing ones are left as is.
It is a development broker: one node, no replication.

The broker tells clients (in its metadata) to connect to the address it
listens on. --listen :PORT binds the loopback interface only. To expose the
broker, listen on one interface's address, which is then advertised, or on
every interface (0.0.0.0:PORT) with --advertise HOST:PORT, the address other
machines reach this one at: on every interface without --advertise the broker
refuses to start, since it would send remote clients to themselves. It warns
when it is exposed with no authentication.

--tls-cert and --tls-key serve TLS; --sasl-user NAME:PASSWORD (repeatable, or
WORKROUTER_SASL_USER, which keeps the password out of the process list)
requires clients to log in with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, which
kcat and the other librdkafka clients, KafkaJS, kafka-python and franz-go
all do (SaslHandshake v0 and v1). A wrong password is answered "Authentication
failed" and logged. A secured local setup is one command:

  workrouter-lab broker --tls-cert server.pem --tls-key server-key.pem --sasl-user app:PASSWORD --topic commands
  workrouter produce --tls-ca ca.pem --sasl-mechanism scram-sha-512 --sasl-username app …
  kcat -L -b 127.0.0.1:9092 -X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-512 \
    -X sasl.username=app -X sasl.password=PASSWORD -X ssl.ca.location=ca.pem`,
		Example: `  # In memory, on the default address, with a 12-partition "commands" topic:
  workrouter-lab broker --topic commands

  # Persistent, on a free port (read the address from the first line):
  workrouter-lab broker --listen 127.0.0.1:0 --data-dir ./data --topic commands,invoices --partitions 6

  # The same through the environment:
  WORKROUTER_DATA_DIR=./data WORKROUTER_TOPIC=commands workrouter-lab broker

  # Reachable from other machines as broker.example.com:9092:
  WORKROUTER_SASL_USER=app:$PASSWORD workrouter-lab broker --listen 0.0.0.0:9092 --advertise broker.example.com:9092 \
    --tls-cert server.pem --tls-key server-key.pem --topic commands`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBroker(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", broker.DefaultListen, "host:port to listen on and advertise (no host means loopback); port 0 picks a free port")
	fl.StringVar(&f.advertise, "advertise", "", "host:port to send clients to instead of --listen's (required with 0.0.0.0 or [::]); port 0 means --listen's port")
	fl.StringVar(&f.dataDir, "data-dir", "", "directory keeping topics, records and group commits across restarts (default: in memory)")
	fl.BoolVar(&f.syncWrites, "sync-writes", false, "fsync every produced batch (needs --data-dir); otherwise data is flushed on shutdown")
	fl.StringSliceVar(&f.topics, "topic", nil, "topic to create if absent; repeatable or comma-separated")
	fl.Int32Var(&f.partitions, "partitions", 12, "partitions for each --topic that gets created")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this host:port (no host means loopback; empty disables)")
	fl.DurationVar(&f.minSessionTimeout, "min-session-timeout", 0, "smallest consumer group session timeout accepted (default: kfake's 6s)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate to serve TLS with (with --tls-key)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	fl.StringArrayVar(&f.saslUsers, "sasl-user", nil, "NAME:PASSWORD of a user clients must log in as (SASL PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512); repeatable")
	_ = fl.SetAnnotation("sasl-user", cli.SecretAnnotation, []string{"true"})
	return cmd
}

// runBroker starts the broker, prints the address line, waits for the
// command's context to end and closes the broker.
func runBroker(cmd *cobra.Command, f brokerFlags) error {
	if f.partitions < 1 {
		return fmt.Errorf("%w: --partitions must be at least 1, got %d", broker.ErrConfig, f.partitions)
	}
	names, err := topicNames(f.topics)
	if err != nil {
		return err
	}
	if len(names) == 0 && cmd.Flags().Changed("topic") {
		// pflag reads --topic '' as no value at all.
		return fmt.Errorf("%w: --topic \"\" has an empty topic name", broker.ErrConfig)
	}
	topics := make(map[string]int32, len(names))
	for _, t := range names {
		topics[t] = f.partitions
	}
	logger, err := cli.NewLogger(cmd)
	if err != nil {
		return err
	}
	listen, exposed, err := brokerListen(f.listen)
	if err != nil {
		return err
	}
	var tlsConf *tls.Config
	if f.tlsCert != "" || f.tlsKey != "" {
		if f.tlsCert == "" || f.tlsKey == "" {
			return fmt.Errorf("%w: TLS needs both --tls-cert and --tls-key", broker.ErrConfig)
		}
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	var users []broker.User
	for _, u := range f.saslUsers {
		name, pass, ok := strings.Cut(u, ":")
		if !ok || name == "" || pass == "" {
			// The value is not repeated: it may hold a password.
			return fmt.Errorf("%w: --sasl-user wants NAME:PASSWORD, both non-empty", broker.ErrConfig)
		}
		users = append(users, broker.User{Name: name, Password: pass})
	}

	b, err := broker.Start(broker.Config{
		Listen:            listen,
		Advertise:         f.advertise,
		TLS:               tlsConf,
		Users:             users,
		DataDir:           f.dataDir,
		SyncWrites:        f.syncWrites,
		Topics:            topics,
		MinSessionTimeout: f.minSessionTimeout,
		Logger:            logger,
	})
	if err != nil {
		return err
	}
	if exposed && len(users) == 0 {
		logger.Warn("the broker listens beyond this machine with no authentication: anyone who reaches it can read and write every topic; add --sasl-user (and --tls-cert), or listen on 127.0.0.1",
			"listen", listen)
	}

	ops, err := cli.StartOps(f.metricsAddr, cli.NewRegistry(), nil, 0, logger)
	if err != nil {
		return withClose(err, b.Close())
	}
	defer ops.Close()

	storage := "in memory"
	if f.dataDir != "" {
		storage = "data dir " + f.dataDir
	}
	if b.Advertised() != b.Addr() {
		storage += "; advertised as " + b.Advertised()
	}
	if tlsConf != nil {
		storage += "; TLS"
	}
	if len(users) > 0 {
		names := make([]string, len(users))
		for i, u := range users {
			names[i] = u.Name
		}
		storage += "; SASL PLAIN/SCRAM-SHA-256/SCRAM-SHA-512 users " + strings.Join(names, ",")
	}
	desc := make([]string, len(names))
	for i, t := range names {
		// The real count: an existing topic keeps its own.
		desc[i] = fmt.Sprintf("%s:%d", t, b.Partitions(t))
	}
	topicList := "none"
	if len(desc) > 0 {
		topicList = strings.Join(desc, ",")
	}
	if _, err := fmt.Fprintf(cmd.OutOrStdout(), "workrouter broker listening on %s (%s; topics %s)\n", b.Addr(), storage, topicList); err != nil {
		return withClose(err, b.Close())
	}

	<-cmd.Context().Done()
	logger.Info("shutting down", "reason", cmd.Context().Err())
	if err := b.Close(); err != nil {
		return fmt.Errorf("closing broker: %w", err)
	}
	return nil
}

// brokerListen turns a --listen value without a host (":9092") into a
// loopback one, like --metrics-addr, and reports whether the address is
// reachable from other machines (a wildcard or a non-loopback address).
func brokerListen(addr string) (string, bool, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, fmt.Errorf("broker: %w: listen address %q is not host:port (e.g. 127.0.0.1:9092): %w", broker.ErrConfig, addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	exposed := true
	if host == "localhost" {
		exposed = false
	} else if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		exposed = false
	}
	return net.JoinHostPort(host, port), exposed, nil
}

// topicNames trims, de-duplicates and sorts the --topic values. An empty
// one (--topic "", a stray comma, an unset variable) is refused: the broker
// would otherwise run without the topic the caller meant.
func topicNames(raw []string) ([]string, error) {
	var out []string
	for _, t := range raw {
		t = strings.TrimSpace(t)
		if t == "" {
			return nil, fmt.Errorf("%w: --topic %q has an empty topic name", broker.ErrConfig, strings.Join(raw, ","))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}

// withClose returns err, with the error of the close that followed it if
// that failed too.
func withClose(err, closeErr error) error {
	if closeErr == nil {
		return err
	}
	return fmt.Errorf("%w (and closing: %w)", err, closeErr)
}
