package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/internal/testtls"
)

// The clients of other languages against the broker's SASL: kcat and
// confluent-kafka-python (librdkafka), KafkaJS and kafka-python, run as
// subprocesses, and franz-go in process. .ci/run installs them; without
// one a test skips with what to install, except under CI=true, where it
// fails (CI never skips).

// clientsDir holds the client scripts and KafkaJS (npm ci there).
const clientsDir = "testdata/clients"

// python is Debian's interpreter, the one python3-confluent-kafka and
// python3-kafka install into.
const python = "/usr/bin/python3"

// login is how a client connects.
type login struct {
	addr, mech, password string
	ca                   string // trust this CA and use TLS; empty: plaintext
}

func (l login) protocol() string {
	if l.ca != "" {
		return "SASL_SSL"
	}
	return "SASL_PLAINTEXT"
}

// foreignClient is one client library.
type foreignClient struct {
	name string
	// missing says what is not installed, or "".
	missing func() string
	// produce sends values (each the key and the value of one record)
	// to topic and returns the client's output.
	produce func(ctx context.Context, l login, topic string, values []string) (string, error)
	// refused matches the client's output for a refused login; nil
	// where the protocol it uses has no way to say why (kafka-python's
	// SaslHandshake v0: the broker only closes the connection).
	refused *regexp.Regexp
}

func lookPath(bin, install string) string {
	if _, err := exec.LookPath(bin); err != nil {
		return bin + " (" + install + ")"
	}
	return ""
}

func pythonModule(module, pkg string) func() string {
	return func() string {
		if _, err := os.Stat(python); err != nil {
			return python + " (apt-get install python3)"
		}
		if err := exec.Command(python, "-c", "import "+module).Run(); err != nil {
			return "the Python module " + module + " (apt-get install " + pkg + ")"
		}
		return ""
	}
}

