// Command workrouter-lab is workrouter's proving ground: the product's
// commands (package cmd/internal/cli) plus an embedded Kafka-protocol
// broker for development (broker), the demo of a frozen worker's rejected
// write (demo), the seeded fault profiles (chaos), the benchmarks (bench),
// and the harness's worker and broker, which demo, chaos and the process
// tests start as processes of this binary. The deployed binary,
// cmd/workrouter, has none of these.
//
// Every flag can also be set from the environment as WORKROUTER_ followed by
// the flag name in upper snake case (--data-dir is WORKROUTER_DATA_DIR); a
// flag given on the command line wins over the environment.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/workrouter/workrouter/cmd/internal/cli"
)

func main() {
	if harnessEntry() {
		os.Exit(harnessMain(os.Args[1:]))
	}
	os.Exit(cli.Run(newRootCmd()))
}

// newRootCmd builds the workrouter-lab command tree: the product's
// commands and the lab's.
func newRootCmd() *cobra.Command {
	return cli.NewRoot("workrouter-lab", "workrouter's embedded broker, demo, chaos harness and benchmarks",
		`workrouter-lab runs workrouter's proving ground: an embedded Kafka-protocol
broker (broker), the demo of a frozen worker whose late write is rejected
(demo), seeded fault profiles (chaos) and the benchmarks (bench), beside the
commands of workrouter itself. Deploy workrouter, not this binary.`,
		append(cli.Commands(), newBrokerCmd(), newDemoCmd(), newChaosCmd(), newBenchCmd())...)
}
