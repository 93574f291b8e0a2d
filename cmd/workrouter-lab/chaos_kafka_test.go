package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// chaosKafkaLine is a passing final line on the Kafka sink: the seven
// kinds that run there, stale transactions refused, V sampled, no dead
// letters or duplicates (their kinds do not run).
var chaosKafkaLine = regexp.MustCompile(`^chaos: faults=[1-9][0-9]* kinds=7 commands=[1-9][0-9]* stale_rejected=[1-9][0-9]* dead_letters=0 gap_dead_letters=0 duplicates_skipped=0 v_samples=[1-9][0-9]* violations=0$`)

// TestChaosKafka runs the short profile on the Kafka sink: the workers
// publish the ledger's decisions as events in transactions on the
// embedded broker, and the checker reads the events and the sink's
// checkpoint topic with read_committed. Every kind that runs there fires,
// stale transactions are refused, and F, L, O, X, V and D hold; poison,
// resend and broker-restart are reported as not run, with why.
func TestChaosKafka(t *testing.T) {
	code, out := runChaos(t, 5*time.Minute, "--duration", "40s", "--seed", "3", "--sink", "kafka")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if code != 0 || !chaosKafkaLine.MatchString(last) {
		t.Fatalf("exit %d, final line %q\n%s", code, last, out)
	}
	for _, k := range []string{"pause", "kill", "heartbeat", "broker-conn", "sink-conn", "coordinator", "churn"} {
		if !regexp.MustCompile(`(?m)^` + k + ` +[1-9][0-9]*$`).MatchString(out) {
			t.Errorf("table lacks a fired %s row:\n%s", k, out)
		}
	}
	for _, k := range []string{"poison", "resend", "broker-restart"} {
		if !regexp.MustCompile(`(?m)^` + k + ` +- \(does not apply here: .*\(--sink kafka\)\)$`).MatchString(out) {
			t.Errorf("table lacks %s as not run on the Kafka sink:\n%s", k, out)
		}
	}
	for _, inv := range []string{"F", "L", "O", "X", "V", "D"} {
		if !regexp.MustCompile(`(?m)^violations ` + inv + ` \([^)]*\) +0$`).MatchString(out) {
			t.Errorf("table lacks a zero %s row:\n%s", inv, out)
		}
	}
	if !strings.Contains(out, "Kafka sink: events") {
		t.Errorf("the run does not say it ran on the Kafka sink:\n%s", out)
	}
}
