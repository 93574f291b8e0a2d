package testwait_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/workrouter/workrouter/internal/testwait"
)

// fakeT records what For does with its T.
type fakeT struct {
	helper bool
	failed string
}

func (f *fakeT) Helper() { f.helper = true }

func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var f fakeT
	calls := 0
	testwait.For(&f, time.Minute, "the third look", func() bool { calls++; return calls == 3 })
	if f.failed != "" || calls != 3 || !f.helper {
		t.Fatalf("failed %q after %d calls (helper %v), want no failure after 3, as a helper", f.failed, calls, f.helper)
	}
}

func TestForFailsWhenTheDeadlinePasses(t *testing.T) {
	var f fakeT
	calls := 0
	testwait.For(&f, 3*testwait.Interval, "nothing", func() bool { calls++; return false })
	if want := "gave up after 60ms waiting for nothing"; f.failed != want {
		t.Fatalf("failure %q, want %q", f.failed, want)
	}
	if calls < 2 {
		t.Fatalf("the condition was looked at %d times, want it polled until the deadline", calls)
	}
}
