package main

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/internal/testredis"
)

// TestDemoCommandRedis runs the demo on Redis (skipped when no server is
// reachable, except under CI=true): a clean run with a stale write
// rejected, and no key of its prefix left behind.
func TestDemoCommandRedis(t *testing.T) {
	u := testredis.URL(t)
	runDemoJSON(t, "--sink", u)
	opt, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var cursor uint64
	for {
		left, next, err := rdb.Scan(ctx, cursor, "workrouter-demo-*", 1000).Result()
		if err != nil || len(left) != 0 {
			t.Fatalf("demo keys left behind: %v (%v)", left, err)
		}
		if next == 0 {
			break
		}
		cursor = next
	}
}

// TestChaosRedis runs the short profile on Redis, where sink-conn kills
// the worker's connections (CLIENT KILL).
func TestChaosRedis(t *testing.T) {
	u := testredis.URL(t)
	code, out := runChaos(t, 5*time.Minute, "--duration", "40s", "--seed", "4", "--sink", u)
	checkChaos(t, code, out)
	if !strings.Contains(out, "CLIENT KILL on ") {
		t.Errorf("sink-conn did not kill the worker's Redis connections:\n%s", out)
	}
}
