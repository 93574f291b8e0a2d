package kafkaconn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// ErrUnknownProperty is matched by the error SetProperty and
// ReadProperties return for a key they do not support. The error names
// the key (never the value, which may be a password) and the keys that
// are supported.
var ErrUnknownProperty = errors.New("kafkaconn: unsupported client property")

// ErrRefusedProperty is matched by the error SetProperty and
// ReadProperties return for a property that would change the security or
// the correctness of workrouter's clients (turning off certificate
// verification, acks other than all, a producer that is not idempotent).
// The error names the key and why, never the value.
var ErrRefusedProperty = errors.New("kafkaconn: refused client property")

// properties lists the librdkafka / Java client property keys that
// SetProperty applies, sorted.
var properties = []string{
	"bootstrap.servers",
	"sasl.jaas.config",
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

// ignored are the client-tuning keys that SetProperty accepts without
// applying them, with why: workrouter sets them itself, or they do not
// apply to it. Keys whose value matters (acks, enable.idempotence,
// enable.ssl.certificate.verification) are in settled instead.
var ignored = map[string]string{
	"session.timeout.ms":            "the worker sets its group session timeout itself (worker --session-timeout, consumer.Config.SessionTimeout)",
	"heartbeat.interval.ms":         "the worker sets its heartbeat interval itself (worker --heartbeat-interval, consumer.Config.HeartbeatInterval)",
	"client.dns.lookup":             "franz-go already dials every address a broker's name resolves to, as use_all_dns_ips does",
	"client.id":                     "workrouter names its clients itself (worker --client-id, consumer.Config.ClientID)",
	"schema.registry.url":           "it configures a Schema Registry client; workrouter does not use a Schema Registry",
	"basic.auth.credentials.source": "it configures a Schema Registry client; workrouter does not use a Schema Registry",
	"basic.auth.user.info":          "it configures a Schema Registry client; workrouter does not use a Schema Registry",
}

// settled are the keys whose one safe value is what workrouter does
// anyway: that value is accepted without applying it (with the first
// reason), any other is refused (with the second).
var settled = map[string]struct {
	values       []string // lower case
	same, refuse string
}{
	"acks": {[]string{"all", "-1"},
		"workrouter's router already produces with acks=all",
		"workrouter's router produces with acks=all: fewer acknowledgements could lose commands the router reported as sent; remove the line"},
	"enable.idempotence": {[]string{"true"},
		"workrouter's router is already an idempotent producer",
		"workrouter's router is an idempotent producer: without idempotence a retried send could write a command twice; remove the line"},
	"enable.ssl.certificate.verification": {[]string{"true"},
		"workrouter always verifies the brokers' certificates",
		"workrouter always verifies the brokers' certificates: trust a private CA with ssl.ca.location (--tls-ca) instead"},
}

// Properties returns the property keys SetProperty applies, sorted.
// Safe to call from any goroutine.
func Properties() []string { return slices.Clone(properties) }

// IgnoredProperties returns the client-tuning property keys SetProperty
// accepts without applying them (recording them in Config.Ignored),
// sorted. Safe to call from any goroutine.
func IgnoredProperties() []string {
	keys := slices.Collect(maps.Keys(ignored))
	for k := range settled {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// IgnoredProperty is a client property that SetProperty accepted without
// applying it: a client-tuning key that workrouter sets itself, or one
// that does not apply to it.
type IgnoredProperty struct {
	// Key is the property's key, such as "session.timeout.ms".
	Key string
	// Why says why it is not applied. It never holds the value.
	Why string
}

// SetProperty sets the field of c that a librdkafka-style or Java client
// property names (as in kcat's -X key=value and the client.properties
// files that managed services hand out):
//
//	bootstrap.servers                      Brokers (comma-separated)
//	security.protocol                      PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
//	sasl.mechanism, sasl.mechanisms        SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM)
//	sasl.username, sasl.password           Username, Password
//	sasl.jaas.config                       Username and Password, from the Java client's
//	                                       PlainLoginModule or ScramLoginModule (see below)
//	ssl.ca.location                        CAFile
//	ssl.certificate.location               CertFile
//	ssl.key.location                       KeyFile
//	ssl.endpoint.identification.algorithm  "https" (the default: verify the host name) only
//
// A security protocol with SASL and no mechanism yet selects PLAIN, as
// librdkafka does; a later sasl.mechanism replaces it.
//
// sasl.jaas.config is one login module, its control flag and its
// options, ending with ";":
//
//	org.apache.kafka.common.security.plain.PlainLoginModule required username='KEY' password='SECRET';
//	org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="pw";
//
// Values are quoted with ' or " (a backslash escapes the next character)
// or bare words. Only the username and password options are understood.
// PlainLoginModule needs the mechanism PLAIN and ScramLoginModule
// SCRAM-SHA-256 or SCRAM-SHA-512 (sasl.mechanism, in any order): Validate
// fails otherwise.
//
// Client-tuning keys that workrouter sets itself or that do not apply to
// it (IgnoredProperties: session.timeout.ms, heartbeat.interval.ms,
// client.dns.lookup, client.id, the Schema Registry's keys, and acks=all,
// enable.idempotence=true and enable.ssl.certificate.verification=true)
// are accepted without changing c's connection; each is recorded once in
// c.Ignored, for the caller to log. A value of acks,
// enable.idempotence or enable.ssl.certificate.verification that would
// weaken workrouter's guarantees fails with an error matching
// ErrRefusedProperty. Other keys fail with an error matching
// ErrUnknownProperty, bad values with ErrConfig; no error repeats the
// value. The caller's goroutine owns c.
func (c *Config) SetProperty(key, value string) error {
	key, value = strings.TrimSpace(key), strings.TrimSpace(value)
	if why, ok := ignored[key]; ok {
		c.ignore(key, why)
		return nil
	}
	if s, ok := settled[key]; ok {
		if !slices.Contains(s.values, strings.ToLower(value)) {
			return fmt.Errorf("%w %q: %s", ErrRefusedProperty, key, s.refuse)
		}
		c.ignore(key, s.same)
		return nil
	}
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
	case "sasl.jaas.config":
		j, err := parseJAAS(value)
		if err != nil {
			return err
		}
		c.loginModule, c.Username, c.Password = j.module, j.username, Secret(j.password)
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
		return fmt.Errorf("%w %q: supported keys are %s (and, accepted without being applied, %s)",
			ErrUnknownProperty, key, strings.Join(properties, ", "), strings.Join(IgnoredProperties(), ", "))
	}
	return nil
}

// ignore records that key was accepted without being applied, once.
func (c *Config) ignore(key, why string) {
	if !slices.ContainsFunc(c.Ignored, func(p IgnoredProperty) bool { return p.Key == key }) {
		c.Ignored = append(c.Ignored, IgnoredProperty{Key: key, Why: why})
	}
}

// defaultSASL selects PLAIN for a SASL security protocol when no
// mechanism is set, as librdkafka does.
func (c *Config) defaultSASL() {
	if c.SASL == NoSASL {
		c.SASL = Plain
	}
}

// Login modules of sasl.jaas.config.
const (
	plainLoginModule = "org.apache.kafka.common.security.plain.PlainLoginModule"
	scramLoginModule = "org.apache.kafka.common.security.scram.ScramLoginModule"
)

// jaas is a parsed sasl.jaas.config: the mechanism family of its login
// module (Plain, or ScramSHA512 for either SCRAM) and its credentials.
type jaas struct {
	module             Mechanism
	username, password string
}

// parseJAAS parses a sasl.jaas.config value. Its errors match ErrConfig
// and never repeat an option's value.
func parseJAAS(s string) (jaas, error) {
	bad := func(format string, args ...any) (jaas, error) {
		return jaas{}, fmt.Errorf("%w: sasl.jaas.config: "+format, append([]any{ErrConfig}, args...)...)
	}
	var j jaas
	module, rest := jaasWord(s)
	switch module {
	case plainLoginModule:
		j.module = Plain
	case scramLoginModule:
		j.module = ScramSHA512
	case "":
		return bad("empty: want %s or %s, its control flag and its options", plainLoginModule, scramLoginModule)
	default:
		return bad("login module %q is not supported: want %s or %s", module, plainLoginModule, scramLoginModule)
	}
	flag, rest := jaasWord(rest)
	switch strings.ToLower(flag) {
	case "required", "requisite", "sufficient", "optional":
	default:
		return bad("the login module must be followed by its control flag (required)")
	}
	seen := map[string]bool{}
	for {
		rest = strings.TrimSpace(rest)
		if rest == "" {
			return bad("missing the closing \";\"")
		}
		if rest[0] == ';' {
			if strings.TrimSpace(rest[1:]) != "" {
				return bad("more than one login module, or text after the closing \";\"")
			}
			break
		}
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return bad("an option is not name=value")
		}
		name := strings.TrimSpace(rest[:eq])
		value, tail, err := jaasValue(strings.TrimSpace(rest[eq+1:]))
		if err != nil {
			return bad("option %s: %v", name, err)
		}
		if seen[name] {
			return bad("option %s given twice", name)
		}
		seen[name] = true
		switch name {
		case "username":
			j.username = value
		case "password":
			j.password = value
		default:
			// tokenauth (SCRAM delegation tokens) among others: not
			// supported, and ignoring it would log in differently.
			return bad("option %s is not supported: only username and password are", name)
		}
		rest = tail
	}
	if j.username == "" || j.password == "" {
		return bad("the username and password options are required")
	}
	return j, nil
}

// jaasWord splits off the first whitespace-separated word of s.
func jaasWord(s string) (word, rest string) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == ';' })
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// jaasValue reads one option value at the start of s: quoted with ' or "
// (a backslash escapes the next character) or a bare word. Its error
// never repeats the value.
func jaasValue(s string) (value, rest string, err error) {
	if s == "" {
		return "", "", errors.New("no value")
	}
	q := s[0]
	if q != '\'' && q != '"' {
		value, rest = jaasWord(s)
		return value, rest, nil
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		case q:
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", errors.New("unterminated quoted value")
}

// checkLoginModule fails when c's sasl.jaas.config login module does not
// fit its mechanism.
func (c Config) checkLoginModule() error {
	switch {
	case c.loginModule == Plain && c.SASL != Plain:
		return fmt.Errorf("%w: sasl.jaas.config's PlainLoginModule is for SASL PLAIN, but the mechanism is %s: set sasl.mechanism=PLAIN", ErrConfig, c.mechanismName())
	case c.loginModule == ScramSHA512 && c.SASL != ScramSHA256 && c.SASL != ScramSHA512:
		return fmt.Errorf("%w: sasl.jaas.config's ScramLoginModule is for SASL SCRAM, but the mechanism is %s: set sasl.mechanism=SCRAM-SHA-256 or SCRAM-SHA-512", ErrConfig, c.mechanismName())
	}
	return nil
}

// mechanismName names c's mechanism for messages.
func (c Config) mechanismName() string {
	if c.SASL == NoSASL {
		return "none"
	}
	return string(c.SASL)
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
// read from r with SetProperty: one "key=value" (or "key: value") per
// line, with blank lines and lines starting with # or ! ignored. A line
// ending in an odd number of backslashes continues on the next one (whose
// leading blanks are dropped), as in Java; no other backslash escape is
// interpreted. name is used in errors ("client.properties line 3: …"). It
// stops at the first bad line. The caller's goroutine owns c.
func (c *Config) ReadProperties(r io.Reader, name string) error {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		start := line
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' || s[0] == '!' {
			continue
		}
		for continues(s) && sc.Scan() {
			line++
			s = s[:len(s)-1] + strings.TrimLeft(sc.Text(), " \t\f")
			s = strings.TrimRight(s, " \t\f\r")
		}
		i := strings.IndexAny(s, "=:")
		if i <= 0 {
			return fmt.Errorf("%s line %d: %w: not key=value", name, start, ErrConfig)
		}
		if err := c.SetProperty(s[:i], s[i+1:]); err != nil {
			return fmt.Errorf("%s line %d: %w", name, start, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// continues reports whether a properties line ends in an odd number of
// backslashes, which joins it to the next line.
func continues(s string) bool {
	n := len(s) - len(strings.TrimRight(s, `\`))
	return n%2 == 1
}
