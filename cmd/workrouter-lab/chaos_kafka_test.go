package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// chaosKafkaLine is a passing final line on the Kafka sink: the eight
// kinds that run there, stale transactions refused, dead letters read
// from the sink's dead-letter topic (some right after an offset gap), V
// sampled, no duplicates (resend does not run).
var chaosKafkaLine = regexp.MustCompile(`^chaos: faults=[1-9][0-9]* kinds=8 commands=[1-9][0-9]* stale_rejected=[1-9][0-9]* dead_letters=[1-9][0-9]* gap_dead_letters=[1-9][0-9]* duplicates_skipped=0 v_samples=[1-9][0-9]* violations=0$`)

// TestChaosKafka runs the short profile on the Kafka sink: the workers
// publish the ledger's decisions as events in transactions on the
// embedded broker, and the checker reads the events and the sink's
// checkpoint topic with read_committed, and D from the sink's dead-letter
// topic (read_committed too). Every kind that runs there fires, stale
// transactions are refused, the poison records are dead-lettered, and F,
// L, O, X, V and D hold; resend and broker-restart are reported as not
// run, with why.
func TestChaosKafka(t *testing.T) {
	code, out := runChaos(t, 5*time.Minute, "--duration", "40s", "--seed", "3", "--sink", "kafka")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if code != 0 || !chaosKafkaLine.MatchString(last) {
		t.Fatalf("exit %d, final line %q\n%s", code, last, out)
	}
	for _, k := range []string{"pause", "kill", "heartbeat", "broker-conn", "sink-conn", "coordinator", "poison", "churn"} {
		if !regexp.MustCompile(`(?m)^` + k + ` +[1-9][0-9]*$`).MatchString(out) {
			t.Errorf("table lacks a fired %s row:\n%s", k, out)
		}
	}
	for _, k := range []string{"resend", "broker-restart"} {
		if !regexp.MustCompile(`(?m)^` + k + ` +- \(does not apply here: .*\(--sink kafka\)\)$`).MatchString(out) {
			t.Errorf("table lacks %s as not run on the Kafka sink:\n%s", k, out)
		}
	}
	for _, inv := range []string{"F", "L", "O", "X", "V", "D"} {
		if !regexp.MustCompile(`(?m)^violations ` + inv + ` \([^)]*\) +0$`).MatchString(out) {
			t.Errorf("table lacks a zero %s row:\n%s", inv, out)
		}
	}
	if !regexp.MustCompile(`(?m)^dead letters in the sink \(by reason\) +[1-9][0-9]* \(no_handler [1-9][0-9]*, permanent [1-9][0-9]*, undecodable [1-9][0-9]*\)$`).MatchString(out) {
		t.Errorf("the checker did not read the dead letters of every reason from the sink's dead-letter topic:\n%s", out)
	}
	if !strings.Contains(out, "Kafka sink: events") {
		t.Errorf("the run does not say it ran on the Kafka sink:\n%s", out)
	}
}

// TestChaosPartitionKafka runs the four network kinds on the Kafka sink:
// each worker's consumer and its sink's clients reach kfake through links
// of their own. partition-broker cuts both, and the held transaction's
// offset commit is refused by the coordinator after the heal;
// partition-sink and one-way act on the sink's links only (its producer's
// requests go unanswered, or land unheard, and are sent again), and the
// worker applies again after the heal; slow-link delays both. Each kind
// fires, no dial escapes the links, and F, L, O, X, V and D hold.
func TestChaosPartitionKafka(t *testing.T) {
	code, out := runChaos(t, 5*time.Minute, "--faults", "partition-broker,partition-sink,one-way,slow-link", "--duration", "40s", "--seed", "4", "--sink", "kafka")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if m := partitionLine.FindStringSubmatch(last); code != 0 || m == nil || m[1] != "4" {
		t.Fatalf("exit %d, final line %q\n%s", code, last, out)
	}
	for _, k := range []string{"partition-broker", "partition-sink", "one-way", "slow-link"} {
		if !regexp.MustCompile(`(?m)^` + k + ` +[1-9][0-9]*$`).MatchString(out) {
			t.Errorf("table lacks a fired %s row:\n%s", k, out)
		}
	}
	for _, inv := range []string{"F", "L", "O", "X", "V", "D"} {
		if !regexp.MustCompile(`(?m)^violations ` + inv + ` \([^)]*\) +0$`).MatchString(out) {
			t.Errorf("table lacks a zero %s row:\n%s", inv, out)
		}
	}
	for what, re := range map[string]string{
		"the sink's clients given links of their own":                                         `network fault layer: each of 3 workers reaches the brokers .* and the sink \(Kafka: its clients reach the same brokers through links of their own\)`,
		"partition-broker cutting the producer's links too, and its held transaction refused": `(?s)PARTITION-BROKER w[0-9]: its [0-9]*[02468] broker links cut both ways \(black-holed\), the Kafka sink's producer links among them.*HEAL w[0-9]'s broker links after [^:]*: [1-9][0-9]* bytes dropped; its write after the takeover refused by the sink: true`,
		"partition-sink dropping the producer's bytes, the worker applying again":             `HEAL w[0-9]'s sink link: [1-9][0-9]* bytes dropped while cut; [0-9]+ sink operations failed and retried; applied a batch again after the heal: true`,
		"one-way dropping replies, the worker applying again":                                 `HEAL w[0-9]'s sink link: [1-9][0-9]* reply bytes dropped; [0-9]+ sink operations failed and retried; applied a batch again after the heal: true`,
		"slow-link delaying bytes":                                                            `HEAL w[0-9]'s broker links: [1-9][0-9]* bytes delayed`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no sign of %s:\n%s", what, out)
		}
	}
}
