package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/sink"
)

// TestMigrateFromVersion3: Open migrates a version 3 schema (version 4
// without the command IDs table) in place, keeping its fences, and the
// command IDs work at once; a read-only Open refuses to migrate it.
func TestMigrateFromVersion3(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	ctx := t.Context()
	s := openSink(t, schema, nil)
	a := tokenOf(testScope(t), 3, "m-3")
	mustClaim(t, s, a)
	noop := func(context.Context, pgx.Tx, int) error { return nil }
	if _, err := s.Apply(ctx, a, []int64{0, 1}, noop); err != nil {
		t.Fatal(err)
	}
	s.Close()
	adminExec(t, "DROP TABLE "+pgx.Identifier{schema, "workrouter_command_ids"}.Sanitize())
	adminExec(t, "UPDATE "+pgx.Identifier{schema, "workrouter_schema"}.Sanitize()+" SET version = 3")

	if ro, err := Open(ctx, Config{DSN: schemaDSN(t, schema), Schema: schema, ReadOnly: true}); err == nil {
		ro.Close()
		t.Fatal("a read-only open of a version 3 schema succeeded")
	} else if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "version 3") {
		t.Fatalf("read-only open of a version 3 schema: %v, want ErrSchema naming version 3", err)
	}
	s = openSink(t, schema, nil)
	var version int32
	adminQueryRow(t, "SELECT version FROM "+pgx.Identifier{schema, "workrouter_schema"}.Sanitize(), nil, &version)
	if version != schemaVersion {
		t.Fatalf("schema version after migration = %d, want %d", version, schemaVersion)
	}
	if fs, err := s.Fences(ctx); err != nil || len(fs) != 1 || fs[0].Holder != a || fs[0].NextOffset != 2 {
		t.Fatalf("fences after migration = %+v, %v", fs, err)
	}
	if res, err := s.ApplyOnce(ctx, a, []int64{2, 3}, []string{"x", "y"}, noop); err != nil || res.Applied != 2 {
		t.Fatalf("ApplyOnce after migration = %+v, %v", res, err)
	}
	if res, err := s.ApplyOnce(ctx, a, []int64{4}, []string{"x"}, noop); err != nil || res.Applied != 0 || len(res.Duplicates) != 1 {
		t.Fatalf("ApplyOnce of a duplicate after migration = %+v, %v", res, err)
	}
}

// TestDedupeWindowConfig: Config.DedupeWindow sets the horizon (zero is
// the default, negative refused), and the prune keeps the table at the
// window's IDs.
func TestDedupeWindowConfig(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	ctx := t.Context()
	if _, err := Open(ctx, Config{DSN: schemaDSN(t, schema), Schema: schema, DedupeWindow: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("Open with a negative DedupeWindow: %v, want ErrConfig", err)
	}
	if w := openSink(t, schema, nil).DedupeWindow(); w != sink.DefaultDedupeWindow {
		t.Fatalf("default DedupeWindow = %d, want %d", w, sink.DefaultDedupeWindow)
	}
	s := openSink(t, schema, func(c *Config) { c.DedupeWindow = 10 })
	a := tokenOf(testScope(t), 1, "m")
	mustClaim(t, s, a)
	noop := func(context.Context, pgx.Tx, int) error { return nil }
	for b := range int64(10) {
		offs, ids := make([]int64, 7), make([]string, 7)
		for i := range offs {
			offs[i] = b*7 + int64(i)
			ids[i] = "id-" + strconv.FormatInt(offs[i], 10)
		}
		if _, err := s.ApplyOnce(ctx, a, offs, ids, noop); err != nil {
			t.Fatal(err)
		}
	}
	// NextOffset is 70: the IDs of offsets 60..69 are kept, no more.
	var n, low int64
	adminQueryRow(t, "SELECT count(*), min(off) FROM "+pgx.Identifier{schema, "workrouter_command_ids"}.Sanitize(), nil, &n, &low)
	if n != 10 || low != 60 {
		t.Fatalf("command IDs kept: %d from offset %d, want 10 from 60", n, low)
	}
}

// TestDedupeZombieInsertDoesNotHideTheCommand: a zombie tenure that
// recorded a command ID and then waits in its handler holds that ID's row
// uncommitted; the new holder's ApplyOnce of the same command waits for
// it (asserted: its session waits on a lock), and when the zombie is
// fenced and rolls back, the new holder applies the command: a fenced
// batch's IDs never count.
func TestDedupeZombieInsertDoesNotHideTheCommand(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	scope := testScope(t)
	old, newer := tokenOf(scope, 1, "old"), tokenOf(scope, 2, "new")
	mustClaim(t, s, old)

	entered, release := make(chan struct{}), make(chan struct{})
	oldDone := make(chan error, 1)
	go func() {
		_, err := s.ApplyOnce(context.Background(), old, []int64{0}, []string{"cmd"}, func(ctx context.Context, tx pgx.Tx, i int) error {
			if _, err := tx.Exec(ctx, upsertKV, "cmd", "old"); err != nil {
				return err
			}
			close(entered)
			<-release
			return nil
		})
		oldDone <- err
	}()
	<-entered
	mustClaim(t, s, newer)
	type result struct {
		res sink.ApplyOnceResult
		err error
	}
	newDone := make(chan result, 1)
	go func() {
		res, err := s.ApplyOnce(context.Background(), newer, []int64{0}, []string{"cmd"}, func(ctx context.Context, tx pgx.Tx, i int) error {
			_, err := tx.Exec(ctx, upsertKV, "cmd", "new")
			return err
		})
		newDone <- result{res, err}
	}()
	waited := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !waited; time.Sleep(20 * time.Millisecond) {
		var n int
		adminQueryRow(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%command_ids%'`, nil, &n)
		waited = n > 0
	}
	close(release)
	if !waited {
		t.Fatal("the new holder's ApplyOnce never waited for the zombie's uncommitted command ID")
	}
	var fe *sink.FencedError
	if err := <-oldDone; !errors.As(err, &fe) {
		t.Fatalf("the zombie's ApplyOnce: %v, want fenced", err)
	}
	r := <-newDone
	if r.err != nil || r.res.Applied != 1 || len(r.res.Duplicates) != 0 {
		t.Fatalf("the new holder's ApplyOnce = %+v, %v; want the command applied", r.res, r.err)
	}
	if v, ok, err := getKV(t.Context(), s, "cmd"); err != nil || !ok || v != "new" {
		t.Fatalf("cmd = %q (%v, %v), want the new holder's write", v, ok, err)
	}
}
