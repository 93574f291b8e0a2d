package main

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/internal/testpg"
)

// TestNoCommandPrintsAPassword plants one password as the SASL password
// of a TLS + SASL broker and as the password of every PostgreSQL DSN, runs
// every command that takes one (successful runs and failing ones, with
// debug logs), and greps all of their stdout and stderr for it.
func TestNoCommandPrintsAPassword(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo (-short)")
	}
	const topic = "ledger"
	addr, tf, broker := secureBroker(t, topic)
	u, err := url.Parse(testpg.DSN(t)) // trust auth: any password is accepted
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), plantedPassword)
	// The workers' tables go to a schema of this test's own, dropped after:
	// none is left in the database's public schema.
	schema := "redact_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	admin, err := pgx.Connect(t.Context(), testpg.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
		admin.Close(ctx)
	})
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()
	bad := *u
	bad.Host = clitest.RefusedAddr(t) // bound, not listening: every command's connection is refused
	badDSN := bad.String()

	conn := []string{"--brokers", addr, "--tls-ca", tf.CA, "--sasl-mechanism", "scram-sha-512", "--sasl-username", "app",
		"--log-level", "debug"}
	pwEnv := "WORKROUTER_SASL_PASSWORD=" + plantedPassword
	db := filepath.Join(t.TempDir(), "ledger.db")
	group := "redact-" + strings.ReplaceAll(time.Now().Format("150405.000"), ".", "")

	var outputs []string
	run := func(args []string, env ...string) {
		t.Helper()
		p := clitest.Start(t, args, env...)
		p.Wait(t)
		// The command line holds the password: only its output is checked.
		header := strings.ReplaceAll(strings.Join(args, " "), plantedPassword, "PLANTED")
		outputs = append(outputs, header+"\n"+p.Stdout.String()+p.Stderr.String())
	}
	// Successful runs.
	run(append([]string{"produce", "--topic", topic, "--key", "acct-1", "--type", "deposit", "--payload", `{"id":"r1","seq":0,"amount":5}`}, conn...), pwEnv)
	run(append([]string{"produce", "--topic", topic, "--key", "acct-1", "--type", "deposit", "--payload", `{"id":"r2","seq":1,"amount":5}`,
		"-X", "sasl.password=" + plantedPassword}, conn...))
	w := clitest.Start(t, append([]string{"worker", "--example", "ledger", "--topic", topic, "--group", group, "--sink", dsn,
		"--session-timeout", "2s", "--heartbeat-interval", "200ms"}, conn...), pwEnv)
	w2 := clitest.Start(t, append([]string{"worker", "--example", "ledger", "--topic", topic, "--group", group + "-sqlite", "--sink", "sqlite:" + db,
		"--session-timeout", "2s", "--heartbeat-interval", "200ms", "--sasl-password", plantedPassword}, conn...))
	deadlineAt := time.Now().Add(clitest.Deadline)
	for !strings.Contains(w.Stderr.String(), "partition claimed") || !strings.Contains(w2.Stderr.String(), "partition claimed") {
		if time.Now().After(deadlineAt) {
			t.Fatalf("the workers claimed nothing:\n%s\n%s", w.Stderr, w2.Stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	run(append([]string{"status", "--topic", topic, "--group", group, "--sink", dsn}, conn...), pwEnv)
	run(append([]string{"status", "--topic", topic, "--group", group, "--json", "--sink", dsn}, conn...), pwEnv)
	w.Interrupt(t)
	w2.Interrupt(t)
	outputs = append(outputs, "worker\n"+w.Stdout.String()+w.Stderr.String(), "worker sqlite\n"+w2.Stdout.String()+w2.Stderr.String())
	run([]string{"fences", "list", "--sink", dsn})
	run([]string{"fences", "history", "--sink", dsn, "--group", group, "--topic", topic, "--partition", "0"})
	run([]string{"fences", "reset", "--sink", dsn, "--group", group, "--topic", topic, "--partition", "0", "--reason", "redaction test"})
	run(append([]string{"demo", "--sink", dsn}, conn...), pwEnv)

	// Failing runs.
	wrong := append(conn[:len(conn)-2:len(conn)-2], "--sasl-password", "x"+plantedPassword, "--timeout", "3s")
	run(append([]string{"produce", "--topic", topic, "--key", "k", "--type", "t"}, wrong...))
	run(append([]string{"status", "--topic", topic, "--group", group}, wrong...))
	run(append([]string{"worker", "--example", "ledger", "--sink", "sqlite:" + db}, conn...), "WORKROUTER_SASL_PASSWORD=x"+plantedPassword)
	run(append([]string{"worker", "--example", "ledger", "--sink", badDSN}, conn...), pwEnv)
	run(append([]string{"status", "--topic", topic, "--group", group, "--sink", badDSN, "--timeout", "3s"}, conn...), pwEnv)
	run([]string{"fences", "list", "--sink", badDSN, "--timeout", "3s"})
	run([]string{"chaos", "--sink", badDSN, "--duration", "1s"})
	run([]string{"demo", "--sink", badDSN})
	run([]string{"produce", "--topic", topic, "--key", "k", "--type", "t", "--brokers", addr, "-X", "sasl.mechanism=" + plantedPassword})
	run([]string{"produce", "--topic", topic, "--key", "k", "--type", "t", "--brokers", addr, "-X", plantedPassword})
	run([]string{"broker", "--listen", "127.0.0.1:0", "--sasl-user", plantedPassword})
	broker.Interrupt(t)
	outputs = append(outputs, "broker\n"+broker.Stdout.String()+broker.Stderr.String())

	for _, o := range outputs {
		if testing.Verbose() {
			t.Logf("%s", o)
		}
		if strings.Contains(o, plantedPassword) {
			t.Errorf("a command printed the password:\n%s", o)
		}
	}
	// The runs did something: the output that proves it.
	all := strings.Join(outputs, "\n")
	for _, want := range []string{"partition=", "sink postgres://", "demo: produced=3000 applied=3000", "SASL authentication failed", "routing:"} {
		if !strings.Contains(all, want) {
			t.Errorf("no command printed %q: the runs did not happen as planned", want)
		}
	}
}
