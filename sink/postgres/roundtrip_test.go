package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/internal/unfenced"
	"github.com/workrouter/workrouter/sink"
)

// tripCounter is a pgx tracer that records, per query or batch sent, one
// line: a query's SQL, or a batch's statements joined by " | ". Each line
// is one round trip once the statements are prepared on the connection.
type tripCounter struct {
	mu    sync.Mutex
	trips []string
	batch []string
}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips = append(c.trips, strings.Join(strings.Fields(d.SQL), " "))
	return ctx
}

func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batch = nil
	return ctx
}

func (c *tripCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sql := strings.Fields(d.SQL)
	c.batch = append(c.batch, strings.TrimSuffix(strings.Join(sql[:min(len(sql), 2)], " "), ","))
}

func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips = append(c.trips, "batch: "+strings.Join(c.batch, " | "))
}

// take returns the lines recorded since the last take.
func (c *tripCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.trips
	c.trips = nil
	return out
}

// openTraced opens a sink on a one-connection pool traced by a
// tripCounter.
func openTraced(t *testing.T) (*Sink, *tripCounter) {
	t.Helper()
	schema := newTestSchema(t)
	pcfg, err := pgxpool.ParseConfig(schemaDSN(t, schema))
	if err != nil {
		t.Fatal(err)
	}
	tc := &tripCounter{}
	pcfg.ConnConfig.Tracer = tc
	pcfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := Open(t.Context(), Config{Pool: pool, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, tc
}

// An Apply costs fewer round trips than the unfenced baseline doing the
// same writes (BEGIN, the effect's, COMMIT: three). A tenure's first
// Apply through a Sink costs as many: BEGIN and the fence read go in one
// pipeline, the checked advance and COMMIT in another. Its later ones
// (on the view its last commit left, view.go) cost two: BEGIN goes with
// the effect's first statement. A fenced batch costs BEGIN with the read
// and the rollback, and runs nothing.
func TestApplyRoundTrips(t *testing.T) {
	t.Parallel()
	s, tc := openTraced(t)
	tok := tokenOf(testScope(t), 1, "m")
	mustClaim(t, s, tok)
	effect := func(ctx context.Context, tx pgx.Tx, _ int) error {
		_, err := tx.Exec(ctx, upsertKV, "k", "v")
		return err
	}
	// The first use of each statement on the connection prepares it.
	var next int64
	for range 2 {
		if _, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{next}}, effect); err != nil {
			t.Fatal(err)
		}
		next++
	}
	if err := unfenced.Postgres(t.Context(), s.Pool(), 1, effect); err != nil {
		t.Fatal(err)
	}
	tc.take()

	if err := unfenced.Postgres(t.Context(), s.Pool(), 1, effect); err != nil {
		t.Fatal(err)
	}
	base := tc.take()
	if _, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{next}}, effect); err != nil {
		t.Fatal(err)
	}
	next++
	onView := tc.take()
	mustClaim(t, s, tok) // a claim drops the view: the next Apply reads the fence first
	tc.take()
	if _, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{next}}, effect); err != nil {
		t.Fatal(err)
	}
	next++
	fresh := tc.take()
	t.Logf("unfenced:     %q", base)
	t.Logf("on the view:  %q", onView)
	t.Logf("after claim:  %q", fresh)
	if len(base) != 3 {
		t.Fatalf("the unfenced baseline made %d round trips, want 3: %q", len(base), base)
	}
	if want := []string{"batch: begin | INSERT INTO", "batch: WITH adv | commit"}; !slices.Equal(onView, want) {
		t.Errorf("Apply on the view made %q, want %q", onView, want)
	}
	if len(fresh) != len(base) {
		t.Fatalf("the first Apply after a claim made %d round trips, want %d (the baseline's): %q", len(fresh), len(base), fresh)
	}
	if want := "batch: begin | SELECT epoch"; fresh[0] != want {
		t.Errorf("the first Apply's first round trip = %q, want %q", fresh[0], want)
	}
	if last := fresh[len(fresh)-1]; !strings.HasPrefix(last, "batch: WITH adv") || !strings.HasSuffix(last, "| commit") {
		t.Errorf("the first Apply's last round trip = %q, want the checked advance and commit", last)
	}

	// A stale token: BEGIN with the read, the rollback; no effect.
	newer := tokenOf(tok.Scope(), 2, "n")
	mustClaim(t, s, newer)
	tc.take()
	_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{next + 1}}, func(context.Context, pgx.Tx, int) error {
		t.Error("the effect of a fenced batch ran")
		return nil
	})
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored != newer {
		t.Fatalf("stale Apply: %v, want a FencedError with stored %s", err, newer)
	}
	if trips := tc.take(); len(trips) != 2 {
		t.Errorf("a refused Apply made %d round trips, want 2: %q", len(trips), trips)
	}
}

