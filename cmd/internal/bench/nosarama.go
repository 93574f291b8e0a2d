//go:build !sarama

package bench

import "context"

// SaramaBuildTag is the build tag that compiles the Sarama baseline (B2)
// into the binary. Without it the workrouter-lab binary does not link
// IBM/sarama at all, and B2 reports itself skipped.
const SaramaBuildTag = "sarama"

// saramaLinked reports whether this build links IBM/sarama (B2 runs).
const saramaLinked = false

// B2 is the Sarama baseline; this build leaves IBM/sarama out of the
// binary, so it is skipped, saying how to get it:
// go run -tags sarama ./cmd/workrouter-lab bench.
func B2(context.Context, *Env) (Result, error) {
	return Result{ID: "B2", Name: "IBM/sarama ConsumerGroup, no-op handler",
		Skipped: "IBM/sarama is not linked into this binary; build with -tags " + SaramaBuildTag + " (go run -tags sarama ./cmd/workrouter-lab bench)"}, nil
}
