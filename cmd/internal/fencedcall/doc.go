// Package fencedcall holds the process test of the worked pair of
// docs/fenced-resources.md (examples/payments): a payments service that
// checks the caller's token itself, and worker processes whose handler
// calls it for each command. It has no code of its own: its test re-executes
// its test binary as the worker (a consumer.Worker on a memory sink of its
// own, so that the service is the only fence, with the freeze hook of
// package faults) and follows each worker with package cluster, as the
// process tests of cmd/workrouter-lab do.
package fencedcall
