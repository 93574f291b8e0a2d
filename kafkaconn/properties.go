package kafkaconn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// ErrUnknownProperty is matched by the error SetProperty and
// ReadProperties return for a key they do not support. The error names
// the key (never the value, which may be a password) and the keys that
// are supported.
var ErrUnknownProperty = errors.New("kafkaconn: unsupported client property")

// Properties lists the librdkafka / Java client property keys that
// SetProperty understands, sorted.
var properties = []string{
	"bootstrap.servers",
	"sasl.mechanism",
	"sasl.mechanisms",
	"sasl.password",
	"sasl.username",
	"security.protocol",
	"ssl.ca.location",
	"ssl.certificate.location",
	"ssl.endpoint.identification.algorithm",
	"ssl.key.location",
}

// Properties returns the property keys SetProperty understands, sorted.
// Safe to call from any goroutine.
func Properties() []string { return slices.Clone(properties) }

// SetProperty sets the field of c that a librdkafka-style client property
// names (as in kcat's -X key=value and the client.properties that managed
// services hand out):
//
//	bootstrap.servers                      Brokers (comma-separated)
//	security.protocol                      PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
//	sasl.mechanism, sasl.mechanisms        SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM)
//	sasl.username, sasl.password           Username, Password
//	ssl.ca.location                        CAFile
//	ssl.certificate.location               CertFile
//	ssl.key.location                       KeyFile
//	ssl.endpoint.identification.algorithm  "https" (the default: verify the host name) only
//
// A security protocol with SASL and no mechanism yet selects PLAIN, as
// librdkafka does; a later sasl.mechanism replaces it. Other keys fail
// with an error matching ErrUnknownProperty, bad values with ErrConfig;
// neither error repeats the value. The caller's goroutine owns c.
func (c *Config) SetProperty(key, value string) error {
	key, value = strings.TrimSpace(key), strings.TrimSpace(value)
	switch key {
	case "bootstrap.servers":
		c.Brokers = nil
		for b := range strings.SplitSeq(value, ",") {
			if b = strings.TrimSpace(b); b != "" {
				c.Brokers = append(c.Brokers, b)
			}
		}
	case "security.protocol":
		switch strings.ToUpper(value) {
		case "PLAINTEXT":
			c.TLS = false
		case "SSL":
			c.TLS = true
		case "SASL_PLAINTEXT":
			c.TLS = false
			c.defaultSASL()
		case "SASL_SSL":
			c.TLS = true
			c.defaultSASL()
		default:
			return fmt.Errorf("%w: security.protocol: unknown value: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", ErrConfig)
		}
	case "sasl.mechanism", "sasl.mechanisms":
		m, err := ParseMechanism(value)
		if err != nil || m == NoSASL {
			return fmt.Errorf("%w: %s: unknown mechanism: want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM", ErrConfig, key)
		}
		c.SASL = m
	case "sasl.username":
		c.Username = value
	case "sasl.password":
		c.Password = Secret(value)
	case "ssl.ca.location":
		c.CAFile = value
		c.TLS = true
	case "ssl.certificate.location":
		c.CertFile = value
		c.TLS = true
	case "ssl.key.location":
		c.KeyFile = value
		c.TLS = true
	case "ssl.endpoint.identification.algorithm":
		if !strings.EqualFold(value, "https") {
			return fmt.Errorf("%w: ssl.endpoint.identification.algorithm: only https (verify the broker's host name) is supported", ErrConfig)
		}
	default:
		return fmt.Errorf("%w %q: supported keys are %s", ErrUnknownProperty, key, strings.Join(properties, ", "))
	}
	return nil
}

// defaultSASL selects PLAIN for a SASL security protocol when no
// mechanism is set, as librdkafka does.
func (c *Config) defaultSASL() {
	if c.SASL == NoSASL {
		c.SASL = Plain
	}
}

// SetPropertyArg parses one "key=value" argument (kcat's -X) and applies
// it with SetProperty. The error never repeats the value. The caller's
// goroutine owns c.
func (c *Config) SetPropertyArg(kv string) error {
	key, value, ok := strings.Cut(kv, "=")
	if !ok || strings.TrimSpace(key) == "" {
		// Not repeated: a value without its key may be a password.
		return fmt.Errorf("%w: a property is not key=value", ErrConfig)
	}
	return c.SetProperty(key, value)
}

// ReadProperties applies every property of a Java-style properties file
// read from r: one "key=value" (or "key: value") per line, with blank
// lines and lines starting with # or ! ignored. name is used in errors
// ("client.properties line 3: …"). It stops at the first bad line. The
// caller's goroutine owns c.
func (c *Config) ReadProperties(r io.Reader, name string) error {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' || s[0] == '!' {
			continue
		}
		i := strings.IndexAny(s, "=:")
		if i <= 0 {
			return fmt.Errorf("%s line %d: %w: not key=value", name, line, ErrConfig)
		}
		if err := c.SetProperty(s[:i], s[i+1:]); err != nil {
			return fmt.Errorf("%s line %d: %w", name, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
