package kafkaconn_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/internal/testtls"
	"github.com/workrouter/workrouter/kafkaconn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "s3cret-planted-password"

// secureCluster starts kfake with TLS (certificates of a fresh CA) and
// SASL, with user alice on SCRAM-SHA-512 and SCRAM-SHA-256 and user bob on
// PLAIN, both with password secret.
func secureCluster(t *testing.T) (*kfake.Cluster, testtls.Files) {
	t.Helper()
	f := testtls.New(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(f.ServerConfig(t)), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "alice", secret), kfake.Superuser("SCRAM-SHA-256", "alice", secret),
		kfake.Superuser("PLAIN", "bob", secret), kfake.SeedTopics(3, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return kc, f
}

// ping connects as c to addrs and returns the explained error of a Ping,
// and whether the Probe reported the failure as one no retry fixes.
func ping(t *testing.T, c kafkaconn.Config, addrs []string) (error, bool) {
	t.Helper()
	opts, err := c.Opts()
	if err != nil {
		t.Fatalf("Opts: %v", err)
	}
	probe := kafkaconn.NewProbe(c)
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(addrs...), kgo.DialTimeout(time.Second), probe.Opt())...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = probe.Explain(cl.Ping(ctx))
	select {
	case <-probe.Refused():
		return err, true
	default:
		return err, false
	}
}

// TestConnect connects to kfake over TLS + SASL with every mechanism kfake
// serves, and checks that each misconfiguration is named by its cause.
func TestConnect(t *testing.T) {
	kc, f := secureCluster(t)
	other := testtls.New(t) // a CA the broker's certificate does not come from
	plain, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	addrs := kc.ListenAddrs()
	for _, c := range []struct {
		name  string
		cfg   kafkaconn.Config
		addrs []string
		want  error // nil: connects
	}{
		{"scram-sha-512", kafkaconn.Config{CAFile: f.CA, SASL: kafkaconn.ScramSHA512, Username: "alice", Password: secret}, addrs, nil},
		{"scram-sha-256", kafkaconn.Config{CAFile: f.CA, SASL: kafkaconn.ScramSHA256, Username: "alice", Password: secret}, addrs, nil},
		{"plain", kafkaconn.Config{CAFile: f.CA, SASL: kafkaconn.Plain, Username: "bob", Password: secret}, addrs, nil},
		{"wrong password", kafkaconn.Config{CAFile: f.CA, SASL: kafkaconn.ScramSHA512, Username: "alice", Password: "wrong"}, addrs, kafkaconn.ErrAuthFailed},
		{"wrong plain password", kafkaconn.Config{CAFile: f.CA, SASL: kafkaconn.Plain, Username: "bob", Password: "wrong"}, addrs, kafkaconn.ErrAuthFailed},
		{"unknown user", kafkaconn.Config{CAFile: f.CA, SASL: kafkaconn.ScramSHA512, Username: "mallory", Password: secret}, addrs, kafkaconn.ErrAuthFailed},
		{"untrusted CA", kafkaconn.Config{CAFile: other.CA, SASL: kafkaconn.ScramSHA512, Username: "alice", Password: secret}, addrs, kafkaconn.ErrUntrustedCertificate},
		{"system roots", kafkaconn.Config{TLS: true, SASL: kafkaconn.ScramSHA512, Username: "alice", Password: secret}, addrs, kafkaconn.ErrUntrustedCertificate},
		{"wrong server name", kafkaconn.Config{CAFile: f.CA, ServerName: "kafka.example.com", SASL: kafkaconn.ScramSHA512, Username: "alice", Password: secret}, addrs, kafkaconn.ErrUntrustedCertificate},
		{"plaintext client", kafkaconn.Config{SASL: kafkaconn.ScramSHA512, Username: "alice", Password: secret}, addrs, kafkaconn.ErrTLSRequired},
		{"no SASL", kafkaconn.Config{CAFile: f.CA}, addrs, kafkaconn.ErrSASLRequired},
		{"TLS client, plaintext broker", kafkaconn.Config{CAFile: f.CA}, plain.ListenAddrs(), kafkaconn.ErrNotTLS},
	} {
		t.Run(c.name, func(t *testing.T) {
			err, refused := ping(t, c.cfg, c.addrs)
			if c.want == nil {
				if err != nil || refused {
					t.Fatalf("Ping: %v (refused %v)", err, refused)
				}
				return
			}
			// Every cause is one no retry fixes, and the Probe sees each:
			// a failed setup, or a broker that hung up on the first
			// request (whose bare EOF is all kgo's hook sees).
			if !refused {
				t.Errorf("Probe.Refused not closed for %v", err)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Ping: got %v, want an error matching %q", err, c.want)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || strings.Contains(msg, secret) || strings.Contains(msg, "wrong") {
				t.Errorf("error is not one secret-free line: %q", msg)
			}
			t.Logf("%s", msg)
		})
	}
}

