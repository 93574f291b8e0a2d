package postgres

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain closes the shared admin pool after the tests and then fails
// the package if any goroutine they started is still running.
func TestMain(m *testing.M) {
	code := m.Run()
	if adminPool.pool != nil {
		adminPool.pool.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
