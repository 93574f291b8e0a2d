package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/workrouter/workrouter/cmd/internal/brokerproc"
)

// The harness's broker is the embedded broker in a process of its own,
// with the chaos harness's request interception, so that the harness can
// SIGKILL it and start it again on the same address and data dir
// (docs/design.md#testing). Like the harness's worker it is reachable only
// through an internal entry point: the workrouter-lab binary runs it, instead
// of the CLI, when its environment has brokerproc.EnvHarnessBroker=1, which
// only package brokerproc sets. No command, flag or help text of the CLI
// exposes it.

// harnessBrokerEntry reports whether this process was started as the
// harness's broker.
func harnessBrokerEntry() bool { return os.Getenv(brokerproc.EnvHarnessBroker) == "1" }

// harnessBrokerMain runs the harness's broker with args until SIGINT or
// SIGTERM and returns the exit code.
func harnessBrokerMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := brokerproc.Main(ctx, args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "workrouter harness broker: %v\n", err)
		return 1
	}
	return 0
}