// TestProduceConsumeOverSASLSSL produces and consumes a record over
// TLS + SCRAM-SHA-512 with the options Opts builds.
func TestProduceConsumeOverSASLSSL(t *testing.T) {
	kc, f := secureCluster(t)
	opts, err := kafkaconn.Config{CAFile: f.CA, SASL: kafkaconn.ScramSHA512, Username: "alice", Password: secret}.Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("t"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fs := cl.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "v" {
		t.Fatalf("consumed %v", recs)
	}
}

func TestValidate(t *testing.T) {
	f := testtls.New(t)
	for _, c := range []struct {
		name string
		cfg  kafkaconn.Config
	}{
		{"SASL without user", kafkaconn.Config{SASL: kafkaconn.ScramSHA512, Password: secret}},
		{"SASL without password", kafkaconn.Config{SASL: kafkaconn.Plain, Username: "u"}},
		{"password without SASL", kafkaconn.Config{Username: "u", Password: secret}},
		{"oauthbearer without token", kafkaconn.Config{SASL: kafkaconn.OAuthBearer}},
		{"msk iam without TLS", kafkaconn.Config{SASL: kafkaconn.AWSMSKIAM}},
		{"unknown mechanism", kafkaconn.Config{SASL: "GSSAPI", Username: "u", Password: secret}},
		{"certificate without key", kafkaconn.Config{CertFile: f.ClientCert}},
		{"missing CA file", kafkaconn.Config{CAFile: f.Dir + "/nope.pem"}},
		{"CA file without PEM", kafkaconn.Config{CAFile: f.ClientKey + "x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.cfg.Opts()
			if !errors.Is(err, kafkaconn.ErrConfig) {
				t.Fatalf("Opts: got %v, want ErrConfig", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
	if _, err := (kafkaconn.Config{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey, SASL: kafkaconn.AWSMSKIAM}).Opts(); err != nil {
		t.Fatalf("mutual TLS with MSK IAM: %v", err)
	}
}

func TestParseMechanism(t *testing.T) {
	for in, want := range map[string]kafkaconn.Mechanism{
		"": kafkaconn.NoSASL, "none": kafkaconn.NoSASL, "plain": kafkaconn.Plain, "PLAIN": kafkaconn.Plain,
		"scram-sha-256": kafkaconn.ScramSHA256, "SCRAM-SHA-512": kafkaconn.ScramSHA512, "oauthbearer": kafkaconn.OAuthBearer,
		"aws-msk-iam": kafkaconn.AWSMSKIAM, "AWS_MSK_IAM": kafkaconn.AWSMSKIAM,
	} {
		if got, err := kafkaconn.ParseMechanism(in); err != nil || got != want {
			t.Errorf("ParseMechanism(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := kafkaconn.ParseMechanism("GSSAPI"); !errors.Is(err, kafkaconn.ErrConfig) {
		t.Errorf("ParseMechanism(GSSAPI): %v, want ErrConfig", err)
	}
}

func TestProperties(t *testing.T) {
	var c kafkaconn.Config
	file := `# Confluent Cloud style
bootstrap.servers=pkc-1.example.com:9092, pkc-2.example.com:9092
security.protocol=SASL_SSL
sasl.mechanisms=PLAIN
sasl.username=KEY
sasl.password=` + secret + `

! a comment too
ssl.ca.location: /etc/ssl/ca.pem
`
	if err := c.ReadProperties(strings.NewReader(file), "client.properties"); err != nil {
		t.Fatal(err)
	}
	want := kafkaconn.Config{Brokers: []string{"pkc-1.example.com:9092", "pkc-2.example.com:9092"}, TLS: true,
		SASL: kafkaconn.Plain, Username: "KEY", Password: secret, CAFile: "/etc/ssl/ca.pem"}
	if fmt.Sprint(c.Brokers) != fmt.Sprint(want.Brokers) || c.TLS != want.TLS || c.SASL != want.SASL ||
		c.Username != want.Username || c.Password != want.Password || c.CAFile != want.CAFile {
		t.Fatalf("got %+v, want %+v", c, want)
	}

	// SASL_SSL alone means PLAIN, like librdkafka; an explicit mechanism wins.
	var d kafkaconn.Config
	for _, kv := range []string{"security.protocol=sasl_plaintext", "sasl.mechanism=SCRAM-SHA-256"} {
		if err := d.SetPropertyArg(kv); err != nil {
			t.Fatal(err)
		}
	}
	if d.TLS || d.SASL != kafkaconn.ScramSHA256 {
		t.Fatalf("got %+v", d)
	}

	for _, bad := range []struct {
		in   string
		want error
	}{
		{"fetch.wait.max.ms=100", kafkaconn.ErrUnknownProperty},
		{"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required password=\"" + secret + "\";", kafkaconn.ErrConfig},
		{"security.protocol=" + secret, kafkaconn.ErrConfig},
		{"sasl.mechanism=" + secret, kafkaconn.ErrConfig},
		{"no-equals-sign", kafkaconn.ErrConfig},
	} {
		var c kafkaconn.Config
		err := c.ReadProperties(strings.NewReader(bad.in), "f")
		if !errors.Is(err, bad.want) {
			t.Errorf("%q: got %v, want %v", bad.in, err, bad.want)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%q: error shows the value: %v", bad.in, err)
		}
		if !strings.HasPrefix(err.Error(), "f line 1: ") {
			t.Errorf("%q: error does not name the line: %v", bad.in, err)
		}
	}
}

// TestSecretNeverPrinted checks every way a Config reaches text.
func TestSecretNeverPrinted(t *testing.T) {
	c := kafkaconn.Config{TLS: true, SASL: kafkaconn.ScramSHA512, Username: "alice", Password: secret}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("conn", "conn", c, "password", c.Password)
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%v", c.Password),
		fmt.Sprintf("%#v", c.Password), logged.String(), c.String()} {
		if strings.Contains(s, secret) {
			t.Errorf("secret shown: %s", s)
		}
	}
	if got := c.String(); got != "TLS, SASL SCRAM-SHA-512 as alice" {
		t.Errorf("String() = %q", got)
	}
	if c.Password.Reveal() != secret {
		t.Error("Reveal does not return the secret")
	}
}

// TestProbeExplainsAVagueError: a client without SASL whose first request
// the broker hung up on may see the request fail with a vaguer error (the
// connection died under it while another request read the EOF); the Probe
// saw that read end in a bare EOF, which is what kgo's hook is given, and
// names the cause. ApiVersions, which brokers answer before
// authentication, does not count as talking to the broker; any other
// response does, and after it such an EOF is a broker going away and
// names nothing.
func TestProbeExplainsAVagueError(t *testing.T) {
	vague := errors.New("the broker connection has died and the request will be retried on a new connection")
	cfg := kafkaconn.Config{Brokers: []string{"127.0.0.1:9092"}, TLS: true} // TLS without SASL
	for _, tc := range []struct {
		name string
		read func(p *kafkaconn.Probe)
		want bool // the cause named
	}{
		{"bare EOF after ApiVersions", func(p *kafkaconn.Probe) {
			p.OnBrokerRead(kgo.BrokerMetadata{}, 18, 100, 0, 0, nil)
			p.OnBrokerRead(kgo.BrokerMetadata{}, 3, 0, 0, 0, io.EOF)
		}, true},
		{"unexpected EOF", func(p *kafkaconn.Probe) {
			p.OnBrokerRead(kgo.BrokerMetadata{}, 3, 0, 0, 0, io.ErrUnexpectedEOF)
		}, true},
		{"kgo's first-read error", func(p *kafkaconn.Probe) {
			p.OnBrokerRead(kgo.BrokerMetadata{}, 18, 0, 0, 0, &kgo.ErrFirstReadEOF{})
		}, true},
		{"EOF after a response", func(p *kafkaconn.Probe) {
			p.OnBrokerRead(kgo.BrokerMetadata{}, 3, 100, 0, 0, nil)
			p.OnBrokerRead(kgo.BrokerMetadata{}, 3, 0, 0, 0, io.EOF)
		}, false},
		{"wrapped EOF", func(p *kafkaconn.Probe) {
			p.OnBrokerRead(kgo.BrokerMetadata{}, 3, 0, 0, 0, fmt.Errorf("read: %w", io.EOF))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := kafkaconn.NewProbe(cfg)
			tc.read(p)
			err := p.Explain(vague)
			if got := errors.Is(err, kafkaconn.ErrSASLRequired); got != tc.want {
				t.Fatalf("Explain: %v, want ErrSASLRequired %v", err, tc.want)
			}
			select {
			case <-p.Refused():
				if !tc.want {
					t.Fatal("Refused closed, no cause named")
				}
			default:
				if tc.want {
					t.Fatal("Refused not closed for a named cause")
				}
			}
		})
	}
}
