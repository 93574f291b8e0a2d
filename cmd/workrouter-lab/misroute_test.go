package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/testwait"
)

// TestMisrouteRefuseDeadLetters: under --misroute refuse a record on
// another partition than its key maps to is dead-lettered at once, with
// reason misrouted, and its partition goes on (the README and the flag
// said the partition stalls); the help of worker and dlq list says so.
func TestMisrouteRefuseDeadLetters(t *testing.T) {
	addr := clitest.StartBroker(t, map[string]int32{ledger.Topic: 2})
	key := []byte("acct-0")
	wrong := 1 - envelope.Partition(key, 2)
	deposit := func(p int32, key []byte, id string) *kgo.Record {
		return &kgo.Record{Topic: ledger.Topic, Partition: p, Key: key, Headers: []kgo.RecordHeader{typeHeader(ledger.TypeDeposit)},
			Value: []byte(fmt.Sprintf(`{"id":%q,"seq":0,"amount":5}`, id))}
	}
	// The misrouted record, then one its partition applies after it.
	other := []byte("acct-x")
	for envelope.Partition(other, 2) != wrong {
		other = append(other, 'x')
	}
	raw := foreignProducer(t, addr)
	produceRaw(t, raw, deposit(wrong, key, "c-misrouted"), deposit(wrong, other, "c-after"))

	spec := "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")
	w := clitest.Start(t, []string{"worker", "--example", "ledger", "--brokers", addr, "--sink", spec, "--misroute", "refuse",
		"--session-timeout", "2s", "--heartbeat-interval", "200ms"})
	testwait.For(t, 60*time.Second, "the record after the misrouted one applied", func() bool {
		return ledgerApplied(t, strings.TrimPrefix(spec, "sqlite:"), "c-after")
	})
	w.Interrupt(t)
	rows := dlqRows(t, spec)
	if len(rows) != 1 || rows[0].Reason != consumer.ReasonMisrouted || rows[0].Partition != wrong || rows[0].Key == nil || *rows[0].Key.Text != string(key) {
		t.Fatalf("dead letters %+v, want one of key %s on partition %d with reason misrouted", rows, key, wrong)
	}
	if out, _, err := runCLI(t, nil, "dlq", "list", "--sink", spec, "--reason", "misrouted"); err != nil || !strings.Contains(out, "misrouted") {
		t.Fatalf("dlq list --reason misrouted: %q, %v", out, err)
	}

	for _, args := range [][]string{{"worker", "--help"}, {"dlq", "list", "--help"}} {
		out, _, err := runCLI(t, nil, args...)
		if err != nil || !strings.Contains(out, "misrouted") || strings.Contains(out, "refuse (the partition stalls)") {
			t.Errorf("workrouter %s does not say that refused records are dead-lettered as misrouted:\n%s", strings.Join(args, " "), out)
		}
	}
}

// ledgerApplied reports whether the ledger command id was applied to the
// SQLite sink at path.
func ledgerApplied(t *testing.T, path, id string) bool {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return false // the worker has not created it yet
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ledger_postings WHERE id = ?`, id).Scan(&n); err != nil {
		return false // not created yet
	}
	return n > 0
}
