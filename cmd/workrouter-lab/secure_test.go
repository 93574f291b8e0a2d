package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/internal/testtls"
	"github.com/workrouter/workrouter/kafkaconn"
)

// plantedPassword is the SASL password of the secured brokers; no command
// may print it (TestNoCommandPrintsAPassword).
const plantedPassword = "pl4nted-S3cret-pw"

// secureBroker runs `workrouter-lab broker` with TLS (a fresh CA's server
// certificate) and the SASL user app (password from WORKROUTER_SASL_USER,
// so not on its command line), and returns its address and the TLS files.
func secureBroker(t *testing.T, topic string) (string, testtls.Files, *clitest.Proc) {
	t.Helper()
	f := testtls.New(t)
	p, addr, line := startBroker(t, []string{"--listen", "127.0.0.1:0", "--topic", topic, "--partitions", "3",
		"--tls-cert", f.ServerCert, "--tls-key", f.ServerKey, "--min-session-timeout", "500ms"},
		"WORKROUTER_SASL_USER=app:"+plantedPassword)
	if !strings.Contains(line, "TLS; SASL PLAIN/SCRAM-SHA-256/SCRAM-SHA-512 users app") {
		t.Fatalf("the broker's first line does not say it serves TLS and SASL: %q", line)
	}
	return addr, f, p
}

