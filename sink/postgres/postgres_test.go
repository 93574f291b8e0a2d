package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/sinktest"
)

func TestConformance(t *testing.T) {
	requireDB(t)
	sinktest.Run(t, sinktest.Harness[pgx.Tx]{
		Open: func(t testing.TB) sink.Sink[pgx.Tx] {
			return openSink(t, newTestSchema(t), nil)
		},
		Reopen: func(t testing.TB, s sink.Sink[pgx.Tx]) sink.Sink[pgx.Tx] {
			ps := s.(*Sink)
			if err := ps.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return openSink(t, ps.schema, nil)
		},
		Put: func(ctx context.Context, tx pgx.Tx, key, value string) error {
			_, err := tx.Exec(ctx, upsertKV, key, value)
			return err
		},
		Get: func(ctx context.Context, s sink.Sink[pgx.Tx], key string) (string, bool, error) {
			return getKV(ctx, s.(*Sink), key)
		},
		RequireGaps: true,
	})
}

func tokenOf(scope epochs.Scope, epoch int32, member string) epochs.Token {
	return epochs.Token{Group: scope.Group, Topic: scope.Topic, Partition: scope.Partition, Epoch: epoch, Member: member}
}

func testScope(t testing.TB) epochs.Scope {
	return epochs.Scope{Group: "g-" + t.Name(), Topic: "orders", Partition: 1}
}

func mustClaim(t testing.TB, s *Sink, tok epochs.Token) int64 {
	t.Helper()
	next, err := nextOf(s.Claim(context.Background(), tok, sink.Observed{}))
	if err != nil {
		t.Fatalf("Claim(%s): %v", tok, err)
	}
	return next
}

func TestOpenConfigErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cases := []struct {
		name string
		cfg  Config
		want string // in the message
	}{
		{"no DSN", Config{}, "DSN is required"},
		{"unparsable DSN", Config{DSN: "postgres://postgres@127.0.0.1:notaport/test"}, "cannot parse DSN"},
		{"unparsable key=value DSN", Config{DSN: "host='unterminated"}, "cannot parse DSN"},
		{"prefix with dash", Config{DSN: testpg.DefaultDSN, Prefix: "work-router"}, `Prefix "work-router"`},
		{"prefix with digit first", Config{DSN: testpg.DefaultDSN, Prefix: "1wr"}, `Prefix "1wr"`},
		{"prefix with quote", Config{DSN: testpg.DefaultDSN, Prefix: `wr"; DROP TABLE x; --`}, "Prefix"},
		{"prefix too long", Config{DSN: testpg.DefaultDSN, Prefix: strings.Repeat("p", 41)}, "Prefix"},
		{"schema with space", Config{DSN: testpg.DefaultDSN, Schema: "my schema"}, `Schema "my schema"`},
		{"negative timeout", Config{DSN: testpg.DefaultDSN, IdleInTxTimeout: -time.Second}, "IdleInTxTimeout"},
	}
	for _, tc := range cases {
		s, err := Open(ctx, tc.cfg)
		if err == nil {
			s.Close()
			t.Errorf("%s: Open succeeded, want ErrConfig", tc.name)
			continue
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Open error %v does not match ErrConfig", tc.name, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open error %q does not mention %q", tc.name, err, tc.want)
		}
	}
}

func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s, err := Open(t.Context(), Config{DSN: "postgres://postgres@127.0.0.1:1/test?connect_timeout=5"})
	if err == nil {
		s.Close()
		t.Fatal("Open of a refused port succeeded")
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Open error %v does not match ErrUnreachable", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Open error %q does not name the server", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Open of a refused port took %s", d)
	}
	t.Logf("error: %v", err)
}

func TestOpenCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Open(ctx, Config{DSN: testpg.DefaultDSN}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with cancelled ctx: %v, want context.Canceled", err)
	}
}

// tableExists reports whether schema.name exists.
func tableExists(t testing.TB, schema, name string) bool {
	var ok bool
	adminQueryRow(t, `SELECT to_regclass($1) IS NOT NULL`, []any{pgx.Identifier{schema, name}.Sanitize()}, &ok)
	return ok
}

