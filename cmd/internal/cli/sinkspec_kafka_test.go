package cli

import (
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
	if ok, err := KafkaHarnessSink("kafka"); !ok || err != nil {
		t.Errorf("KafkaHarnessSink(kafka) = %v, %v", ok, err)
	}
	if _, err := KafkaHarnessSink("kafka://k1:9092"); err == nil || !strings.Contains(err.Error(), "--sink kafka alone") {
		t.Errorf("KafkaHarnessSink with hosts: %v", err)
	}
	if _, _, _, err := LedgerSink("kafka://"); err == nil {
		t.Errorf("LedgerSink(kafka://) took it as an SQLite default")
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
