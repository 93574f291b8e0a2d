//go:build !sarama

package bench

import "go.uber.org/goleak"

// saramaLeaks is empty without the sarama tag: every goroutine counts.
var saramaLeaks []goleak.Option
