package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// TestReadOnlyCreatesNothing: a read-only Open of a schema without the
// sink's tables, or of a schema that does not exist, fails with
// ErrNoSchema and creates neither tables nor schema.
func TestReadOnlyCreatesNothing(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s, err := Open(t.Context(), Config{DSN: schemaDSN(t, schema), Schema: schema, ReadOnly: true})
	if !errors.Is(err, ErrNoSchema) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("read-only Open of a schema without the sink's tables: %v, want ErrNoSchema", err)
	}
	for _, name := range []string{"workrouter_fences", "workrouter_history", "workrouter_schema"} {
		if tableExists(t, schema, name) {
			t.Errorf("a read-only Open created %s.%s", schema, name)
		}
	}
	absent := schema + "_absent"
	if _, err := Open(t.Context(), Config{DSN: schemaDSN(t, schema), Schema: absent, ReadOnly: true}); !errors.Is(err, ErrNoSchema) {
		t.Fatalf("read-only Open of a schema that does not exist: %v, want ErrNoSchema", err)
	}
	var exists bool
	adminQueryRow(t, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, []any{absent}, &exists)
	if exists {
		adminExec(t, "DROP SCHEMA "+pgx.Identifier{absent}.Sanitize()+" CASCADE")
		t.Fatalf("a read-only Open created schema %s", absent)
	}
}

// TestReadOnlyReadsAndRefusesWrites: a read-only sink reads fences and
// history, its writing methods fail with ErrReadOnly, and the server
// refuses any write on its sessions.
func TestReadOnlyReadsAndRefusesWrites(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	w := openSink(t, schema, nil)
	tok := tokenOf(testScope(t), 4, "m")
	mustClaim(t, w, tok)

	r := openSink(t, schema, func(c *Config) { c.ReadOnly = true })
	ctx := t.Context()
	fs, err := r.Fences(ctx)
	if err != nil || len(fs) != 1 || fs[0].Holder != tok {
		t.Fatalf("Fences = %+v, %v", fs, err)
	}
	hs, err := r.History(ctx, tok.Scope())
	if err != nil || len(hs) != 1 {
		t.Fatalf("History = %+v, %v", hs, err)
	}
	if _, err := r.Claim(ctx, tokenOf(testScope(t), 5, "m"), sink.Observed{}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Claim: %v, want ErrReadOnly", err)
	}
	if _, err := r.ResetFence(ctx, fenceadmin.ResetRequest{Scope: tok.Scope(), Reason: "why"}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("ResetFence: %v, want ErrReadOnly", err)
	}
	if _, err := r.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 0, Reason: "r", Error: "e"}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("DeadLetter: %v, want ErrReadOnly", err)
	}
	if _, err := r.ResolveDeadLetter(ctx, 1, dlq.Open, dlq.Dropped, "why", ""); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("ResolveDeadLetter: %v, want ErrReadOnly", err)
	}
	if _, err := r.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, func(context.Context, pgx.Tx, int) error { return nil }); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Apply: %v, want ErrReadOnly", err)
	}
	_, err = r.Pool().Exec(ctx, `INSERT INTO kv (k, v) VALUES ('k', 'v')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" { // read_only_sql_transaction
		t.Fatalf("a write through the read-only sink's pool: %v, want SQLSTATE 25006", err)
	}
	// The writer still owns its scope.
	if fs, err := w.Fences(ctx); err != nil || fs[0].Holder != tok {
		t.Fatalf("after the read-only sink: %+v, %v", fs, err)
	}
}
