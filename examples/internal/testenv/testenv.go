// Package testenv is what the examples' tests run against: an in-process
// Kafka-protocol broker (kfake), a fresh PostgreSQL schema per test, group
// workers with test-friendly timings, and a way to apply commands through a
// sink directly under a chosen fencing token. It is test support only.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
)

// Cluster starts an in-process kfake broker with topic seeded with
// partitions partitions, closes it when the test ends, and returns its
// addresses.
func Cluster(tb testing.TB, topic string, partitions int32) []string {
	tb.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		tb.Fatalf("kfake.NewCluster: %v", err)
	}
	tb.Cleanup(c.Close)
	return c.ListenAddrs()
}

// Produce sends cmds to topic through a router.Router, in order, and waits
// until every one is acknowledged. Commands with equal keys keep their
// order.
func Produce(tb testing.TB, brokers []string, topic string, cmds []router.Command) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := router.New(ctx, router.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		tb.Fatalf("router.New: %v", err)
	}
	defer r.Close()
	var (
		mu    sync.Mutex
		first error
	)
	for _, cmd := range cmds {
		r.SendAsync(ctx, cmd, func(_ router.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
		})
	}
	if err := r.Flush(ctx); err != nil {
		tb.Fatalf("router.Flush: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if first != nil {
		tb.Fatalf("send: %v", first)
	}
}

// Worker starts a consumer group member applying handlers' commands of
// topic to s, with short group timings, and closes it when the test ends.
func Worker[Tx any](tb testing.TB, brokers []string, group, topic, name string, s sink.Sink[Tx], handlers map[string]consumer.Handler[Tx]) *consumer.Worker[Tx] {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := consumer.New(ctx, consumer.Config[Tx]{
		Brokers:           brokers,
		Group:             group,
		Topic:             topic,
		Sink:              s,
		Handlers:          handlers,
		MaxBatch:          32,
		SessionTimeout:    6 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		HeartbeatInterval: 200 * time.Millisecond,
		RetryBackoff:      10 * time.Millisecond,
		MaxRetryBackoff:   200 * time.Millisecond,
		ClientID:          name,
	})
	if err != nil {
		tb.Fatalf("consumer.New: %v", err)
	}
	tb.Cleanup(func() { _ = w.Close() })
	return w
}

// WaitFor polls cond every 50ms until it reports true, failing the test if
// it returns an error or d passes. The deadline only bounds a failing test.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() (bool, error)) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil {
			tb.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Apply applies cmds, at offsets, to s in one Apply under tok, dispatching
// each command to its handler by Type as the consumer does. It is how the
// fencing tests play a paused worker that wakes up and writes.
func Apply[Tx any](ctx context.Context, s sink.Sink[Tx], tok epochs.Token, handlers map[string]consumer.Handler[Tx], offsets []int64, cmds []router.Command) (sink.Result, error) {
	return s.Apply(ctx, tok, sink.Batch{Offsets: offsets}, func(ctx context.Context, tx Tx, i int) error {
		h, ok := handlers[cmds[i].Type]
		if !ok {
			return fmt.Errorf("no handler for command type %q", cmds[i].Type)
		}
		return h(ctx, tx, consumer.Command{Command: cmds[i], Offset: offsets[i], Token: tok})
	})
}

// Postgres creates a fresh schema on the test PostgreSQL server (the DSN
// in $WORKROUTER_TEST_POSTGRES, default testpg.DefaultDSN), drops it when the
// test ends, and returns a DSN whose search_path is that schema, and the
// schema's name. It skips the test if the server is unreachable, unless
// CI=true, where it fails instead: CI never skips.
func Postgres(tb testing.TB) (dsn, schema string) {
	tb.Helper()
	base := testpg.DSN(tb)

	var b [8]byte
	_, _ = rand.Read(b[:])
	schema = "wr_example_" + hex.EncodeToString(b[:])
	admin(tb, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	tb.Cleanup(func() { admin(tb, base, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })

	if strings.Contains(base, "://") {
		u, err := url.Parse(base)
		if err != nil {
			tb.Fatalf("parse %s: %v", testpg.EnvDSN, err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		q.Set("pool_max_conns", "6")
		u.RawQuery = q.Encode()
		return u.String(), schema
	}
	return base + " search_path=" + schema + " pool_max_conns=6", schema
}

// admin runs one statement on a fresh connection to the test server.
func admin(tb testing.TB, dsn, stmt string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		tb.Fatalf("%s: %v", stmt, err)
	}
}
