// Package processtest holds workrouter's process-level fault tests for the
// durable sinks (sink/sqlite and sink/postgres). It has no API: its tests run
// real worker processes (the test binary re-executed as a worker) against
// an embedded broker in the test process, and inject real faults: SIGSTOP
// past the session timeout, SIGKILL before and after the sink commit, the
// database connection terminated mid-transaction, and the sink unreachable
// for a while. After every run a checker reads the sink's own records and
// verifies invariants F, L, O, X and V of DESIGN.md §7, and every test
// asserts that its fault really happened.
//
// PostgreSQL tests use WORKROUTER_TEST_POSTGRES (default
// postgres://postgres@127.0.0.1:5432/test); they skip when it is
// unreachable, except under CI=true, where they fail.
package processtest
