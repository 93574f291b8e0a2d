// Command workrouter is the workrouter CLI: the worker of the built-in
// examples, produce, status, fences, dlq and version (package
// cmd/internal/cli). The embedded broker, the demo, the chaos harness and
// the benchmarks are another command, workrouter-lab, so that this binary
// (and the image of deploy/) links no test broker and no fault hook.
//
// Every flag can also be set from the environment as WORKROUTER_ followed by
// the flag name in upper snake case (--data-dir is WORKROUTER_DATA_DIR); a
// flag given on the command line wins over the environment.
package main

import (
	"os"

	"github.com/workrouter/workrouter/cmd/internal/cli"
)

func main() {
	os.Exit(cli.Run(cli.Root()))
}