func TestOpenSchemaConflict(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	adminExec(t, "CREATE TABLE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" (id int PRIMARY KEY, note text)")
	s, err := Open(t.Context(), Config{DSN: schemaDSN(t, schema), Schema: schema})
	if err == nil {
		s.Close()
		t.Fatal("Open over a conflicting workrouter_fences table succeeded")
	}
	if !errors.Is(err, ErrSchema) {
		t.Fatalf("Open error %v does not match ErrSchema", err)
	}
	if !strings.Contains(err.Error(), schema+".workrouter_fences") {
		t.Fatalf("Open error %q does not name the conflicting table", err)
	}
	t.Logf("error: %v", err)
	for _, name := range []string{"workrouter_history", "workrouter_schema"} {
		if tableExists(t, schema, name) {
			t.Errorf("failed Open left table %s.%s behind", schema, name)
		}
	}
	// Another prefix in the same schema is fine.
	s = openSink(t, schema, func(c *Config) { c.Prefix = "wr2" })
	mustClaim(t, s, tokenOf(testScope(t), 1, "m"))
}

func TestOpenSchemaVersionConflict(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	s.Close()
	adminExec(t, "UPDATE "+pgx.Identifier{schema, "workrouter_schema"}.Sanitize()+" SET version = 99")
	s, err := Open(t.Context(), Config{DSN: schemaDSN(t, schema), Schema: schema})
	if err == nil {
		s.Close()
		t.Fatal("Open over a version 99 schema succeeded")
	}
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "workrouter_schema") {
		t.Fatalf("Open error %v: want ErrSchema naming workrouter_schema", err)
	}
	t.Logf("error: %v", err)
}

func TestOpenIncompleteSchema(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	s.Close()
	adminExec(t, "DROP TABLE "+pgx.Identifier{schema, "workrouter_history"}.Sanitize())
	s, err := Open(t.Context(), Config{DSN: schemaDSN(t, schema), Schema: schema})
	if err == nil {
		s.Close()
		t.Fatal("Open over an incomplete schema succeeded")
	}
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "workrouter_history") {
		t.Fatalf("Open error %v: want ErrSchema naming workrouter_history", err)
	}
}

func TestOpenCreatesSchema(t *testing.T) {
	t.Parallel()
	requireDB(t)
	// A schema that does not exist yet is created with the tables.
	parent := newTestSchema(t)
	schema := parent + "_new"
	t.Cleanup(func() { adminExec(t, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })
	s := openSink(t, schema, nil)
	mustClaim(t, s, tokenOf(testScope(t), 1, "m"))
	for _, name := range []string{"workrouter_fences", "workrouter_history", "workrouter_schema"} {
		if !tableExists(t, schema, name) {
			t.Errorf("table %s.%s missing", schema, name)
		}
	}
}

func TestOpenConcurrent(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			s, err := Open(t.Context(), Config{DSN: schemaDSN(t, schema), Schema: schema})
			if err == nil {
				_, err = s.Claim(t.Context(), tokenOf(testScope(t), int32(i), fmt.Sprint("m", i)), sink.Observed{})
				if errors.Is(err, sink.ErrFenced) {
					err = nil
				}
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Open %d: %v", i, err)
		}
	}
}

func TestIdleInTxTimeoutIsSet(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	var got string
	if err := s.Pool().QueryRow(t.Context(), "SHOW idle_in_transaction_session_timeout").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "30s" {
		t.Fatalf("idle_in_transaction_session_timeout = %q, want 30s", got)
	}
}

// A worker paused inside a batch past IdleInTxTimeout loses its session:
// its transaction is rolled back by the server, Apply fails (not fenced),
// and the retried batch applies once.
func TestIdleInTxTimeoutEndsPausedBatch(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, func(c *Config) { c.IdleInTxTimeout = 200 * time.Millisecond })
	tok := tokenOf(testScope(t), 1, "m")
	mustClaim(t, s, tok)
	_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx pgx.Tx, i int) error {
		if _, err := tx.Exec(ctx, appendKV, "k", "x"); err != nil {
			return err
		}
		time.Sleep(time.Second) // the "pause"
		return nil
	})
	if err == nil || errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Apply paused past the idle timeout: error %v, want a non-fenced error", err)
	}
	t.Logf("error: %v", err)
	if _, ok, err := getKV(t.Context(), s, "k"); err != nil || ok {
		t.Fatalf("effect of the timed-out batch visible (ok=%v, err=%v)", ok, err)
	}
	res, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx pgx.Tx, i int) error {
		_, err := tx.Exec(ctx, appendKV, "k", "x")
		return err
	})
	if err != nil || res.Applied != 1 {
		t.Fatalf("retried Apply = %+v, %v", res, err)
	}
	if v, _, _ := getKV(t.Context(), s, "k"); v != "x" {
		t.Fatalf("kv(k) = %q, want x", v)
	}
}

