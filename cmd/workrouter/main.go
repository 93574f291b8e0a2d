// Command workrouter is the workrouter CLI: an embedded Kafka-protocol broker
// for development and demos, and (in other files) the tools that drive it.
//
// Every flag can also be set from the environment as WORKROUTER_ followed by
// the flag name in upper snake case (--data-dir is WORKROUTER_DATA_DIR); a
// flag given on the command line wins over the environment.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	if harnessEntry() {
		os.Exit(harnessMain(os.Args[1:]))
	}
	os.Exit(run())
}

// run executes the root command with a context that ends on SIGINT or
// SIGTERM and returns the process exit code. After the first signal the
// default handling is restored, so a second Ctrl-C kills a stuck shutdown.
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)

	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		// One line, whatever the error looks like (errors.Join uses newlines).
		msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
		fmt.Fprintf(os.Stderr, "workrouter: %s\n", msg)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}

// exitNeedsAttention is status's exit status when a partition needs
// attention (1 is an error).
const exitNeedsAttention = 2

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
