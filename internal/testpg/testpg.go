// Package testpg gives tests the PostgreSQL server they may use. It is for
// tests only.
package testpg

import (
	"context"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDSN names the environment variable holding the test server's DSN.
const EnvDSN = "WORKROUTER_TEST_POSTGRES"

// DefaultDSN is used when EnvDSN is unset: the server every development
// machine of this project runs.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/test"

// DSN returns the test server's DSN after checking that it answers. When it
// does not, the test is skipped with a message naming the DSN and EnvDSN —
// except under CI=true, where it fails: CI never skips. The server is asked
// once per DSN and test binary, not once per call: a PostgreSQL connection
// costs the server milliseconds of CPU, and a package's tests call DSN
// hundreds of times. It may be called from any test goroutine.
func DSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		dsn = DefaultDSN
	}
	if err := reachable(dsn); err != nil {
		msg := "PostgreSQL test server unreachable at " + Redact(dsn) + " (set " + EnvDSN + " to a reachable DSN): " + err.Error()
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg + "; CI=true, so this fails instead of skipping")
		}
		tb.Skip(msg)
	}
	return dsn
}

// checks holds, per DSN, the answer of the test server to its first check.
var checks sync.Map // DSN → func() error (a sync.OnceValue)

// reachable reports whether the server at dsn answered a connection and a
// ping, asking it the first time only.
func reachable(dsn string) error {
	check, _ := checks.LoadOrStore(dsn, sync.OnceValue(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		return err
	}))
	return check.(func() error)()
}

// Redact hides a DSN's password for messages.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		return u.Redacted()
	}
	return dsn
}
