// Package testpg gives tests the PostgreSQL server they may use. It is for
// tests only.
package testpg

import (
	"context"
	"net/url"
	"os"
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
// except under CI=true, where it fails: CI never skips. It may be called
// from any test goroutine.
func DSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		dsn = DefaultDSN
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err == nil {
		err = conn.Ping(ctx)
		conn.Close(ctx)
	}
	if err != nil {
		msg := "PostgreSQL test server unreachable at " + Redact(dsn) + " (set " + EnvDSN + " to a reachable DSN): " + err.Error()
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg + "; CI=true, so this fails instead of skipping")
		}
		tb.Skip(msg)
	}
	return dsn
}

// Redact hides a DSN's password for messages.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		return u.Redacted()
	}
	return dsn
}