// A handler blocked inside Apply holds no lock on the fence row: a newer
// tenure's Claim goes through at once, and the blocked batch, when
// released, is fenced with none of its effects visible.
func TestBlockedHandlerDoesNotBlockClaim(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	scope := testScope(t)
	old, newer := tokenOf(scope, 1, "old"), tokenOf(scope, 2, "new")
	mustClaim(t, s, old)

	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	offs := []int64{0, 1}
	go func() {
		_, err := s.Apply(context.Background(), old, sink.Batch{Offsets: offs}, func(ctx context.Context, tx pgx.Tx, i int) error {
			if _, err := tx.Exec(ctx, upsertKV, fmt.Sprint("k", offs[i]), "old"); err != nil {
				return err
			}
			if i == 0 {
				close(entered)
				<-release
			}
			return nil
		})
		done <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	next, err := nextOf(s.Claim(ctx, newer, sink.Observed{}))
	if err != nil {
		close(release)
		t.Fatalf("Claim by the newer tenure while the old handler is blocked: %v", err)
	}
	if next != 0 {
		t.Errorf("Claim = %d, want 0", next)
	}
	t.Logf("claim took %s while the old handler was blocked", time.Since(start))
	close(release)
	err = <-done
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored != newer || fe.Offered != old || fe.Op != sink.OpApply {
		t.Fatalf("released Apply: %v, want a FencedError with stored %s", err, newer)
	}
	for _, o := range offs {
		if _, ok, err := getKV(t.Context(), s, fmt.Sprint("k", o)); err != nil || ok {
			t.Fatalf("effect at offset %d of the fenced batch visible (ok=%v, err=%v)", o, ok, err)
		}
	}
	res, err := s.Apply(t.Context(), newer, sink.Batch{Offsets: offs}, func(ctx context.Context, tx pgx.Tx, i int) error {
		_, err := tx.Exec(ctx, upsertKV, fmt.Sprint("k", offs[i]), "new")
		return err
	})
	if err != nil || res.Applied != 2 || res.NextOffset != 2 {
		t.Fatalf("Apply by the new holder = %+v, %v", res, err)
	}
}

// The session running an Apply is killed mid-batch: Apply fails with a
// non-fenced error, nothing is applied, and retrying the batch applies it
// exactly once.
func TestTerminatedBackend(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	tok := tokenOf(testScope(t), 3, "m")
	mustClaim(t, s, tok)
	offs := []int64{10, 11, 12}
	effect := func(pause bool) (sink.Effect[pgx.Tx], chan int32, chan struct{}) {
		pids, release := make(chan int32, 1), make(chan struct{})
		return func(ctx context.Context, tx pgx.Tx, i int) error {
			if _, err := tx.Exec(ctx, appendKV, fmt.Sprint("k", offs[i]), "x"); err != nil {
				return err
			}
			if pause && i == len(offs)-1 {
				var pid int32
				if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				pids <- pid
				<-release
			}
			return nil
		}, pids, release
	}
	eff, pids, release := effect(true)
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(context.Background(), tok, sink.Batch{Offsets: offs}, eff)
		done <- err
	}()
	pid := <-pids
	var terminated bool
	adminQueryRow(t, "SELECT pg_terminate_backend($1, 5000)", []any{pid}, &terminated)
	if !terminated {
		t.Fatalf("pg_terminate_backend(%d) = false", pid)
	}
	close(release)
	err := <-done
	if err == nil {
		t.Fatal("Apply on a terminated session succeeded")
	}
	if errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Apply on a terminated session: %v matches sink.ErrFenced", err)
	}
	t.Logf("error: %v", err)
	for _, o := range offs {
		if _, ok, err := getKV(t.Context(), s, fmt.Sprint("k", o)); err != nil || ok {
			t.Fatalf("effect at offset %d visible after the session died (ok=%v, err=%v)", o, ok, err)
		}
	}
	if next := mustClaim(t, s, tok); next != 0 {
		t.Fatalf("NextOffset after the failed batch = %d, want 0", next)
	}
	// Retry: applies once; retry again: a no-op.
	for try, want := range []sink.Result{{Applied: 3, NextOffset: 13}, {Skipped: 3, NextOffset: 13}} {
		eff, _, _ := effect(false)
		res, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offs}, eff)
		if err != nil || !res.Equal(want) {
			t.Fatalf("retry %d: Apply = %+v, %v; want %+v", try, res, err, want)
		}
	}
	for _, o := range offs {
		if v, _, _ := getKV(t.Context(), s, fmt.Sprint("k", o)); v != "x" {
			t.Fatalf("kv(k%d) = %q, want x (applied exactly once)", o, v)
		}
	}
}

