package postgres

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
)

// TestMigrateFromVersion3: Open migrates a version 3 schema (version 4
// without the command IDs table and the fences' ids_version and
// duplicates) in place, keeping its fences, and the command IDs work at
// once, the duplicates counted; a read-only Open refuses to migrate it.
func TestMigrateFromVersion3(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	ctx := t.Context()
	s := openSink(t, schema, nil)
	a := tokenOf(testScope(t), 3, "m-3")
	mustClaim(t, s, a)
	noop := func(context.Context, pgx.Tx, int) error { return nil }
	if _, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{0, 1}}, noop); err != nil {
		t.Fatal(err)
	}
	s.Close()
	adminExec(t, "DROP TABLE "+pgx.Identifier{schema, "workrouter_command_ids"}.Sanitize())
	dropVersion5(t, schema)
	adminExec(t, "ALTER TABLE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" DROP COLUMN ids_version")
	adminExec(t, "ALTER TABLE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" DROP COLUMN duplicates")
	adminExec(t, "UPDATE "+pgx.Identifier{schema, "workrouter_schema"}.Sanitize()+" SET version = 3")

	s = migrated(t, schema, 3)
	if fs, err := s.Fences(ctx); err != nil || len(fs) != 1 || fs[0].Holder != a || fs[0].NextOffset != 2 {
		t.Fatalf("fences after migration = %+v, %v", fs, err)
	}
	if res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{2, 3}, IDs: []string{"x", "y"}}, noop); err != nil || res.Applied != 2 {
		t.Fatalf("an Apply with IDs after migration = %+v, %v", res, err)
	}
	if res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{4}, IDs: []string{"x"}}, noop); err != nil || res.Applied != 0 || len(res.Duplicates) != 1 {
		t.Fatalf("an Apply with IDs of a duplicate after migration = %+v, %v", res, err)
	}
	if fs, err := s.Fences(ctx); err != nil || len(fs) != 1 || fs[0].Duplicates != 1 {
		t.Fatalf("fences after a duplicate = %+v, %v, want 1 duplicate counted", fs, err)
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
	if w := openSink(t, schema, nil).Features().DedupeWindow; w != int64(100_000) {
		t.Fatalf("default DedupeWindow = %d, want %d", w, int64(100_000))
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
		if _, err := s.Apply(ctx, a, sink.Batch{Offsets: offs, IDs: ids}, noop); err != nil {
			t.Fatal(err)
		}
	}
	// NextOffset is 70, the horizon 60: the rows (one per batch) of
	// offsets 56..62 and 63..69 are kept, no more.
	var n, low int64
	adminQueryRow(t, "SELECT count(*), min(first_off) FROM "+pgx.Identifier{schema, "workrouter_command_ids"}.Sanitize(), nil, &n, &low)
	if n != 2 || low != 56 {
		t.Fatalf("command ID rows kept: %d from offset %d, want 2 from 56", n, low)
	}
	// What is inside the window is a duplicate, what is outside is not.
	res, err := s.Apply(ctx, a, sink.Batch{Offsets: []int64{70, 71}, IDs: []string{"id-60", "id-59"}}, noop)
	if err != nil || len(res.Duplicates) != 1 || res.Duplicates[0] != 0 || res.Applied != 1 {
		t.Fatalf("an Apply with IDs of id-60 and id-59 at 70 and 71 = %+v, %v; want id-60 a duplicate, id-59 applied", res, err)
	}
}

// TestDedupeTwoSinks: two Sinks (two worker processes) apply the same
// scope in turn, as a partition moving between workers does; each sees
// the IDs the other applied although each caches the scope's IDs: the
// cache is used only while it mirrors the fence row's IDs version.
func TestDedupeTwoSinks(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	ctx := t.Context()
	s1, s2 := openSink(t, schema, nil), openSink(t, schema, nil)
	scope := testScope(t)
	a, b, c := tokenOf(scope, 1, "a"), tokenOf(scope, 2, "b"), tokenOf(scope, 3, "c")
	noop := func(context.Context, pgx.Tx, int) error { return nil }
	once := func(s *Sink, tk epochs.Token, off int64, id string) sink.Result {
		t.Helper()
		res, err := s.Apply(ctx, tk, sink.Batch{Offsets: []int64{off}, IDs: []string{id}}, noop)
		if err != nil {
			t.Fatalf("an Apply with IDs(%s, %d, %q): %v", tk, off, id, err)
		}
		return res
	}
	mustClaim(t, s1, a)
	once(s1, a, 0, "x") // s1's cache now holds the scope
	mustClaim(t, s2, b)
	if res := once(s2, b, 1, "x"); len(res.Duplicates) != 1 {
		t.Fatalf("s2 applied x again: %+v", res)
	}
	once(s2, b, 2, "y")
	mustClaim(t, s1, c) // the partition moves back: s1's cache is stale
	if res := once(s1, c, 3, "y"); len(res.Duplicates) != 1 {
		t.Fatalf("s1 applied y, which s2 applied, again: %+v", res)
	}
	if res := once(s1, c, 4, "z"); res.Applied != 1 {
		t.Fatalf("s1 did not apply z: %+v", res)
	}
	if _, err := s2.Apply(ctx, b, sink.Batch{Offsets: []int64{5}, IDs: []string{"w"}}, noop); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("an Apply with IDs by the superseded s2 tenure: %v, want fenced", err)
	}
}

