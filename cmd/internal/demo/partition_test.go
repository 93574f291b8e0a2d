package demo_test

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/cmd/internal/demo"
	"github.com/workrouter/workrouter/cmd/internal/timeline"
)

// cleanLine is the final line of a passing demo of 1200 commands.
var cleanLine = regexp.MustCompile(`^demo: produced=1200 applied=1200 duplicates=0 lost=0 order_violations=0 stale_rejected=[1-9][0-9]*$`)

// TestPartitionDemo runs the demo with Fault "partition" on the embedded
// broker (on the cluster WORKROUTER_TEST_BROKERS names, when set), under
// both group protocols: w1's broker links are cut while it
// holds a batch, the cut drops bytes, its partitions are taken over, its
// held write reaches the sink and is refused, the links heal and w1
// claims again, and the run ends clean; its report draws the partition
// and the refused write.
func TestPartitionDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds workrouter-lab and runs the demo's broker and worker processes")
	}
	bin := demo.LabBinary(t)
	var brokers []string
	if env := os.Getenv("WORKROUTER_TEST_BROKERS"); env != "" {
		brokers = strings.Split(env, ",")
	}
	for _, protocol := range []string{"cooperative", "kip848"} {
		t.Run(protocol, func(t *testing.T) {
			sum, err := demo.Run(t.Context(), demo.Config{Fault: demo.FaultPartition, Commands: 1200, Accounts: 100,
				Protocol: protocol, Worker: bin, Brokers: brokers})
			log := strings.Join(sum.Timeline, "\n")
			if err != nil || !sum.Counted || !cleanLine.MatchString(sum.Line()) {
				t.Fatalf("err %v, counted %v, final line %q\n%s", err, sum.Counted, sum.Line(), log)
			}
			if sum.Faults["partition-broker"] != 1 || len(sum.Faults) != 1 {
				t.Errorf("faults %v, want one partition-broker", sum.Faults)
			}
			for _, want := range []*regexp.Regexp{
				regexp.MustCompile(`PARTITION w1: its [0-9]+ broker links? cut both ways .* with its batch of partition [0-9]+ at epoch [0-9]+ \(offsets [0-9]+–[0-9]+\) in hand`),
				regexp.MustCompile(`partition [0-9]+ taken over by w[23] at epoch [0-9]+ \(from w1's epoch`),
				regexp.MustCompile(`RELEASE w1's held batch, its broker links still cut`),
				regexp.MustCompile(`REJECTED late write by w1: sink: apply fenced`),
				regexp.MustCompile(`HEAL w1: its broker links restored after [^,]+, [1-9][0-9]* bytes dropped while cut`),
				regexp.MustCompile(`w1 back in the group after the heal: it claimed p[0-9]+@epoch[0-9]+`),
				regexp.MustCompile(`lag is zero: all 1200 commands applied`),
			} {
				if !want.MatchString(log) {
					t.Errorf("the run's lines lack %q:\n%s", want, log)
				}
			}
			var page bytes.Buffer
			if err := timeline.Write(&page, timeline.FromDemo(sum)); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{`data-kind="fault" data-fault="partition-broker" data-network="broker links cut"`, `data-legend="network-fault"`, `data-kind="stale"`} {
				if !strings.Contains(page.String(), want) {
					t.Errorf("the report lacks %s", want)
				}
			}
		})
	}
}

// TestPartitionDemoFailsWhenTheCutMisses: with w1 started without its
// dial mapping, its connections go around its links, the cut drops
// nothing, and the run fails with a line that says so, before any summary.
func TestPartitionDemoFailsWhenTheCutMisses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds workrouter-lab and runs the demo's broker and worker processes")
	}
	cfg := demo.Config{Fault: demo.FaultPartition, Commands: 1200, Accounts: 100, Worker: demo.LabBinary(t)}
	demo.Bypass(&cfg)
	sum, err := demo.Run(t.Context(), cfg)
	if err == nil || sum.Counted || !strings.Contains(err.Error(), "PARTITION w1: no byte dropped on its cut links") {
		t.Fatalf("err %v, counted %v (%s), want the cut seen to drop nothing\n%s", err, sum.Counted, sum.Line(), strings.Join(sum.Timeline, "\n"))
	}
}

// TestPartitionDemoKafka runs Fault "partition" on the Kafka sink: w1's
// sink clients dial through its links too, so the cut isolates its
// producer with its consumer; the links heal after the release, and the
// held transaction's offset commit is refused by the group coordinator.
func TestPartitionDemoKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds workrouter-lab and runs the demo's broker and worker processes")
	}
	sum, err := demo.Run(t.Context(), demo.Config{Fault: demo.FaultPartition, Kafka: true, Commands: 1200, Accounts: 100, Worker: demo.LabBinary(t)})
	log := strings.Join(sum.Timeline, "\n")
	if err != nil || !sum.Counted || !cleanLine.MatchString(sum.Line()) {
		t.Fatalf("err %v, counted %v, final line %q\n%s", err, sum.Counted, sum.Line(), log)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?s)RELEASE w1's held batch, its broker links still cut.*HEAL w1: its broker links restored after [^,]+, [1-9][0-9]* bytes dropped while cut.*REJECTED late write by w1: sink: apply fenced .* refused: [A-Z_]+`),
		regexp.MustCompile(`w1 back in the group after the heal: it claimed p[0-9]+@epoch[0-9]+`),
	} {
		if !want.MatchString(log) {
			t.Errorf("the run's lines lack %q:\n%s", want, log)
		}
	}
}
