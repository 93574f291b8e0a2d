package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the package's tests leave no goroutine behind,
// but for what saramaLeaks names (built with -tags sarama only).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, saramaLeaks...) }
