// Package testredis gives tests the Redis server they may use. It is for
// tests only.
package testredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// EnvURL names the environment variable holding the test server's URL.
const EnvURL = "WORKROUTER_TEST_REDIS"

// DefaultURL is used when EnvURL is unset: the server every development
// machine of this project runs.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL returns the test server's URL after checking that it answers a
// PING. When it does not, the test is skipped with a message naming the
// URL and EnvURL, except under CI=true, where it fails: CI never skips.
// The server is asked once per URL and test binary. It may be called from
// any test goroutine.
func URL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		u = DefaultURL
	}
	if err := reachable(u); err != nil {
		msg := "Redis test server unreachable at " + u + " (set " + EnvURL + " to a reachable URL): " + err.Error()
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg + "; CI=true, so this fails instead of skipping")
		}
		tb.Skip(msg)
	}
	return u
}

var checks sync.Map // URL → func() error (a sync.OnceValue)

func reachable(u string) error {
	check, _ := checks.LoadOrStore(u, sync.OnceValue(func() error {
		opt, err := goredis.ParseURL(u)
		if err != nil {
			return err
		}
		opt.DisableIdentity = true
		c := goredis.NewClient(opt)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	}))
	return check.(func() error)()
}

// Prefix returns a fresh key prefix, wr-test-<random>, unique to one test.
func Prefix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "wr-test-" + hex.EncodeToString(b[:])
}
