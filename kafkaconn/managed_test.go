package kafkaconn_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/kafkaconn"
)

// ignoredKeys returns the keys of c.Ignored, checking that no reason
// holds a secret.
func ignoredKeys(t *testing.T, c kafkaconn.Config, secrets ...string) []string {
	t.Helper()
	var keys []string
	for _, p := range c.Ignored {
		keys = append(keys, p.Key)
		for _, s := range secrets {
			if strings.Contains(p.Why, s) {
				t.Errorf("the reason of %s shows a secret: %q", p.Key, p.Why)
			}
		}
		if p.Why == "" {
			t.Errorf("%s ignored without a reason", p.Key)
		}
	}
	return keys
}

// TestConfluentCloudProperties reads the two client.properties files
// Confluent Cloud hands out, verbatim: the librdkafka form and the Java
// form (sasl.jaas.config). Both connect as KEY with PLAIN over TLS; the
// client-tuning and Schema Registry keys are accepted and listed as
// ignored, each once, without their values.
func TestConfluentCloudProperties(t *testing.T) {
	for _, tc := range []struct {
		file    string
		ignored []string
	}{
		{"confluent-cloud-librdkafka.properties",
			[]string{"session.timeout.ms", "schema.registry.url", "basic.auth.credentials.source", "basic.auth.user.info"}},
		{"confluent-cloud-java.properties",
			[]string{"client.dns.lookup", "session.timeout.ms", "acks", "schema.registry.url", "basic.auth.credentials.source", "basic.auth.user.info"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var c kafkaconn.Config
			if err := c.ReadProperties(f, tc.file); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(c.Brokers) != "[pkc-abc12.us-east-1.aws.confluent.cloud:9092]" || !c.TLS || c.SASL != kafkaconn.Plain ||
				c.Username != "KEY" || c.Password.Reveal() != "SECRET" {
				t.Fatalf("got brokers %v, TLS %v, SASL %q, user %q, password ok %v", c.Brokers, c.TLS, c.SASL, c.Username, c.Password.Reveal() == "SECRET")
			}
			if got := ignoredKeys(t, c, "SECRET", "SR_SECRET", "45000"); !slices.Equal(got, tc.ignored) {
				t.Errorf("ignored %v, want %v", got, tc.ignored)
			}
			if _, err := c.Opts(); err != nil {
				t.Fatalf("Opts: %v", err)
			}
			if got := c.String(); got != "TLS, SASL PLAIN as KEY" {
				t.Errorf("String() = %q", got)
			}
		})
	}
}

// TestJAASConfig reads the Java client's sasl.jaas.config in the forms
// its users write: SCRAM, double quotes, escapes, a continued line, the
// mechanism before or after it.
func TestJAASConfig(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		mech       kafkaconn.Mechanism
		user, pw   string
	}{
		{"scram double quotes", "security.protocol=SASL_SSL\n" +
			`sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="` + secret + `";` +
			"\nsasl.mechanism=SCRAM-SHA-512\n", kafkaconn.ScramSHA512, "alice", secret},
		{"mechanism first", "sasl.mechanism=SCRAM-SHA-256\nsecurity.protocol=SASL_SSL\n" +
			`sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username='alice' password='` + secret + `' ;`,
			kafkaconn.ScramSHA256, "alice", secret},
		{"escapes and bare words", "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n" +
			`sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=bob password="a\"b\\c'd";`,
			kafkaconn.Plain, "bob", `a"b\c'd`},
		{"continued lines", "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n" +
			"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n" +
			"    username=\"alice\" \\\n    password=\"" + secret + "\";\n", kafkaconn.ScramSHA512, "alice", secret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c kafkaconn.Config
			if err := c.ReadProperties(strings.NewReader(tc.file), "p"); err != nil {
				t.Fatal(err)
			}
			if c.SASL != tc.mech || c.Username != tc.user || c.Password.Reveal() != tc.pw || !c.TLS {
				t.Fatalf("got SASL %q, user %q, password ok %v, TLS %v", c.SASL, c.Username, c.Password.Reveal() == tc.pw, c.TLS)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}

	for _, tc := range []struct {
		name, file string
		want       error
		says       string
	}{
		{"scram without its mechanism", "security.protocol=SASL_SSL\n" +
			`sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="` + secret + `";`,
			kafkaconn.ErrConfig, "set sasl.mechanism=SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"plain module, scram mechanism", "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n" +
			`sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="` + secret + `";`,
			kafkaconn.ErrConfig, "PlainLoginModule is for SASL PLAIN"},
		{"no SASL protocol", `sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="` + secret + `";`,
			kafkaconn.ErrConfig, "the mechanism is none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c kafkaconn.Config
			if err := c.ReadProperties(strings.NewReader(tc.file), "p"); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), secret) {
				t.Fatalf("Validate: %v, want %v saying %q without the password", err, tc.want, tc.says)
			}
		})
	}
}

