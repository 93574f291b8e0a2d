// Package kafkaconn describes how to reach a Kafka cluster — TLS, SASL and
// the seed brokers — once, for every client workrouter builds: the router,
// the worker, and the CLI's commands. [Config.Opts] turns a description into
// franz-go options (kgo.DialTLSConfig and kgo.SASL with franz-go's own
// pkg/sasl mechanisms), which go into router.Config.ClientOpts and
// consumer.Config.ClientOpts:
//
//	conn := kafkaconn.Config{TLS: true, SASL: kafkaconn.ScramSHA512, Username: "svc", Password: kafkaconn.Secret(pw)}
//	opts, err := conn.Opts()
//	w, err := consumer.New(ctx, consumer.Config[*sqlite.Tx]{Brokers: brokers, ClientOpts: opts, …})
//
// A Config can also be read from the librdkafka-style properties most
// managed services hand out (client.properties: security.protocol,
// sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, …) with
// [Config.SetProperty] and [Config.ReadProperties], in the librdkafka form
// or the Java client's (sasl.jaas.config with PlainLoginModule or
// ScramLoginModule), as Confluent Cloud hands out both. Client-tuning keys
// that workrouter sets itself or that do not apply to it
// (session.timeout.ms, client.dns.lookup, acks=all, …) are accepted and
// listed in [Config.Ignored] for the caller to log; keys that would weaken
// security or correctness are refused ([ErrRefusedProperty]), and unknown
// keys too ([ErrUnknownProperty]): never silently ignored.
//
// Passwords are [Secret]s: they print, log and marshal as "[redacted]".
// [Explain] turns the errors of a failed connection (an untrusted CA, a
// plaintext client at a TLS listener, refused credentials) into one line
// that names the cause; a [Probe] remembers the cause when a client only
// reports that its deadline passed.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// ErrConfig is matched by every error about a Config that is wrong in
// itself: an unknown mechanism, a missing username, a certificate without
// its key, an unreadable or invalid CA or certificate file.
var ErrConfig = errors.New("kafkaconn: invalid connection config")

// Mechanism is a SASL mechanism, by its Kafka name. The zero value is no
// SASL.
type Mechanism string

// The SASL mechanisms a Config can use; each is franz-go's implementation
// from pkg/sasl.
const (
	// NoSASL connects without SASL authentication.
	NoSASL Mechanism = ""
	// Plain is SASL/PLAIN: the username and password in the clear, so only
	// over TLS outside a test.
	Plain Mechanism = "PLAIN"
	// ScramSHA256 is SASL/SCRAM-SHA-256.
	ScramSHA256 Mechanism = "SCRAM-SHA-256"
	// ScramSHA512 is SASL/SCRAM-SHA-512.
	ScramSHA512 Mechanism = "SCRAM-SHA-512"
	// OAuthBearer is SASL/OAUTHBEARER with a fixed token: Config.Password
	// is the token and Config.Username, if set, the authorization ID.
	OAuthBearer Mechanism = "OAUTHBEARER"
	// AWSMSKIAM is Amazon MSK's IAM authentication. The credentials come
	// from Config.AWSCredentials, or by default from the standard AWS
	// environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
	// AWS_SESSION_TOKEN), read at every authentication. MSK serves it on
	// its TLS listener only.
	AWSMSKIAM Mechanism = "AWS_MSK_IAM"
)

// Mechanisms lists the mechanisms ParseMechanism accepts, by their
// command-line names.
const Mechanisms = "plain, scram-sha-256, scram-sha-512, oauthbearer or aws-msk-iam"

// ParseMechanism returns the mechanism named s, in any case, with dashes
// or underscores: "plain", "scram-sha-256", "SCRAM-SHA-512",
// "oauthbearer", "aws-msk-iam" or "AWS_MSK_IAM". The empty string (or
// "none") is NoSASL. Others fail with an error matching ErrConfig.
// [Mechanisms] names them for a flag's help. Safe to call from any
// goroutine.
func ParseMechanism(s string) (Mechanism, error) {
	n := strings.ToUpper(strings.TrimSpace(s))
	switch strings.ReplaceAll(n, "_", "-") {
	case "", "NONE":
		return NoSASL, nil
	case "PLAIN":
		return Plain, nil
	case "SCRAM-SHA-256":
		return ScramSHA256, nil
	case "SCRAM-SHA-512":
		return ScramSHA512, nil
	case "OAUTHBEARER":
		return OAuthBearer, nil
	case "AWS-MSK-IAM":
		return AWSMSKIAM, nil
	}
	return "", fmt.Errorf("%w: unknown SASL mechanism %q: want %s", ErrConfig, s, Mechanisms)
}

