package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseKafkaSinkSpec(t *testing.T) {
	for _, c := range []struct {
		in, str                     string
		brokers, ev, cp, dl, events string
	}{
		{in: "kafka:", str: "kafka://", events: "ledger.events"},
		{in: "kafka://", str: "kafka://", events: "ledger.events"},
		{in: "kafka://k1:9092,k2:9092", str: "kafka://k1:9092,k2:9092", brokers: "k1:9092,k2:9092", events: "ledger.events"},
		{in: "kafka://k1:9092?events-topic=out&checkpoint-topic=cp&dead-letter-topic=dl", str: "kafka://k1:9092?checkpoint-topic=cp&dead-letter-topic=dl&events-topic=out",
			brokers: "k1:9092", ev: "out", cp: "cp", dl: "dl", events: "out"},
	} {
		spec, err := parseSinkSpec(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if spec.kind != "kafka" || spec.kafka.brokers != c.brokers || spec.kafka.events != c.ev || spec.kafka.checkpoints != c.cp || spec.kafka.deadLetters != c.dl {
			t.Errorf("%s: spec %+v", c.in, spec)
		}
		if s := spec.String(); s != c.str {
			t.Errorf("%s: String() = %q, want %q", c.in, s, c.str)
		}
		ev, cp, dl := spec.kafkaTopics("ledger")
		if ev != c.events || (c.cp == "" && cp != "ledger.sink-checkpoints") || (c.dl == "" && dl != "ledger.dead-letters") {
			t.Errorf("%s: topics %s %s %s", c.in, ev, cp, dl)
		}
	}
	for _, bad := range []string{"kafka:k1:9092", "kafka://user:pw@k1:9092", "kafka://k1:9092?topic=x", "kafka://?events-topic=", "kafka://a b"} {
		_, err := parseSinkSpec(bad)
		if err == nil || !strings.Contains(err.Error(), "--sink") || strings.Contains(err.Error(), "pw") {
			t.Errorf("%s: %v, want an error naming --sink without the password", bad, err)
		}
	}
	if ok, err := kafkaHarnessSink("kafka"); !ok || err != nil {
		t.Errorf("kafkaHarnessSink(kafka) = %v, %v", ok, err)
	}
	if _, err := kafkaHarnessSink("kafka://k1:9092"); err == nil || !strings.Contains(err.Error(), "--sink kafka alone") {
		t.Errorf("kafkaHarnessSink with hosts: %v", err)
	}
	if _, _, _, err := ledgerSink("kafka://"); err == nil {
		t.Errorf("ledgerSink(kafka://) took it as an SQLite default")
	}
}

// The admin commands that read or reset a sink's fence rows, history or
// dead-letter table refuse --sink kafka://… with one line naming the
// flag and where the Kafka sink keeps what they would read: no panic, no
// connection attempt.
func TestAdminCommandsRefuseKafkaSink(t *testing.T) {
	for _, args := range [][]string{
		{"fences", "list"},
		{"fences", "history", "--group", "g", "--topic", "t", "--partition", "0"},
		{"fences", "reset", "--group", "g", "--topic", "t", "--all", "--reason", "x", "--keep-checkpoint", "--yes"},
		{"dlq", "list"},
		{"dlq", "show", "1"},
		{"dlq", "redrive", "--all", "--reason", "x"},
		{"status", "--group", "g", "--topic", "t", "--brokers", "127.0.0.1:1", "--timeout", "2s"},
	} {
		args = append(args, "--sink", "kafka://127.0.0.1:1")
		_, stderr, err := runCLI(t, nil, args...)
		if err == nil {
			t.Errorf("%v: no error", args)
			continue
		}
		msg := err.Error() + stderr
		if !strings.Contains(msg, "--sink kafka://127.0.0.1:1") || !strings.Contains(msg, errKafkaNoAdmin.Error()) || strings.Contains(msg, "panic") {
			t.Errorf("%v: %v (%s), want the refusal naming --sink", args, err, stderr)
		}
	}
}

// TestDemoCommandKafka runs the demo on the Kafka sink on its embedded
// broker: the workers publish the ledger's decisions as events in
// transactions, the frozen worker's late transaction is refused by the
// coordinator, and the checker, reading the events and the checkpoint
// topic with read_committed, finds a clean run.
func TestDemoCommandKafka(t *testing.T) {
	p := startProc(t, []string{"demo", "--commands", "1000", "--accounts", "80", "--sink", "kafka", "--json"})
	if code := p.wait(t); code != 0 {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", code, p.stdout, p.stderr)
	}
	var sum struct {
		Produced, Applied, Duplicates, Lost int
		OrderViolations                     int            `json:"order_violations"`
		StaleRejected                       int            `json:"stale_rejected"`
		Invariants                          map[string]int `json:"invariants"`
		Timeline                            []string       `json:"timeline"`
	}
	if err := json.Unmarshal([]byte(p.stdout.String()), &sum); err != nil {
		t.Fatalf("--json output: %v\n%s", err, p.stdout)
	}
	if sum.Produced != 1000 || sum.Applied != 1000 || sum.Duplicates+sum.Lost+sum.OrderViolations != 0 || sum.StaleRejected < 1 {
		t.Fatalf("summary %+v", sum)
	}
	for k, n := range sum.Invariants {
		if n != 0 {
			t.Errorf("invariant %s: %d violations", k, n)
		}
	}
	tl := strings.Join(sum.Timeline, "\n")
	// The refusal is the coordinator's (UNKNOWN_MEMBER_ID) or, if the
	// woken client learned first that its member is gone, the sink's
	// own check: either way its transaction was aborted.
	if !strings.Contains(tl, "Kafka sink: events") || !strings.Contains(tl, "REJECTED late write") || !strings.Contains(tl, "was aborted") {
		t.Errorf("the timeline does not show the Kafka sink and the aborted late transaction:\n%s", tl)
	}
}