// script runs a client script of clientsDir with the login and topic in
// its environment and the values on its stdin.
func script(ctx context.Context, l login, topic string, values []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(),
		"BOOTSTRAP="+l.addr, "MECHANISM="+l.mech, "SASL_USER="+saslUser, "SASL_PASSWORD="+l.password,
		"CA="+l.ca, "TOPIC="+topic)
	cmd.Stdin = strings.NewReader(strings.Join(values, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kcatArgs are kcat's connection arguments for l.
func kcatArgs(l login) []string {
	args := []string{"-b", l.addr,
		"-X", "security.protocol=" + l.protocol(), "-X", "sasl.mechanisms=" + l.mech,
		"-X", "sasl.username=" + saslUser, "-X", "sasl.password=" + l.password}
	if l.ca != "" {
		args = append(args, "-X", "ssl.ca.location="+l.ca)
	}
	return args
}

var foreignClients = []foreignClient{
	{
		name:    "kcat",
		missing: func() string { return lookPath("kcat", "apt-get install kcat") },
		produce: func(ctx context.Context, l login, topic string, values []string) (string, error) {
			var in strings.Builder
			for _, v := range values {
				fmt.Fprintf(&in, "%s:%s\n", v, v)
			}
			cmd := exec.CommandContext(ctx, "kcat", append(kcatArgs(l), "-P", "-t", topic, "-K:", "-X", "topic.partitioner=murmur2_random")...)
			cmd.Stdin = strings.NewReader(in.String())
			out, err := cmd.CombinedOutput()
			return string(out), err
		},
		refused: regexp.MustCompile(`Authentication failure: .*SASL authentication error: Authentication failed`),
	},
	{
		name:    "confluent-kafka-python",
		missing: pythonModule("confluent_kafka", "python3-confluent-kafka"),
		produce: func(ctx context.Context, l login, topic string, values []string) (string, error) {
			return script(ctx, l, topic, values, python, filepath.Join(clientsDir, "clients.py"), "confluent")
		},
		refused: regexp.MustCompile(`authentication failed: .*SASL authentication error: Authentication failed`),
	},
	{
		name:    "kafka-python",
		missing: pythonModule("kafka", "python3-kafka"),
		produce: func(ctx context.Context, l login, topic string, values []string) (string, error) {
			return script(ctx, l, topic, values, python, filepath.Join(clientsDir, "clients.py"), "kafka-python")
		},
	},
	{
		name: "kafkajs",
		missing: func() string {
			if m := lookPath("node", "apt-get install nodejs npm"); m != "" {
				return m
			}
			if _, err := os.Stat(filepath.Join(clientsDir, "node_modules", "kafkajs", "package.json")); err != nil {
				return "KafkaJS (npm ci --prefix cmd/internal/broker/" + clientsDir + ")"
			}
			return ""
		},
		produce: func(ctx context.Context, l login, topic string, values []string) (string, error) {
			return script(ctx, l, topic, values, "node", filepath.Join(clientsDir, "kafkajs.js"))
		},
		refused: regexp.MustCompile(`KafkaJSSASLAuthenticationError: SASL .* authentication failed: Authentication failed`),
	},
}

// TestForeignClientsLogIn: every client, with every mechanism, over
// SASL_PLAINTEXT and SASL_SSL, produces with the right password (the
// records are read back, and kcat consumes them too) and fails with a wrong
// one: the client exits with an error that says the login failed (where
// its protocol can say so), and the broker counted the refusal.
func TestForeignClientsLogIn(t *testing.T) {
	tf := testtls.New(t)
	for _, secure := range []bool{false, true} {
		var serverTLS, clientConf *tls.Config
		ca := ""
		if secure {
			serverTLS, clientConf, ca = tf.ServerConfig(t), clientTLS(t, tf.CA), tf.CA
		}
		topics := map[string]int32{}
		for _, c := range foreignClients {
			for _, mech := range allMechanisms {
				topics[c.name+"-"+strings.ToLower(mech)] = 3
			}
		}
		b := saslBroker(t, serverTLS, topics)
		for _, c := range foreignClients {
			for _, mech := range allMechanisms {
				l := login{addr: b.Addr(), mech: mech, password: saslPassword, ca: ca}
				t.Run(c.name+"/"+l.protocol()+"/"+mech, func(t *testing.T) {
					if m := c.missing(); m != "" {
						msg := fmt.Sprintf("%s is not installed: %s", c.name, m)
						if os.Getenv("CI") == "true" {
							t.Fatal(msg + "; CI=true, so this fails instead of skipping (.ci/run installs it)")
						}
						t.Skip(msg)
					}
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					topic := c.name + "-" + strings.ToLower(mech)
					var want []string
					for i := range 3 {
						want = append(want, fmt.Sprintf("%s-%d", topic, i))
					}

					out, err := c.produce(ctx, l, topic, want)
					if err != nil {
						t.Fatalf("%s produce with the right password: %v\n%s", c.name, err, out)
					}
					if got := readBack(t, ctx, b, clientConf, topic, len(want)); !slices.Equal(got, want) {
						t.Fatalf("%s produced %q, the topic holds %q", c.name, want, got)
					}
					if c.name == "kcat" {
						cmd := exec.CommandContext(ctx, "kcat", append(kcatArgs(l), "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", `%s\n`)...)
						var stderr bytes.Buffer
						cmd.Stderr = &stderr
						got, err := cmd.Output()
						lines := strings.Fields(string(got))
						slices.Sort(lines)
						if err != nil || !slices.Equal(lines, want) {
							t.Fatalf("kcat -C read %q (%v; %s), want %q", lines, err, stderr.String(), want)
						}
					}

					before := b.AuthFailures()
					bad := l
					bad.password = "wrong-" + saslPassword
					out, err = c.produce(ctx, bad, topic, []string{topic + "-refused"})
					if ctx.Err() != nil {
						t.Fatalf("%s with a wrong password did not finish: %v\n%s", c.name, ctx.Err(), out)
					}
					if err == nil {
						t.Fatalf("%s produced with a wrong password:\n%s", c.name, out)
					}
					if c.refused != nil && !c.refused.MatchString(out) {
						t.Fatalf("%s with a wrong password: %v, and its output does not match %q:\n%s", c.name, err, c.refused, out)
					}
					if after := b.AuthFailures(); after <= before {
						t.Fatalf("the broker counted no refused login (%d before, %d after):\n%s", before, after, out)
					}
					t.Logf("wrong password: %v: %s", err, lastLine(out))
				})
			}
		}
		// franz-go, the client the broker was written for, in process.
		for _, mech := range allMechanisms {
			t.Run("franz-go/"+login{ca: ca}.protocol()+"/"+mech, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				topic := "franz-go-" + strings.ToLower(mech)
				if err := b.Cluster().CreateTopic(topic, 1, nil); err != nil {
					t.Fatal(err)
				}
				connect := func(password string, opts ...kgo.Opt) *kgo.Client {
					opts = append(opts, kgo.SASL(mechanism(t, mech, password)))
					if clientConf != nil {
						opts = append(opts, kgo.DialTLSConfig(clientConf))
					}
					return newClient(t, b.Addr(), opts...)
				}
				cl := connect(saslPassword, kgo.DefaultProduceTopic(topic))
				if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(topic)}).FirstErr(); err != nil {
					t.Fatalf("franz-go produce: %v", err)
				}
				if got := readBack(t, ctx, b, clientConf, topic, 1); !slices.Equal(got, []string{topic}) {
					t.Fatalf("franz-go produced %q, the topic holds %q", topic, got)
				}
				before := b.AuthFailures()
				bad := connect("wrong-" + saslPassword)
				if err := bad.Ping(ctx); err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
					t.Fatalf("franz-go with a wrong password: %v, want SASL_AUTHENTICATION_FAILED", err)
				}
				if after := b.AuthFailures(); after <= before {
					t.Fatalf("the broker counted no refused login (%d before, %d after)", before, after)
				}
			})
		}
	}
}

// readBack reads topic's n records (as a franz-go client logged in with
// PLAIN) and returns their values, sorted; the topic must hold exactly n.
func readBack(t *testing.T, ctx context.Context, b *broker.Broker, tlsConf *tls.Config, topic string, n int) []string {
	t.Helper()
	opts := []kgo.Opt{
		kgo.SASL(plain.Auth{User: saslUser, Pass: saslPassword}.AsMechanism()),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	if tlsConf != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsConf))
	}
	cl := newClient(t, b.Addr(), opts...)
	got := values(consume(t, ctx, cl, n))
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != int64(n) {
		t.Fatalf("topic %s holds %d records, want %d", topic, total, n)
	}
	slices.Sort(got)
	return got
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
