package main

import (
	"testing"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/internal/testredis"
)

// procRedis is the Redis backend of the process tests: the ledger under a
// fresh key prefix on the test server, deleted at the end.
func procRedis(t *testing.T) *procBackend {
	t.Helper()
	u := testredis.URL(t)
	st, err := cluster.OpenStore(t.Context(), cluster.StoreConfig{RedisURL: u, SchemaPrefix: "wr-proc"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return &procBackend{name: "redis", store: st, workerSpec: st.WorkerSpec,
		unreachable: func(t *testing.T) func() {
			t.Fatal("the Redis process backend has no unreachable fault")
			return nil
		}}
}

// TestPausedWorkerRejectedRedis (hazard 4 on Redis): the worker frozen with
// SIGSTOP past its session timeout resumes after the takeover; Redis's
// apply script refuses its late batch, and F, L, O, X hold.
func TestPausedWorkerRejectedRedis(t *testing.T) {
	pausedWorkerRejected(t, procRedis(t))
}