// Secret is a password or token. It formats, logs and marshals as
// "[redacted]", so that printing a Config (or an error that quotes one)
// never shows it; Reveal returns the value. Safe to use from any
// goroutine.
type Secret string

const redacted = "[redacted]"

// String returns "[redacted]" (or "" for an empty Secret).
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString returns the redacted form for %#v.
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// LogValue keeps the secret out of log/slog records.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText keeps the secret out of JSON and other text encodings.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret itself, for the one place that needs it: the
// SASL mechanism.
func (s Secret) Reveal() string { return string(s) }

// Config describes how to connect to a Kafka cluster. The zero value is a
// plaintext connection without authentication. A Config is a plain value:
// Opts reads it (and the files it names) when called; later changes have
// no effect on options already built.
type Config struct {
	// Brokers are the seed brokers ("host:port"). Opts does not use them
	// (router.Config and consumer.Config take their own); they are here so
	// that a properties file's bootstrap.servers has a home.
	Brokers []string

	// TLS connects over TLS. It is implied by CAFile, CertFile and
	// ServerName. Without CAFile the system's roots are trusted.
	TLS bool
	// CAFile is a PEM file of the CA certificates to trust instead of the
	// system's (librdkafka's ssl.ca.location).
	CAFile string
	// CertFile and KeyFile are the client's PEM certificate and key, for
	// brokers that authenticate clients by certificate (mutual TLS). Give
	// both or neither.
	CertFile string
	KeyFile  string
	// ServerName is the name the broker's certificate must carry; default
	// the host of the address dialed.
	ServerName string

	// SASL is the mechanism; NoSASL (the zero value) disables SASL.
	SASL Mechanism
	// Username is the SASL user (PLAIN and SCRAM: required; OAUTHBEARER:
	// the optional authorization ID; AWS_MSK_IAM: unused).
	Username string
	// Password is the SASL password, or the OAUTHBEARER token.
	Password Secret
	// AWSCredentials returns the credentials of an AWS_MSK_IAM
	// authentication; it is called for every new connection, from the
	// client's connection goroutines. Nil reads AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN from the environment.
	AWSCredentials func(context.Context) (aws.Auth, error)

	// Ignored lists the client properties SetProperty and ReadProperties
	// accepted without applying them (client tuning that workrouter sets
	// itself or that does not apply to it), once per key, in the order
	// first seen. Opts does not use it; the caller logs it (the CLI logs
	// one INFO line per entry).
	Ignored []IgnoredProperty

	// loginModule is the mechanism family of a sasl.jaas.config's login
	// module (Plain, or ScramSHA512 for either SCRAM); Validate checks
	// that SASL agrees with it.
	loginModule Mechanism
}

// UsesTLS reports whether connections are made over TLS: TLS is set, or
// a field that only makes sense with TLS is.
func (c Config) UsesTLS() bool {
	return c.TLS || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != ""
}

// Validate checks c without reading any file: a known mechanism with the
// credentials it needs (and the one a sasl.jaas.config's login module is
// for), and a certificate only with its key. The error
// matches ErrConfig and never contains the password.
func (c Config) Validate() error {
	if err := c.checkLoginModule(); err != nil {
		return err
	}
	switch c.SASL {
	case NoSASL:
		if c.Username != "" || c.Password != "" {
			return fmt.Errorf("%w: a SASL username or password is set but no SASL mechanism (--sasl-mechanism, sasl.mechanism)", ErrConfig)
		}
	case Plain, ScramSHA256, ScramSHA512:
		if c.Username == "" {
			return fmt.Errorf("%w: SASL %s needs a username (--sasl-username, sasl.username)", ErrConfig, c.SASL)
		}
		if c.Password == "" {
			return fmt.Errorf("%w: SASL %s needs a password (--sasl-password, --sasl-password-file, WORKROUTER_SASL_PASSWORD or sasl.password)", ErrConfig, c.SASL)
		}
	case OAuthBearer:
		if c.Password == "" {
			return fmt.Errorf("%w: SASL OAUTHBEARER needs a token: give it as the password (--sasl-password-file, WORKROUTER_SASL_PASSWORD or sasl.password)", ErrConfig)
		}
	case AWSMSKIAM:
		if c.Password != "" {
			return fmt.Errorf("%w: SASL AWS_MSK_IAM takes its credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, not a password", ErrConfig)
		}
		if !c.UsesTLS() {
			return fmt.Errorf("%w: SASL AWS_MSK_IAM is served only on TLS listeners: add --tls (security.protocol=SASL_SSL)", ErrConfig)
		}
	default:
		return fmt.Errorf("%w: unknown SASL mechanism %q: want %s", ErrConfig, string(c.SASL), Mechanisms)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%w: a client certificate needs both --tls-cert and --tls-key (ssl.certificate.location and ssl.key.location)", ErrConfig)
	}
	return nil
}