// A batch fenced after its early read (a claim lands while the handler
// runs) is refused by the checked advance, its COMMIT skipped: the
// FencedError names the stored holder, read after the rollback.
func TestCheckedAdvanceRefusesAfterTheRead(t *testing.T) {
	t.Parallel()
	s, tc := openTraced(t)
	old, newer := tokenOf(testScope(t), 1, "old"), tokenOf(testScope(t), 2, "new")
	mustClaim(t, s, old)
	other := openSink(t, s.schema, nil) // the newer tenure's process
	_, err := s.Apply(t.Context(), old, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx pgx.Tx, _ int) error {
		if _, err := tx.Exec(ctx, upsertKV, "k", "stale"); err != nil {
			return err
		}
		_, err := other.Claim(ctx, newer, sink.Observed{})
		return err
	})
	var fe *sink.FencedError
	if !errors.As(err, &fe) || fe.Stored != newer || fe.Offered != old {
		t.Fatalf("Apply fenced mid-batch: %v, want a FencedError with stored %s", err, newer)
	}
	trips := tc.take()
	if last := trips[len(trips)-1]; last != "batch: rollback | SELECT epoch" {
		t.Errorf("the last round trip of a refused batch = %q, want the rollback and the read", last)
	}
	if _, ok, err := getKV(t.Context(), other, "k"); err != nil || ok {
		t.Fatalf("the fenced batch's write is visible (ok=%v, err=%v)", ok, err)
	}
	if next := mustClaim(t, other, newer); next != 0 {
		t.Fatalf("NextOffset after the refused batch = %d, want 0", next)
	}
}

// The tx handed to an effect is refused once its Apply has returned: the
// sink commits on the connection and returns it to the pool, where the
// kept handle would otherwise write outside any fence.
func TestHandlerTxClosedAfterApply(t *testing.T) {
	t.Parallel()
	s := openSink(t, newTestSchema(t), nil)
	tok := tokenOf(testScope(t), 1, "m")
	mustClaim(t, s, tok)
	var kept pgx.Tx
	if _, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0}}, func(ctx context.Context, tx pgx.Tx, _ int) error {
		kept = tx
		_, err := tx.Exec(ctx, upsertKV, "k", "in")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	checks := map[string]error{}
	_, checks["Exec"] = kept.Exec(ctx, upsertKV, "k", "late")
	_, checks["Query"] = kept.Query(ctx, "SELECT 1")
	checks["QueryRow"] = kept.QueryRow(ctx, "SELECT 1").Scan(new(int))
	checks["SendBatch"] = kept.SendBatch(ctx, &pgx.Batch{QueuedQueries: []*pgx.QueuedQuery{{SQL: "SELECT 1"}}}).Close()
	_, checks["CopyFrom"] = kept.CopyFrom(ctx, pgx.Identifier{"kv"}, []string{"k", "v"}, pgx.CopyFromRows([][]any{{"c", "late"}}))
	_, checks["Prepare"] = kept.Prepare(ctx, "late", "SELECT 1")
	_, checks["Begin"] = kept.Begin(ctx)
	for name, err := range checks {
		if !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("%s on the tx of a returned Apply: %v, want pgx.ErrTxClosed", name, err)
		}
	}
	if v, _, _ := getKV(ctx, s, "k"); v != "in" {
		t.Fatalf("kv(k) = %q, want in (the late write landed)", v)
	}
	if _, ok, _ := getKV(ctx, s, "c"); ok {
		t.Fatal("the late copy landed")
	}
}
