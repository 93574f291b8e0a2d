package demo_test

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/internal/demo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDemoInvariantsHoldAndStaleWriteRejected(t *testing.T) {
	var out strings.Builder
	sum, err := demo.Run(context.Background(), demo.Config{Commands: 1200, Accounts: 60, Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if sum.StaleRejected < 1 {
		t.Fatalf("no stale write rejected: the fault did not happen\n%s", out.String())
	}
	if sum.Produced != 1200 || sum.Applied != 1200 || sum.Duplicates != 0 || sum.Lost != 0 || sum.OrderViolations != 0 {
		t.Fatalf("summary %+v", sum)
	}
	for _, want := range []string{"PAUSE w1", "RESUME w1", "taken over by", "REJECTED late apply"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("timeline lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.HasPrefix(sum.Line(), "demo: produced=1200 applied=1200 duplicates=0 lost=0 order_violations=0 stale_rejected=") {
		t.Fatalf("final line %q", sum.Line())
	}
}

func TestDemoRejectsBadConfig(t *testing.T) {
	if _, err := demo.Run(context.Background(), demo.Config{Workers: 1}); err == nil {
		t.Fatal("a demo with one worker cannot show a takeover; want an error")
	}
}