// TestPropertiesRefused: a property that would weaken security or
// correctness, a JAAS config that cannot be read as written, and an
// unknown key fail with one error naming the key and the line, never the
// value.
func TestPropertiesRefused(t *testing.T) {
	jaas := func(opts string) string {
		return "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required " + opts
	}
	for _, tc := range []struct {
		line string
		want error
		says string
	}{
		{"acks=1", kafkaconn.ErrRefusedProperty, "acks=all"},
		{"acks=0", kafkaconn.ErrRefusedProperty, "could lose commands"},
		{"enable.idempotence=false", kafkaconn.ErrRefusedProperty, "idempotent"},
		{"enable.ssl.certificate.verification=false", kafkaconn.ErrRefusedProperty, "always verifies"},
		{"ssl.endpoint.identification.algorithm=", kafkaconn.ErrConfig, "only https"},
		{"linger.ms=5", kafkaconn.ErrUnknownProperty, "session.timeout.ms"},
		{jaas(`username="alice" password="` + secret + `" tokenauth="true";`), kafkaconn.ErrConfig, "option tokenauth is not supported"},
		{jaas(`username="alice" password="` + secret + `;`), kafkaconn.ErrConfig, "unterminated quoted value"},
		{jaas(`username="alice" password="` + secret + `"`), kafkaconn.ErrConfig, `missing the closing ";"`},
		{jaas(`username="alice";`), kafkaconn.ErrConfig, "username and password options are required"},
		{jaas(`username="alice" password="` + secret + `"; other.Module required;`), kafkaconn.ErrConfig, "more than one login module"},
		{"sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;", kafkaconn.ErrConfig, "is not supported"},
		{"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule username='a' password='" + secret + "';", kafkaconn.ErrConfig, "control flag"},
	} {
		var c kafkaconn.Config
		err := c.ReadProperties(strings.NewReader("# a comment\n"+tc.line+"\n"), "f")
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: got %v, want %v saying %q", tc.line, err, tc.want, tc.says)
			continue
		}
		if strings.Contains(err.Error(), secret) || !strings.HasPrefix(err.Error(), "f line 2: ") {
			t.Errorf("%q: error shows the value or does not name the line: %v", tc.line, err)
		}
	}

	// The safe values are accepted, each listed once however often given.
	var c kafkaconn.Config
	for _, kv := range []string{"acks=-1", "acks=all", "enable.idempotence=true", "enable.ssl.certificate.verification=true", "client.id=x"} {
		if err := c.SetPropertyArg(kv); err != nil {
			t.Fatalf("%s: %v", kv, err)
		}
	}
	if got, want := ignoredKeys(t, c), []string{"acks", "enable.idempotence", "enable.ssl.certificate.verification", "client.id"}; !slices.Equal(got, want) {
		t.Fatalf("ignored %v, want %v", got, want)
	}
}