func TestHistory(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	ctx := t.Context()
	scope := testScope(t)
	a, b, c := tokenOf(scope, 4, "a"), tokenOf(scope, 5, "b"), tokenOf(scope, 1, "c")
	mustClaim(t, s, a)
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0, 1}}, func(context.Context, pgx.Tx, int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, b)
	if _, err := s.Claim(ctx, c, sink.Observed{}); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Claim by a lower epoch: %v, want fenced", err)
	}
	seen := sink.Fence{Scope: scope, Holder: b, NextOffset: 2}
	if _, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: scope, Expect: seen}); !errors.Is(err, ErrNoReason) {
		t.Fatalf("ResetFence without reason: %v, want ErrNoReason", err)
	}
	before, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: scope, Expect: seen, Reason: "group recreated"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (sink.Fence{Scope: scope, Holder: b, NextOffset: 2}); !before.Equal(want) {
		t.Fatalf("ResetFence before = %+v, want %+v", before, want)
	}
	if _, err := claimProven(ctx, s, c); err != nil {
		t.Fatalf("proven claim after the reset: %v", err)
	}
	mustClaim(t, s, c) // a re-claim is a claim too

	hist, err := s.History(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	want := []HistoryEntry{
		{Kind: "claim", Token: a, NextOffset: 0},
		{Kind: "claim", Token: b, NextOffset: 2},
		{Kind: "reset", Token: b, NextOffset: 2, Reason: "group recreated"},
		{Kind: "claim", Token: c, NextOffset: 2},
		{Kind: "claim", Token: c, NextOffset: 2},
	}
	if len(hist) != len(want) {
		t.Fatalf("History has %d entries, want %d: %+v", len(hist), len(want), hist)
	}
	for i, h := range hist {
		w := want[i]
		if h.Kind != w.Kind || h.Token != w.Token || h.NextOffset != w.NextOffset || h.Reason != w.Reason {
			t.Errorf("History[%d] = %+v, want %+v", i, h, w)
		}
		if i > 0 && (h.Seq <= hist[i-1].Seq || h.At.Before(hist[i-1].At)) {
			t.Errorf("History[%d] out of order: %+v after %+v", i, h, hist[i-1])
		}
		if time.Since(h.At) > time.Hour || h.At.IsZero() {
			t.Errorf("History[%d].At = %s", i, h.At)
		}
	}
	other := scope
	other.Partition++
	if hist, err := s.History(ctx, other); err != nil || len(hist) != 0 {
		t.Fatalf("History of an unknown scope = %+v, %v; want empty", hist, err)
	}
}

