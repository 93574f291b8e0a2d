package bench

import (
	"fmt"
	"strings"
	"testing"
)

// TestW7 runs W7 at a small scale: every record of its own topic is
// applied through the lanes, and a second run reuses the pre-loaded
// topic; W7-pg is skipped, saying why, without PostgreSQL or without a
// PostgreSQL sink with a checkpoint with gaps.
func TestW7(t *testing.T) {
	env, _ := extraEnv(t, 600)
	k := &keysTopic{}
	r := runWorkload(t, W7On(k), env)
	if r.Skipped != "" || r.Records != W7Scale*600 || r.Elapsed <= 0 || !strings.Contains(r.Extra, "bound") {
		t.Fatalf("W7 result %+v", r)
	}
	// Every record slept, so the mean wait is reported and at least the
	// requested sleep.
	var ms float64
	if i := strings.Index(r.Extra, "wait "); i < 0 {
		t.Fatalf("W7's Extra %q reports no mean wait", r.Extra)
	} else if _, err := fmt.Sscanf(r.Extra[i:], "wait %fms", &ms); err != nil || ms < float64(W3Sleep)/1e6 {
		t.Fatalf("W7's Extra %q: mean wait %v (%v), want at least %v", r.Extra, ms, err, W3Sleep)
	}
	topic := k.topic
	runWorkload(t, W7On(k), env)
	if k.topic != topic || topic == "" {
		t.Errorf("second run pre-loaded another topic: %q, then %q", topic, k.topic)
	}
	pg := runWorkload(t, W7PostgresOn(k), env)
	if env.PostgresDSN == "" && pg.Skipped == "" {
		t.Errorf("W7-pg without a DSN not skipped: %+v", pg)
	}
	if pg.Skipped != "" {
		t.Logf("W7-pg skipped: %s", pg.Skipped)
	}
}