// TestDedupeZombieDoesNotHideTheCommand: a zombie tenure that looked a
// command ID up and then waits in its handler neither blocks the new
// holder's an Apply with IDs of the same command (asserted: it completes while
// the zombie waits) nor hides it: the new holder applies it, and the
// zombie, released, is fenced and records nothing.
func TestDedupeZombieDoesNotHideTheCommand(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	scope := testScope(t)
	old, newer := tokenOf(scope, 1, "old"), tokenOf(scope, 2, "new")
	mustClaim(t, s, old)

	entered, release := make(chan struct{}), make(chan struct{})
	oldDone := make(chan error, 1)
	go func() {
		_, err := s.Apply(context.Background(), old, sink.Batch{Offsets: []int64{0}, IDs: []string{"cmd"}}, func(ctx context.Context, tx pgx.Tx, i int) error {
			// (Its own key: a write of the key the new holder writes
			// would hold a row lock the new holder's effect waits for.)
			if _, err := tx.Exec(ctx, upsertKV, "cmd/old", "applied"); err != nil {
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
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := s.Apply(ctx, newer, sink.Batch{Offsets: []int64{0}, IDs: []string{"cmd"}}, func(ctx context.Context, tx pgx.Tx, i int) error {
		_, err := tx.Exec(ctx, upsertKV, "cmd/new", "applied")
		return err
	})
	close(release)
	if err != nil || res.Applied != 1 || len(res.Duplicates) != 0 {
		t.Fatalf("the new holder's an Apply with IDs while the zombie waits = %+v, %v; want the command applied", res, err)
	}
	var fe *sink.FencedError
	if err := <-oldDone; !errors.As(err, &fe) {
		t.Fatalf("the zombie's an Apply with IDs: %v, want fenced", err)
	}
	if _, ok, err := getKV(t.Context(), s, "cmd/new"); err != nil || !ok {
		t.Fatalf("the new holder's write is missing (%v, %v)", ok, err)
	}
	if _, ok, err := getKV(t.Context(), s, "cmd/old"); err != nil || ok {
		t.Fatalf("the zombie's write is visible (%v, %v)", ok, err)
	}
	var rows int
	adminQueryRow(t, "SELECT count(*) FROM "+pgx.Identifier{schema, "workrouter_command_ids"}.Sanitize(), nil, &rows)
	if rows != 1 {
		t.Fatalf("%d command ID rows, want 1 (the new holder's)", rows)
	}
}

// TestDedupePruneKeepsTheHorizon: the prune deletes the IDs applied below
// the horizon (NextOffset − DedupeWindow) and keeps those at it, which
// are still duplicates for the next offset (cmdids.IsDuplicate: applied >=
// offset − window). Read back by another Sink, whose cache loads the
// table, so the rows themselves are what answers: "w" at 3, below the
// horizon 4, is deleted (the prune ran); "x" at exactly 4 is kept, and a
// duplicate at 20, one window after it.
func TestDedupePruneKeepsTheHorizon(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	ctx := t.Context()
	const window = 16
	s := openSink(t, schema, func(c *Config) { c.DedupeWindow = window })
	other := openSink(t, schema, func(c *Config) { c.DedupeWindow = window })
	a := tokenOf(testScope(t), 1, "m")
	mustClaim(t, s, a)
	noop := func(context.Context, pgx.Tx, int) error { return nil }
	once := func(s *Sink, offs []int64, ids ...string) sink.Result {
		t.Helper()
		res, err := s.Apply(ctx, a, sink.Batch{Offsets: offs, IDs: ids}, noop)
		if err != nil {
			t.Fatalf("an Apply with IDs(%v, %q): %v", offs, ids, err)
		}
		return res
	}
	once(s, []int64{3}, "w")
	once(s, []int64{4}, "x")
	// NextOffset 5 to 20: the horizon crosses 4 (cmdids.PruneDue), the
	// prune deletes the rows whose last offset is below 4.
	rest := offsetsFrom(5, 1, 15)
	if !cmdids.PruneDue(5, 20, window) || cmdids.Horizon(20, window) != 4 {
		t.Fatal("the test's offsets no longer make a prune at the horizon 4")
	}
	once(s, rest, make([]string, len(rest))...)
	var kept []int64
	rows, err := admin(t).Query(ctx, "SELECT last_off FROM "+pgx.Identifier{schema, "workrouter_command_ids"}.Sanitize()+" ORDER BY last_off")
	if err == nil {
		kept, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil || !slices.Equal(kept, []int64{4}) {
		t.Errorf("command ID rows kept after the prune at the horizon 4: last offsets %v, %v; want [4]", kept, err)
	}
	res := once(other, []int64{20, 21}, "x", "w")
	if !slices.Equal(res.Duplicates, []int{0}) || res.Applied != 1 {
		t.Fatalf("an Apply with IDs of x (applied at 4) at 20 and w (applied at 3) at 21 through another Sink = %+v; want x a duplicate, w applied", res)
	}
}