func TestHandlerCannotEndTransaction(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	tok := tokenOf(testScope(t), 1, "m")
	mustClaim(t, s, tok)
	for name, end := range map[string]func(context.Context, pgx.Tx) error{
		"commit":   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		"rollback": func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
	} {
		_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx pgx.Tx, _ int) error {
			if _, err := tx.Exec(ctx, upsertKV, "k", name); err != nil {
				return err
			}
			return end(ctx, tx)
		})
		var ee *sink.EffectError
		if !errors.As(err, &ee) || !errors.Is(err, ErrTxControl) {
			t.Fatalf("%s in a handler: Apply error %v, want an EffectError matching ErrTxControl", name, err)
		}
		if _, ok, _ := getKV(t.Context(), s, "k"); ok {
			t.Fatalf("%s in a handler: effect visible", name)
		}
	}
	// Savepoints are fine.
	res, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx pgx.Tx, _ int) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, upsertKV, "k", "discarded"); err != nil {
			return err
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, upsertKV, "k2", "kept")
		return err
	})
	if err != nil || res.Applied != 1 {
		t.Fatalf("Apply with a savepoint = %+v, %v", res, err)
	}
	if _, ok, _ := getKV(t.Context(), s, "k"); ok {
		t.Fatal("write rolled back to a savepoint is visible")
	}
	if v, _, _ := getKV(t.Context(), s, "k2"); v != "kept" {
		t.Fatalf("kv(k2) = %q, want kept", v)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if _, err := s.Claim(t.Context(), tokenOf(testScope(t), 1, "m"), sink.Observed{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Claim after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Fences(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Fences after Close: %v, want ErrClosed", err)
	}
}

func TestGivenPool(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	pool, err := pgxpool.New(t.Context(), schemaDSN(t, schema))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := Open(t.Context(), Config{Pool: pool, Schema: schema, Prefix: "custom"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Pool() != pool {
		t.Fatal("Pool() is not the given pool")
	}
	tok := tokenOf(testScope(t), 1, "m")
	mustClaim(t, s, tok)
	if !tableExists(t, schema, "custom_fences") {
		t.Fatal("custom_fences missing")
	}
	s.Close()
	if err := pool.Ping(t.Context()); err != nil {
		t.Fatalf("the given pool was closed by Close: %v", err)
	}
}

// TestMigrateFromVersion1: Open migrates a version 1 schema in place,
// keeping the fences and the history; the fence row adopts the topic ID
// its next claim observes.
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	q := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	for _, stmt := range []string{
		`CREATE TABLE ` + q("workrouter_fences") + ` (grp text NOT NULL, topic text NOT NULL, part int NOT NULL, epoch int NOT NULL,
			member text NOT NULL, next_offset bigint NOT NULL DEFAULT 0, PRIMARY KEY (grp, topic, part))`,
		`CREATE TABLE ` + q("workrouter_history") + ` (seq bigserial PRIMARY KEY, grp text NOT NULL, topic text NOT NULL, part int NOT NULL,
			kind text NOT NULL CHECK (kind IN ('claim', 'reset')), epoch int NOT NULL, member text NOT NULL, next_offset bigint NOT NULL,
			reason text NOT NULL DEFAULT '', at timestamptz NOT NULL DEFAULT now())`,
		`CREATE TABLE ` + q("workrouter_schema") + ` (version int NOT NULL)`,
		`INSERT INTO ` + q("workrouter_schema") + ` VALUES (1)`,
		`INSERT INTO ` + q("workrouter_fences") + ` VALUES ('g', 'orders', 0, 7, 'm-7', 42)`,
		`INSERT INTO ` + q("workrouter_history") + ` (grp, topic, part, kind, epoch, member, next_offset) VALUES ('g', 'orders', 0, 'claim', 7, 'm-7', 40)`,
	} {
		adminExec(t, stmt)
	}
	s := openSink(t, schema, nil)
	ctx := t.Context()
	fences, err := s.Fences(ctx)
	if err != nil || len(fences) != 1 || fences[0].NextOffset != 42 || fences[0].TopicID != "" {
		t.Fatalf("fences after migration = %+v, %v", fences, err)
	}
	b := epochs.Token{Group: "g", Topic: "orders", Partition: 0, Epoch: 8, Member: "m-8"}
	if next, err := nextOf(s.Claim(ctx, b, sink.Observed{TopicID: "topic-1", LogEnd: 50})); err != nil || next != 42 {
		t.Fatalf("first claim after migration = %d, %v", next, err)
	}
	h, err := s.History(ctx, b.Scope())
	if err != nil || len(h) != 2 || h[0].NextOffset != 40 || h[1].TopicID != "topic-1" {
		t.Fatalf("history after migration = %+v, %v", h, err)
	}
	if _, err := s.DeadLetter(ctx, b, sink.DeadRecord{Offset: 42, Reason: "undecodable"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := openSink(t, schema, nil)
	if dl, err := s2.DeadLetters(ctx, dlq.Filter{}); err != nil || len(dl) != 1 || dl[0].Record.TopicID != "topic-1" {
		t.Fatalf("dead letters after reopen = %+v, %v", dl, err)
	}
}

// TestMigrateFromVersion2: Open migrates a version 2 schema (version 3
// without the fences' proof_below) in place, requiring a proof for good
// of each scope its history shows reset, so that a scope reset before the
// upgrade still refuses its previous incarnation.
func TestMigrateFromVersion2(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	ctx := t.Context()
	s := openSink(t, schema, nil)
	scope, otherScope := testScope(t), testScope(t)
	otherScope.Partition++
	old, fresh, zombie := tokenOf(scope, 10, "old-10"), tokenOf(scope, 1, "new-1"), tokenOf(scope, 9, "old-9")
	other := tokenOf(otherScope, 4, "m-4")
	mustClaim(t, s, old)
	mustClaim(t, s, other)
	if _, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: scope, Expect: sink.Fence{Scope: scope, Holder: old}, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := claimProven(ctx, s, fresh); err != nil {
		t.Fatal(err)
	}
	s.Close()
	adminExec(t, "DROP TABLE "+pgx.Identifier{schema, "workrouter_command_ids"}.Sanitize())
	dropVersion5(t, schema)
	adminExec(t, "ALTER TABLE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" DROP COLUMN ids_version")
	adminExec(t, "ALTER TABLE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" DROP COLUMN duplicates")
	adminExec(t, "ALTER TABLE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" DROP COLUMN proof_below")
	// A version 2 claim cleared the requirement the reset set.
	adminExec(t, "UPDATE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" SET proof_required = false")
	adminExec(t, "UPDATE "+pgx.Identifier{schema, "workrouter_schema"}.Sanitize()+" SET version = 2")

	s = migrated(t, schema, 2)
	fences, err := s.Fences(ctx)
	if err != nil || len(fences) != 2 {
		t.Fatalf("fences after migration = %+v, %v", fences, err)
	}
	if f := fences[0]; f.Holder != fresh || !f.ProofRequired {
		t.Fatalf("reset scope after migration = %+v, want holder %s, a proof required", f, fresh)
	}
	if f := fences[1]; f.Holder != other || f.ProofRequired {
		t.Fatalf("scope never reset after migration = %+v, want holder %s, no proof required", f, other)
	}
	for _, z := range []epochs.Token{zombie, tokenOf(scope, 40, "old-40")} {
		if _, err := s.Claim(ctx, z, sink.Observed{}); !errors.Is(err, sink.ErrProofRequired) {
			t.Fatalf("unproven claim by %s after migration: %v, want ErrProofRequired", z, err)
		}
	}
}

// TestMigrateFromVersion6: Open migrates a version 6 schema (a proof
// floor a claim kept, a requirement a claim cleared) in place: a scope
// with a floor requires a proof of every claim for good, one without
// none, and the history rows read unproven.
func TestMigrateFromVersion6(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	ctx := t.Context()
	s := openSink(t, schema, nil)
	scope, otherScope := testScope(t), testScope(t)
	otherScope.Partition++
	old, fresh := tokenOf(scope, 10, "old-10"), tokenOf(scope, 1, "new-1")
	other := tokenOf(otherScope, 4, "m-4")
	mustClaim(t, s, old)
	mustClaim(t, s, other)
	if _, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: scope, Expect: sink.Fence{Scope: scope, Holder: old}, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := claimProven(ctx, s, fresh); err != nil {
		t.Fatal(err)
	}
	s.Close()
	dropVersion7(t, schema)
	// What version 6 left: the floor above the cleared epoch, the
	// requirement cleared by the claim.
	adminExec(t, "UPDATE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" SET proof_required = false, proof_below = CASE WHEN part = $1 THEN 11 ELSE 0 END",
		scope.Partition)
	adminExec(t, "UPDATE "+pgx.Identifier{schema, "workrouter_schema"}.Sanitize()+" SET version = 6")

	s = migrated(t, schema, 6)
	fences, err := s.Fences(ctx)
	if err != nil || len(fences) != 2 || !fences[0].ProofRequired || fences[1].ProofRequired {
		t.Fatalf("fences after migration = %+v, %v; want a proof required of the reset scope only", fences, err)
	}
	// Above the old floor too.
	if _, err := s.Claim(ctx, tokenOf(scope, 40, "old-40"), sink.Observed{}); !errors.Is(err, sink.ErrProofRequired) {
		t.Fatalf("unproven claim at epoch 40 after migration: %v, want ErrProofRequired", err)
	}
	h, err := s.History(ctx, scope)
	if err != nil || len(h) != 3 || h[2].Token != fresh || h[2].Proven {
		t.Fatalf("history after migration = %+v, %v; want the claim by %s read unproven", h, err, fresh)
	}
	if _, err := claimProven(ctx, s, tokenOf(scope, 2, "new-2")); err != nil {
		t.Fatal(err)
	}
	if h, err := s.History(ctx, scope); err != nil || len(h) != 4 || !h[3].Proven {
		t.Fatalf("history after a proven claim = %+v, %v", h, err)
	}
}