// Opts validates c, reads the CA and certificate files it names, and
// returns the franz-go options that connect as c says: kgo.DialTLSConfig
// for TLS and kgo.SASL for SASL (nothing for a plaintext connection
// without SASL). Errors match ErrConfig and name the file or field at
// fault. Safe to call from any goroutine.
func (c Config) Opts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if c.UsesTLS() {
		tc, err := c.TLSConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m := c.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// TLSConfig returns the TLS client configuration c describes (also when
// UsesTLS is false): the CA file's certificates as the only roots, the
// client certificate, and the server name. Errors match ErrConfig.
func (c Config) TLSConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: reading the CA file (--tls-ca, ssl.ca.location): %w", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: the CA file %s holds no PEM certificate (--tls-ca, ssl.ca.location)", ErrConfig, c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: loading the client certificate %s and key %s (--tls-cert, --tls-key): %w", ErrConfig, c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// mechanism returns franz-go's mechanism for c, or nil without SASL.
func (c Config) mechanism() sasl.Mechanism {
	switch c.SASL {
	case Plain:
		return plain.Auth{User: c.Username, Pass: c.Password.Reveal()}.AsMechanism()
	case ScramSHA256:
		return scram.Auth{User: c.Username, Pass: c.Password.Reveal()}.AsSha256Mechanism()
	case ScramSHA512:
		return scram.Auth{User: c.Username, Pass: c.Password.Reveal()}.AsSha512Mechanism()
	case OAuthBearer:
		return oauth.Auth{Zid: c.Username, Token: c.Password.Reveal()}.AsMechanism()
	case AWSMSKIAM:
		creds := c.AWSCredentials
		if creds == nil {
			creds = awsFromEnv
		}
		return aws.ManagedStreamingIAM(creds)
	}
	return nil
}

// ErrNoAWSCredentials is returned, for an AWS_MSK_IAM authentication
// without Config.AWSCredentials, when the environment has no
// AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY.
var ErrNoAWSCredentials = errors.New("kafkaconn: AWS_MSK_IAM needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")

// awsFromEnv reads the standard AWS credential variables.
func awsFromEnv(context.Context) (aws.Auth, error) {
	a := aws.Auth{
		AccessKey:    os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretKey:    os.Getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken: os.Getenv("AWS_SESSION_TOKEN"),
	}
	if a.AccessKey == "" || a.SecretKey == "" {
		return aws.Auth{}, ErrNoAWSCredentials
	}
	return a, nil
}

// String describes c for a startup line or a log, without secrets, for
// example "TLS (CA ca.pem), SASL SCRAM-SHA-512 as alice" or "plaintext".
func (c Config) String() string {
	var parts []string
	if c.UsesTLS() {
		var tlsParts []string
		if c.CAFile != "" {
			tlsParts = append(tlsParts, "CA "+c.CAFile)
		}
		if c.CertFile != "" {
			tlsParts = append(tlsParts, "client certificate "+c.CertFile)
		}
		if c.ServerName != "" {
			tlsParts = append(tlsParts, "server name "+c.ServerName)
		}
		s := "TLS"
		if len(tlsParts) > 0 {
			s += " (" + strings.Join(tlsParts, ", ") + ")"
		}
		parts = append(parts, s)
	} else {
		parts = append(parts, "plaintext")
	}
	if c.SASL != NoSASL {
		s := "SASL " + string(c.SASL)
		if c.Username != "" && c.SASL != AWSMSKIAM {
			s += " as " + c.Username
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// LogValue logs c as its String.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }
