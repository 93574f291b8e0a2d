package cli

import (
	"path/filepath"
	"testing"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
)

// TestInputsRefused: an empty --group or --topic (a script's unset
// variable), an unknown dlq list --reason, an unknown --log-level or
// --log-format, and a PostgreSQL DSN that names no host, user or database
// each fail with one line and exit code 1, before anything connects (they
// used to fall back to the defaults, list nothing, exit 0, or connect to
// the local socket as the operating system's user).
func TestInputsRefused(t *testing.T) {
	for _, name := range []string{"PGHOST", "PGUSER", "PGDATABASE", "PGSERVICE"} {
		t.Setenv(name, "") // inherited by the processes: no default from the environment
	}
	addr := clitest.FreeAddr(t) // nothing listens: nothing may be reached
	db := "sqlite:" + filepath.Join(t.TempDir(), "none.db")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"worker", "--example", "ledger", "--brokers", addr, "--sink", db, "--group", ""}, []string{"--group is given but empty"}},
		{[]string{"worker", "--example", "ledger", "--brokers", addr, "--sink", db, "--topic", " "}, []string{"--topic is given but empty"}},
		{[]string{"dlq", "list", "--sink", db, "--group="}, []string{"--group is given but empty"}},
		{[]string{"fences", "list", "--sink", db, "--topic="}, []string{"--topic is given but empty"}},
		{[]string{"dlq", "list", "--sink", db, "--reason", "bogus"}, []string{`--reason "bogus": want undecodable, no_handler, permanent, handler_error, misrouted`}},
		{[]string{"version", "--log-level", "loud"}, []string{`--log-level "loud": want debug, info, warn or error`}},
		{[]string{"version", "--log-format", "fancy"}, []string{`--log-format "fancy": want text or json`}},
		{[]string{"dlq", "list", "--sink", "postgres://"}, []string{"the DSN names no host", "no user", "no database"}},
		{[]string{"worker", "--example", "ledger", "--brokers", addr, "--sink", "postgres://127.0.0.1:5432/test"}, []string{"the DSN names no user"}},
	} {
		t.Run(tc.want[0], func(t *testing.T) { oneLineFailure(t, tc.args, tc.want...) })
	}
	// The known values still work.
	for _, args := range [][]string{{"version", "--log-level", "warn", "--log-format", "json"}, {"version", "--log-level", "DEBUG"}} {
		if _, _, err := runCLI(t, nil, args...); err != nil {
			t.Errorf("workrouter %v: %v", args, err)
		}
	}
}
