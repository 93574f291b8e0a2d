package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink/memory"
)

// consumeForeign reads n records of topic with client c (from the
// beginning) and returns their values, sorted, and the client's output.
func consumeForeign(ctx context.Context, c foreignClient, l login, topic string, n int) ([]string, string, error) {
	var cmd *exec.Cmd
	switch c.name {
	case "kcat":
		cmd = exec.CommandContext(ctx, "kcat", append(kcatArgs(l), "-C", "-t", topic, "-o", "beginning", "-c", strconv.Itoa(n), "-e", "-f", `%s\n`)...)
	case "confluent-kafka-python":
		cmd = exec.CommandContext(ctx, python, filepath.Join(clientsDir, "clients.py"), "confluent", "consume", strconv.Itoa(n))
	case "kafka-python":
		cmd = exec.CommandContext(ctx, python, filepath.Join(clientsDir, "clients.py"), "kafka-python", "consume", strconv.Itoa(n))
	case "kafkajs":
		cmd = exec.CommandContext(ctx, "node", filepath.Join(clientsDir, "kafkajs.js"), "consume", strconv.Itoa(n))
	default:
		return nil, "", fmt.Errorf("no consumer for %s", c.name)
	}
	cmd.Env = append(os.Environ(),
		"BOOTSTRAP="+l.addr, "MECHANISM="+l.mech, "SASL_USER="+saslUser, "SASL_PASSWORD="+l.password,
		"CA="+l.ca, "TOPIC="+topic)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	got := strings.Fields(string(out))
	slices.Sort(got)
	return got, string(out) + stderr.String(), err
}

// TestForeignClientsConsume: every foreign client consumes every record
// of a topic the router produced (several records sent asynchronously, so
// that they share compressed batches) and of a worker's dead-letter
// mirror, with the default compression of each. franz-go's own default
// (snappy) is what KafkaJS ("Snappy compression not implemented") and
// kafka-python without python-snappy (UnsupportedCodecError) cannot read.
func TestForeignClientsConsume(t *testing.T) {
	const n = 20
	b := saslBroker(t, nil, map[string]int32{"routed": 3, "ledger": 3, "ledger.dlq": 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*deadline)
	defer cancel()
	auth := kgo.SASL(plain.Auth{User: saslUser, Pass: saslPassword}.AsMechanism())

	send := func(topic, typ, prefix string) []string {
		rt, err := router.New(ctx, router.Config{Brokers: []string{b.Addr()}, Topic: topic, ClientOpts: []kgo.Opt{auth}})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		var want []string
		for i := range n {
			v := fmt.Sprintf("%s-%02d", prefix, i)
			want = append(want, v)
			rt.SendAsync(ctx, router.Command{Key: fmt.Appendf(nil, "k%d", i%4), Type: typ, Payload: []byte(v)}, func(_ router.Result, err error) {
				if err != nil {
					t.Errorf("send %s: %v", v, err)
				}
			})
		}
		if err := rt.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return want
	}
	routed := send("routed", "deposit", "routed")
	dead := send("ledger", "boom", "dead")

	w, err := consumer.New(ctx, consumer.Config[*memory.Tx]{
		Brokers: []string{b.Addr()}, Group: "ledger-workers", Topic: "ledger", Sink: memory.New(),
		ClientOpts:      []kgo.Opt{auth},
		DeadLetterTopic: "ledger.dlq",
		Handlers: map[string]consumer.Handler[*memory.Tx]{"boom": func(context.Context, *memory.Tx, consumer.Command) error {
			return consumer.Permanent(errors.New("refused by the test"))
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(newClient(t, b.Addr(), auth))
	for {
		ends, err := adm.ListEndOffsets(ctx, "ledger.dlq")
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
		if total >= n {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the worker mirrored %d of %d dead letters", total, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.Close()

	for _, c := range foreignClients {
		t.Run(c.name, func(t *testing.T) {
			if m := c.missing(); m != "" {
				msg := fmt.Sprintf("%s is not installed: %s", c.name, m)
				if os.Getenv("CI") == "true" {
					t.Fatal(msg + "; CI=true, so this fails instead of skipping (.ci/run installs it)")
				}
				t.Skip(msg)
			}
			l := login{addr: b.Addr(), mech: "PLAIN", password: saslPassword}
			for _, tc := range []struct {
				topic string
				want  []string
			}{{"routed", routed}, {"ledger.dlq", dead}} {
				got, out, err := consumeForeign(ctx, c, l, tc.topic, n)
				if err != nil || !slices.Equal(got, tc.want) {
					t.Errorf("%s read %d of the %d records of %s (%v):\n%s", c.name, len(got), n, tc.topic, err, lastLine(out))
				}
			}
		})
	}
}