// TestSecureClusterCLI runs produce → worker → status → fences against the
// embedded broker over TLS + SASL, once with SCRAM-SHA-512 and once with
// PLAIN, with the password in a file, in the environment and in a
// properties file.
func TestSecureClusterCLI(t *testing.T) {
	for _, mech := range []string{"scram-sha-512", "plain"} {
		t.Run(mech, func(t *testing.T) {
			const topic, group = "ledger", "secure-workers"
			addr, tf, _ := secureBroker(t, topic)
			dir := t.TempDir()
			pwFile := filepath.Join(dir, "password")
			if err := os.WriteFile(pwFile, []byte(plantedPassword+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			conn := []string{"--brokers", addr, "--tls-ca", tf.CA, "--sasl-mechanism", mech, "--sasl-username", "app"}

			// produce: the password from a file.
			lines := filepath.Join(dir, "cmds.jsonl")
			var b strings.Builder
			const accounts, perAccount = 5, 4
			for seq := range perAccount {
				for a := range accounts {
					fmt.Fprintf(&b, `{"key":"acct-%d","type":"deposit","payload":{"id":"c-%d-%d","seq":%d,"amount":100}}`+"\n", a, a, seq, seq)
				}
			}
			if err := os.WriteFile(lines, []byte(b.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			out, _, err := runCLI(t, nil, append([]string{"produce", "--topic", topic, "--file", lines, "--sasl-password-file", pwFile}, conn...)...)
			if err != nil || !strings.HasPrefix(out, fmt.Sprintf("produced %d commands", accounts*perAccount)) {
				t.Fatalf("produce over SASL_SSL: %v\n%s", err, out)
			}

			// worker: a process, the password from the environment.
			db := filepath.Join(dir, "ledger.db")
			w := clitest.Start(t, append([]string{"worker", "--example", "ledger", "--topic", topic, "--group", group,
				"--sink", "sqlite:" + db, "--session-timeout", "2s", "--heartbeat-interval", "200ms"}, conn...),
				"WORKROUTER_SASL_PASSWORD="+plantedPassword)

			// status: everything, the password included, from a properties
			// file, which names the brokers too.
			props := filepath.Join(dir, "client.properties")
			if err := os.WriteFile(props, []byte(fmt.Sprintf("bootstrap.servers=%s\nsecurity.protocol=SASL_SSL\nsasl.mechanism=%s\nsasl.username=app\nsasl.password=%s\nssl.ca.location=%s\n",
				addr, strings.ToUpper(mech), plantedPassword, tf.CA)), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), clitest.Deadline)
			defer cancel()
			var rep statusReport
			for {
				rep, err = statusJSON(t, "--properties", props, "--group", group, "--topic", topic, "--sink", "sqlite:"+db)
				if err == nil && settled(rep, accounts*perAccount) {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("status never showed the worker caught up: %+v (%v); worker stderr:\n%s", rep, err, w.Stderr)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if rep.Routing == nil || rep.Routing.Checked != accounts*perAccount || rep.Routing.Misrouted != 0 {
				t.Errorf("status's routing check: %+v", rep.Routing)
			}

			// fences: the sink's rows, the same checkpoint.
			out, _, err = runCLI(t, nil, "fences", "list", "--sink", "sqlite:"+db, "--json")
			if err != nil || strings.Count(out, `"group":"`+group+`"`) != 3 {
				t.Fatalf("fences list: %v\n%s", err, out)
			}
			w.Interrupt(t)
			if !strings.Contains(w.Stdout.String(), "TLS (CA "+tf.CA+"), SASL "+strings.ToUpper(mech)+" as app") {
				t.Errorf("the worker's first line does not describe the connection: %q", w.Stdout)
			}
		})
	}
}

// TestSecureClusterFailures: a wrong password, an untrusted CA, a plaintext
// client and a missing SASL configuration each fail, within --timeout,
// with one line naming the cause, in produce, status and worker.
func TestSecureClusterFailures(t *testing.T) {
	const topic = "ledger"
	addr, tf, _ := secureBroker(t, topic)
	other := testtls.New(t)
	for _, tc := range []struct {
		name  string
		conn  []string
		cause error
		want  string
	}{
		{"wrong password", []string{"--tls-ca", tf.CA, "--sasl-mechanism", "scram-sha-512", "--sasl-username", "app", "--sasl-password", "not-" + plantedPassword}, kafkaconn.ErrAuthFailed, "SASL authentication failed"},
		{"wrong plain password", []string{"--tls-ca", tf.CA, "--sasl-mechanism", "plain", "--sasl-username", "app", "--sasl-password", "nope"}, kafkaconn.ErrAuthFailed, "SASL authentication failed"},
		{"untrusted CA", []string{"--tls-ca", other.CA, "--sasl-mechanism", "scram-sha-512", "--sasl-username", "app", "--sasl-password", plantedPassword}, kafkaconn.ErrUntrustedCertificate, "--tls-ca"},
		{"plaintext client", []string{"--sasl-mechanism", "scram-sha-512", "--sasl-username", "app", "--sasl-password", plantedPassword}, kafkaconn.ErrTLSRequired, "add --tls"},
		{"no SASL", []string{"--tls-ca", tf.CA}, kafkaconn.ErrSASLRequired, "--sasl-mechanism"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := append([]string{"--brokers", addr, "--topic", topic, "--timeout", "10s"}, tc.conn...)
			for _, args := range [][]string{
				append([]string{"produce", "--key", "k", "--type", "deposit"}, base...),
				append([]string{"status", "--group", "g"}, base...),
			} {
				start := time.Now()
				out, _, err := runCLI(t, nil, args...)
				t.Logf("%s failed after %v", args[0], time.Since(start).Round(time.Millisecond))
				if !errors.Is(err, tc.cause) {
					t.Fatalf("%s: got %v, want an error matching %q", args[0], err, tc.cause)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") || strings.Contains(msg, plantedPassword) {
					t.Errorf("%s: the error is not one secret-free line naming %q: %q", args[0], tc.want, msg)
				}
				if out != "" {
					t.Errorf("%s: stdout on failure: %q", args[0], out)
				}
			}
			// The worker process: exit code 1 and one line on stderr.
			wargs := append([]string{"worker", "--example", "ledger", "--sink", "sqlite:" + filepath.Join(t.TempDir(), "db")}, tc.conn...)
			start := time.Now()
			p := clitest.Start(t, append(wargs, "--brokers", addr))
			code := p.Wait(t)
			t.Logf("worker failed after %v", time.Since(start).Round(time.Millisecond))
			if code == 0 {
				t.Fatal("the worker exited 0")
			}
			// Its log may come first; the error is its last line, and the
			// only one that says workrouter:.
			stderr := p.Stderr.String()
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "workrouter-lab: ") || strings.Count(stderr, "workrouter-lab: ") != 1 || !strings.Contains(last, tc.want) ||
				strings.Contains(stderr, plantedPassword) {
				t.Errorf("worker stderr does not end with one secret-free line naming %q:\n%s", tc.want, stderr)
			}
		})
	}
}

// TestManagedClusterProperties: the two client.properties files Confluent
// Cloud hands out (kafkaconn/testdata, its librdkafka form and its Java
// form with sasl.jaas.config), pointed at the embedded broker (its
// address, user and CA), connect produce; each client-tuning or Schema
// Registry key is named by one INFO line, without its value, and no
// password is shown.
func TestManagedClusterProperties(t *testing.T) {
	const topic = "ledger"
	addr, tf, _ := secureBroker(t, topic)
	for _, tc := range []struct {
		file    string
		ignored []string
	}{
		{"confluent-cloud-librdkafka.properties", []string{"session.timeout.ms", "schema.registry.url", "basic.auth.credentials.source", "basic.auth.user.info"}},
		{"confluent-cloud-java.properties", []string{"client.dns.lookup", "session.timeout.ms", "acks", "schema.registry.url", "basic.auth.credentials.source", "basic.auth.user.info"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "..", "kafkaconn", "testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			text := strings.NewReplacer("pkc-abc12.us-east-1.aws.confluent.cloud:9092", addr, "KEY", "app", "SR_SECRET", "sr-"+plantedPassword,
				"SECRET", plantedPassword).Replace(string(b)) + "ssl.ca.location=" + tf.CA + "\n"
			props := filepath.Join(t.TempDir(), "client.properties")
			if err := os.WriteFile(props, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			out, stderr, err := runCLI(t, nil, "produce", "--properties", props, "--topic", topic, "--key", "acct-1", "--type", "deposit",
				"--payload", `{"id":"c-1","seq":0,"amount":1}`)
			if err != nil || !strings.HasPrefix(out, "partition=") {
				t.Fatalf("produce --properties %s: %v\n%s%s", tc.file, err, out, stderr)
			}
			if strings.Contains(out+stderr, plantedPassword) || strings.Contains(stderr, "45000") {
				t.Fatalf("a value is shown:\n%s%s", out, stderr)
			}
			for _, key := range tc.ignored {
				if n := strings.Count(stderr, "level=INFO msg=\"client property accepted, not applied\" property="+key+" "); n != 1 {
					t.Errorf("%d INFO lines name %s, want 1:\n%s", n, key, stderr)
				}
			}
			if n := strings.Count(stderr, "\n"); n != len(tc.ignored) {
				t.Errorf("%d lines on stderr, want %d:\n%s", n, len(tc.ignored), stderr)
			}

			// A worker: connected (its banner), each key named once.
			w := clitest.Start(t, []string{"worker", "--properties", props, "--example", "ledger", "--topic", topic,
				"--sink", "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")})
			select {
			case line := <-w.Stdout.FirstLine():
				if !strings.Contains(line, "SASL PLAIN as app") {
					t.Errorf("worker banner: %q", line)
				}
			case <-w.Done:
				t.Fatalf("the worker exited: %s", w.Stderr)
			case <-time.After(clitest.Deadline):
				t.Fatalf("no worker banner: %s", w.Stderr)
			}
			w.Interrupt(t)
			werr := w.Stderr.String()
			for _, key := range tc.ignored {
				if n := strings.Count(werr, "msg=\"client property accepted, not applied\" property="+key+" "); n != 1 {
					t.Errorf("worker: %d INFO lines name %s, want 1:\n%s", n, key, werr)
				}
			}
			if strings.Contains(werr+w.Stdout.String(), plantedPassword) {
				t.Errorf("the worker shows the password:\n%s", werr)
			}
		})
	}
}
