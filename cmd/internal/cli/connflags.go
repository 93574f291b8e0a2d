package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/kafkaconn"
)

// SecretAnnotation marks a flag whose value is a secret: ApplyEnv never
// repeats it in an error.
const SecretAnnotation = "workrouter-secret"

// ConnFlags are the flags that say how to connect to the brokers: TLS,
// SASL, and librdkafka-style properties. Every command that talks to Kafka
// has them (see AddConnFlags); they become one kafkaconn.Config.
type ConnFlags struct {
	tls            bool
	tlsCA          string
	tlsCert        string
	tlsKey         string
	tlsServerName  string
	mechanism      string
	username       string
	password       string
	passwordFile   string
	properties     []string
	propertiesFile string
}

// Given reports whether any connection flag was given.
func (f ConnFlags) Given() bool {
	return f.tls || f.mechanism != "" || len(f.properties) > 0 || f.propertiesFile != ""
}

// ConnHelp is the connection section of a command's long help.
const ConnHelp = `
Connecting to a secured cluster (managed Kafka, Redpanda Cloud, MSK…):
  --tls [--tls-ca FILE] [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]
  --sasl-mechanism plain|scram-sha-256|scram-sha-512|oauthbearer|aws-msk-iam
  --sasl-username USER, and the password (or OAUTHBEARER token) from
  --sasl-password-file FILE or WORKROUTER_SASL_PASSWORD (or --sasl-password,
  which other users of the machine can see in the process list);
  AWS_MSK_IAM reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
  AWS_SESSION_TOKEN. An existing client.properties works too
  (--properties FILE, or -X key=value), in the librdkafka form or the Java
  one: security.protocol, sasl.mechanism(s), sasl.username, sasl.password,
  sasl.jaas.config (PlainLoginModule or ScramLoginModule), ssl.ca.location,
  ssl.certificate.location, ssl.key.location, bootstrap.servers. Client
  tuning that workrouter sets itself or that does not apply
  (session.timeout.ms, heartbeat.interval.ms, client.dns.lookup, client.id,
  acks=all, enable.idempotence=true, the Schema Registry's keys) is accepted
  with one INFO line each; acks other than all, enable.idempotence=false and
  enable.ssl.certificate.verification=false are refused, and so is any
  other key. Flags win over properties. Passwords are never printed or
  logged.`

// AddConnFlags defines the connection flags on fl.
func AddConnFlags(fl *pflag.FlagSet, f *ConnFlags) {
	fl.BoolVar(&f.tls, "tls", false, "connect to the brokers over TLS (implied by the other --tls-* flags)")
	fl.StringVar(&f.tlsCA, "tls-ca", "", "PEM file of the CA certificates to trust instead of the system's")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM client certificate, for brokers that require one (with --tls-key)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	fl.StringVar(&f.tlsServerName, "tls-server-name", "", "name the brokers' certificates must carry (default: the host dialed)")
	fl.StringVar(&f.mechanism, "sasl-mechanism", "", "SASL mechanism: "+kafkaconn.Mechanisms)
	fl.StringVar(&f.username, "sasl-username", "", "SASL username (OAUTHBEARER: the authorization ID)")
	fl.StringVar(&f.password, "sasl-password", "", "SASL password or OAUTHBEARER token (prefer --sasl-password-file or the environment: a flag shows in the process list)")
	fl.StringVar(&f.passwordFile, "sasl-password-file", "", "file holding the SASL password or OAUTHBEARER token (a trailing newline is dropped)")
	fl.StringArrayVarP(&f.properties, "property", "X", nil, "librdkafka-style or Java client property key=value (security.protocol, sasl.mechanism, sasl.username, sasl.password, sasl.jaas.config, ssl.ca.location, …); repeatable")
	fl.StringVar(&f.propertiesFile, "properties", "", "client.properties file of key=value lines, librdkafka or Java style (as Confluent Cloud hands out)")
	_ = fl.SetAnnotation("sasl-password", SecretAnnotation, []string{"true"})
	_ = fl.SetAnnotation("property", SecretAnnotation, []string{"true"})
}

// isSecretFlag reports whether f holds a secret (see SecretAnnotation).
func isSecretFlag(f *pflag.Flag) bool {
	_, ok := f.Annotations[SecretAnnotation]
	return ok
}

