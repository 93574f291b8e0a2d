// Package testwait is the repository's one way for a test to wait for a
// condition instead of sleeping through a window.
package testwait

import "time"

// T is the part of testing.TB that For uses.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Interval is how long For sleeps between two looks at its condition.
const Interval = 20 * time.Millisecond

// For calls cond every Interval until it returns true, and fails t with
// what if d passes first. d bounds a test that is failing: it is not an
// assertion about speed, so it should be generous. For calls t.Helper, so
// a failure is reported at the caller's line.
func For(t T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", d, what)
			return
		}
		time.Sleep(Interval)
	}
}
