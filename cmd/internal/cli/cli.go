// Package cli is the workrouter command line that both binaries share:
// the product's commands (worker, produce, status, fences, dlq, version),
// the root command's environment and flag handling, the connection flags,
// the sink specs, the worker's metrics registry and the output helpers.
//
// cmd/workrouter runs these commands and nothing else. cmd/workrouter-lab
// adds its own (broker, demo, chaos, bench) and the harness's worker, which
// is this package's worker with fault hooks (WorkerHooks). Nothing here
// imports the embedded broker or a fault package: `go list -deps
// ./cmd/workrouter` shows neither (TestProductLinksNoLab).
//
// Every flag can also be set from the environment as WORKROUTER_ followed by
// the flag name in upper snake case (--data-dir is WORKROUTER_DATA_DIR); a
// flag given on the command line wins over the environment.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Commands returns the product's commands: worker, produce, status,
// fences, dlq and version.
func Commands() []*cobra.Command {
	return []*cobra.Command{
		newVersionCmd(),
		newProduceCmd(),
		newStatusCmd(),
		newFencesCmd(),
		newDLQCmd(),
		newWorkerCmd(),
	}
}

// Run executes root with a context that ends on SIGINT or SIGTERM and
// returns the process exit code. After the first signal the default
// handling is restored, so a second Ctrl-C kills a stuck shutdown. An
// error is printed as one line on stderr, after root's name.
func Run(root *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)

	err := root.ExecuteContext(ctx)
	if err != nil {
		// One line, whatever the error looks like (errors.Join uses newlines).
		msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
		fmt.Fprintf(os.Stderr, "%s: %s\n", root.Name(), msg)
	}
	return ExitCode(err)
}

// ExitCode is the process exit status of a command that returned err: 0
// for nil, ExitNeedsAttention for status's report of a partition that
// needs attention, 1 for any other error.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// ExitNeedsAttention is status's exit status when a partition needs
// attention (1 is an error).
const ExitNeedsAttention = 2

// exitError is err with an exit status of its own.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// count is "1 attempt" or "n attempts": n and the noun, plural unless n
// is 1.
func count(n int, noun string) string {
	return fmt.Sprintf("%d %s", n, plural(n, noun, noun+"s"))
}

// plural is one if n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
