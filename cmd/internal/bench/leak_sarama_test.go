//go:build sarama

package bench

import "go.uber.org/goleak"

// saramaLeaks: Sarama's metrics registry (rcrowley/go-metrics) starts one
// process-wide meter goroutine on the first client and never stops it;
// no API of either library ends it. It is the only goroutine the
// Sarama baseline (B2) leaves, and it is not this package's.
var saramaLeaks = []goleak.Option{goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick")}
