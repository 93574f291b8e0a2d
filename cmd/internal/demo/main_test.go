package demo

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain removes the workrouter-lab binary the tests built (labBinary)
// and fails the package's tests if any goroutine they started is still
// running when they end.
func TestMain(m *testing.M) {
	code := m.Run()
	if labDir != "" {
		_ = os.RemoveAll(labDir)
	}
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		code = 1
	}
	os.Exit(code)
}