// config builds the connection the flags describe: the properties file,
// then each -X, then the explicit flags, each overriding the one before.
// Errors are one line and never repeat a password.
func (f ConnFlags) config() (kafkaconn.Config, error) {
	var c kafkaconn.Config
	if f.propertiesFile != "" {
		file, err := os.Open(f.propertiesFile)
		if err != nil {
			return c, fmt.Errorf("--properties: %w", err)
		}
		err = c.ReadProperties(file, f.propertiesFile)
		file.Close()
		if err != nil {
			return c, fmt.Errorf("--properties %w", err)
		}
	}
	for _, kv := range f.properties {
		if err := c.SetPropertyArg(kv); err != nil {
			return c, fmt.Errorf("-X: %w", err)
		}
	}
	if f.tls {
		c.TLS = true
	}
	for _, s := range []struct {
		v   string
		dst *string
	}{{f.tlsCA, &c.CAFile}, {f.tlsCert, &c.CertFile}, {f.tlsKey, &c.KeyFile}, {f.tlsServerName, &c.ServerName}, {f.username, &c.Username}} {
		if s.v != "" {
			*s.dst = s.v
		}
	}
	if f.mechanism != "" {
		m, err := kafkaconn.ParseMechanism(f.mechanism)
		if err != nil {
			return c, fmt.Errorf("--sasl-mechanism: %w", err)
		}
		c.SASL = m
	}
	switch {
	case f.password != "" && f.passwordFile != "":
		return c, fmt.Errorf("give the SASL password once: --sasl-password (or WORKROUTER_SASL_PASSWORD) or --sasl-password-file, not both")
	case f.password != "":
		c.Password = kafkaconn.Secret(f.password)
	case f.passwordFile != "":
		b, err := os.ReadFile(f.passwordFile)
		if err != nil {
			return c, fmt.Errorf("--sasl-password-file: %w", err)
		}
		c.Password = kafkaconn.Secret(strings.TrimRight(string(b), "\r\n"))
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// Conn is a command's resolved connection: its brokers, its kafkaconn
// description, the franz-go options that implement it and a Probe that
// explains a failed connection.
type Conn struct {
	brokers []string
	cfg     kafkaconn.Config
	probe   *kafkaconn.Probe
	opts    []kgo.Opt
}

// ResolveConn validates the connection flags of cmd, picks the brokers
// (--brokers if given, else the properties' bootstrap.servers, else the
// flag's default) and builds the client options, the Probe's hook among
// them. It logs one INFO line for each property accepted without being
// applied (kafkaconn.Config.Ignored): call it once per command.
func ResolveConn(cmd *cobra.Command, f ConnFlags, brokers []string) (Conn, error) {
	cfg, err := f.config()
	if err != nil {
		return Conn{}, err
	}
	logger, err := NewLogger(cmd)
	if err != nil {
		return Conn{}, err
	}
	for _, p := range cfg.Ignored {
		// The key and why, never the value (it may be a password).
		logger.Info("client property accepted, not applied", "property", p.Key, "why", p.Why)
	}
	if len(cfg.Brokers) > 0 && !cmd.Flags().Changed("brokers") {
		brokers = cfg.Brokers
	}
	if brokers, err = CleanBrokers(brokers); err != nil {
		return Conn{}, err
	}
	opts, err := cfg.Opts()
	if err != nil {
		return Conn{}, err
	}
	probe := kafkaconn.NewProbe(cfg)
	return Conn{brokers: brokers, cfg: cfg, probe: probe, opts: append(opts, probe.Opt())}, nil
}

// Brokers returns the brokers the connection dials.
func (c Conn) Brokers() []string { return c.brokers }

// Opts returns the franz-go options that implement the connection.
func (c Conn) Opts() []kgo.Opt { return c.opts }

// guard returns a context derived from ctx that is also cancelled as soon
// as the connection fails for a cause no retry fixes (see
// kafkaconn.Probe.Refused), so that a command fails at once with the
// cause instead of at its deadline. Call the CancelFunc when done: it
// also ends the goroutine guard starts.
func (c Conn) guard(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-c.probe.Refused():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// explain names the cause of a failed connection in err when it can.
func (c Conn) explain(err error) error {
	if c.probe == nil {
		return err
	}
	return c.probe.Explain(err)
}

// WorkerArgs returns the flags and environment that give a worker process
// this connection: the password travels in WORKROUTER_SASL_PASSWORD, never
// on the command line.
func (c Conn) WorkerArgs() (args, env []string) {
	k := c.cfg
	if k.UsesTLS() {
		args = append(args, "--tls")
	}
	for _, fv := range [][2]string{{"--tls-ca", k.CAFile}, {"--tls-cert", k.CertFile}, {"--tls-key", k.KeyFile},
		{"--tls-server-name", k.ServerName}, {"--sasl-mechanism", string(k.SASL)}, {"--sasl-username", k.Username}} {
		if fv[1] != "" {
			args = append(args, fv[0], fv[1])
		}
	}
	if k.Password != "" {
		// Empty, so that a WORKROUTER_SASL_PASSWORD_FILE inherited from
		// this process does not compete with the password.
		args = append(args, "--sasl-password-file=")
		env = append(env, EnvName("sasl-password")+"="+k.Password.Reveal())
	}
	return args, env
}
