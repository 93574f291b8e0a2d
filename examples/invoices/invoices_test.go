package invoices_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/examples/internal/testenv"
	"github.com/workrouter/workrouter/examples/invoices"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/postgres"
	"github.com/workrouter/workrouter/sink/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// backend is one database the example runs on, seen from the tests.
type backend[Tx any] struct {
	sink     sink.Sink[Tx]
	handlers map[string]consumer.Handler[Tx]
	verify   func(context.Context) (invoices.Report, error)
	// count runs a SELECT count(*) … query.
	count func(ctx context.Context, query string) (int, error)
}

func openSQLite(t *testing.T) backend[*sqlite.Tx] {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "invoices.db")})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for range 2 { // idempotent
		if err := invoices.SetupSQLite(ctx, s.DB()); err != nil {
			t.Fatalf("SetupSQLite: %v", err)
		}
	}
	db := s.DB()
	return backend[*sqlite.Tx]{
		sink:     s,
		handlers: invoices.SQLiteHandlers(),
		verify:   func(ctx context.Context) (invoices.Report, error) { return invoices.VerifySQLite(ctx, db) },
		count: func(ctx context.Context, query string) (n int, err error) {
			err = db.QueryRowContext(ctx, query).Scan(&n)
			return n, err
		},
	}
}

func openPostgres(t *testing.T) backend[pgx.Tx] {
	t.Helper()
	ctx := context.Background()
	dsn, schema := testenv.Postgres(t)
	s, err := postgres.Open(ctx, postgres.Config{DSN: dsn, Schema: schema})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for range 2 { // idempotent
		if err := invoices.SetupPostgres(ctx, s.Pool()); err != nil {
			t.Fatalf("SetupPostgres: %v", err)
		}
	}
	pool := s.Pool()
	return backend[pgx.Tx]{
		sink:     s,
		handlers: invoices.PostgresHandlers(),
		verify:   func(ctx context.Context) (invoices.Report, error) { return invoices.VerifyPostgres(ctx, pool) },
		count: func(ctx context.Context, query string) (n int, err error) {
			err = pool.QueryRow(ctx, query).Scan(&n)
			return n, err
		},
	}
}

// runPipeline produces every (tenant, period) run-billing command three
// times through a router to an embedded broker, applies them with two group
// workers through the backend's sink, and checks that each period was
// billed exactly once, by its first command, and every repeat recorded as
// a no-op exactly once.
func runPipeline[Tx any](t *testing.T, b backend[Tx]) {
	ctx := context.Background()
	brokers := testenv.Cluster(t, invoices.Topic, 4)
	const (
		tenants = 12
		repeats = 3
	)
	periods := []string{"2026-10", "2026-11", "2026-12"}
	var cmds []router.Command
	for range repeats { // a retrying cron: every run requested again later
		for _, period := range periods {
			for i := range tenants {
				cmds = append(cmds, invoices.RunBilling(fmt.Sprintf("tenant-%02d", i), period))
			}
		}
	}
	pairs := tenants * len(periods)

	testenv.Worker(t, brokers, "invoices-test", invoices.Topic, "a", b.sink, b.handlers)
	testenv.Worker(t, brokers, "invoices-test", invoices.Topic, "b", b.sink, b.handlers)
	testenv.Produce(t, brokers, invoices.Topic, cmds)

	var rep invoices.Report
	testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d commands applied", len(cmds)), func() (bool, error) {
		var err error
		rep, err = b.verify(ctx)
		return rep.Runs+rep.DuplicateRuns >= len(cmds), err
	})
	want := invoices.Report{Runs: pairs, DuplicateRuns: len(cmds) - pairs, Tenants: tenants}
	if rep != want {
		t.Errorf("report = %+v, want %+v", rep, want)
	}
	// The run is the first command of its pair; the skips are the repeats.
	if n, err := b.count(ctx, `SELECT count(*) FROM invoice_skips s JOIN invoice_runs r
		ON r.tenant = s.tenant AND r.period = s.period WHERE s.topic <> r.topic OR s.part <> r.part OR s.off <= r.off`); err != nil || n != 0 {
		t.Errorf("%d skips not after their pair's run (err %v)", n, err)
	}
	if n, err := b.count(ctx, `SELECT count(*) FROM invoice_runs WHERE epoch < 0 OR member = ''`); err != nil || n != 0 {
		t.Errorf("%d runs without their tenure token (err %v)", n, err)
	}
	t.Logf("%d commands: %+v", len(cmds), rep)
}

func TestPipelineSQLite(t *testing.T)   { runPipeline(t, openSQLite(t)) }
func TestPipelinePostgres(t *testing.T) { runPipeline(t, openPostgres(t)) }

// runFencing plays a scheduler that is paused past its session timeout
// right before it bills: the partition is claimed by a successor at a
// higher epoch, then the paused scheduler wakes up and inserts its run.
// The sink must reject that late insert (sink.ErrFenced) with no row
// written, and the successor must bill the period once.
func runFencing[Tx any](t *testing.T, b backend[Tx]) {
	ctx := context.Background()
	paused := epochs.Token{Group: "invoices-workers", Topic: invoices.Topic, Partition: 2, Epoch: 1, Member: "paused"}
	successor := paused
	successor.Epoch, successor.Member = 2, "successor"

	if _, err := b.sink.Claim(ctx, paused, sink.Observed{}); err != nil {
		t.Fatalf("claim epoch 1: %v", err)
	}
	// The paused scheduler's session expires; the partition moves on.
	if _, err := b.sink.Claim(ctx, successor, sink.Observed{}); err != nil {
		t.Fatalf("claim epoch 2: %v", err)
	}

	cmds := []router.Command{invoices.RunBilling("acme", "2026-11")}
	_, err := testenv.Apply(ctx, b.sink, paused, b.handlers, []int64{0}, cmds)
	if !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("late run of epoch 1 after the epoch 2 claim: err = %v, want sink.ErrFenced", err)
	}
	if rep, err := b.verify(ctx); err != nil || rep != (invoices.Report{}) {
		t.Fatalf("after the fenced insert: %+v (err %v), want no rows", rep, err)
	}

	if _, err := testenv.Apply(ctx, b.sink, successor, b.handlers, []int64{0}, cmds); err != nil {
		t.Fatalf("epoch 2 run: %v", err)
	}
	if n, err := b.count(ctx, `SELECT count(*) FROM invoice_runs WHERE tenant = 'acme' AND period = '2026-11' AND epoch = 2 AND member = 'successor' AND off = 0`); err != nil || n != 1 {
		t.Fatalf("successor's run: %d rows (err %v), want 1", n, err)
	}
	// The paused scheduler retries its batch: still fenced.
	if _, err := testenv.Apply(ctx, b.sink, paused, b.handlers, []int64{1}, cmds); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("retry of epoch 1: err = %v, want sink.ErrFenced", err)
	}
	if rep, err := b.verify(ctx); err != nil || rep != (invoices.Report{Runs: 1, Tenants: 1}) {
		t.Fatalf("report = %+v (err %v), want one run", rep, err)
	}
}

func TestFencingSQLite(t *testing.T)   { runFencing(t, openSQLite(t)) }
func TestFencingPostgres(t *testing.T) { runFencing(t, openPostgres(t)) }

// runRules applies commands through the sink directly: repeats within one
// batch are skips, periods are per tenant, and malformed payloads fail the
// batch.
func runRules[Tx any](t *testing.T, b backend[Tx]) {
	ctx := context.Background()
	tok := epochs.Token{Group: "g", Topic: invoices.Topic, Partition: 0, Epoch: 1, Member: "m"}
	if _, err := b.sink.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	cmds := []router.Command{
		invoices.RunBilling("acme", "2026-11"),
		invoices.RunBilling("acme", "2026-11"), // repeat in the same batch
		invoices.RunBilling("acme", "2026-12"),
		invoices.RunBilling("globex", "2026-11"),
	}
	if _, err := testenv.Apply(ctx, b.sink, tok, b.handlers, []int64{0, 1, 2, 3}, cmds); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if rep, err := b.verify(ctx); err != nil || rep != (invoices.Report{Runs: 3, DuplicateRuns: 1, Tenants: 2}) {
		t.Fatalf("report = %+v (err %v), want 3 runs, 1 duplicate, 2 tenants", rep, err)
	}

	malformed := []router.Command{
		{Key: []byte("acme"), Type: invoices.TypeRunBilling, Payload: []byte(`not json`)},
		{Key: []byte("acme"), Type: invoices.TypeRunBilling, Payload: []byte(`{}`)},
		invoices.RunBilling("acme", "2026-13"),
		invoices.RunBilling("acme", "2026-1"),
		invoices.RunBilling("acme", "November"),
	}
	for i, cmd := range malformed {
		// A good command first: the malformed one must abort the whole batch.
		batch := []router.Command{invoices.RunBilling("initech", "2027-01"), cmd}
		_, err := testenv.Apply(ctx, b.sink, tok, b.handlers, []int64{4, 5}, batch)
		if !errors.Is(err, invoices.ErrMalformed) {
			t.Errorf("malformed command %d (%s): err = %v, want ErrMalformed", i, cmd.Payload, err)
		}
	}
	if rep, err := b.verify(ctx); err != nil || rep.Runs != 3 {
		t.Fatalf("after malformed batches: %+v (err %v), want them rolled back", rep, err)
	}
}

func TestRulesSQLite(t *testing.T)   { runRules(t, openSQLite(t)) }
func TestRulesPostgres(t *testing.T) { runRules(t, openPostgres(t)) }

func TestRunBilling(t *testing.T) {
	c := invoices.RunBilling("acme", "2026-11")
	if string(c.Key) != "acme" || c.Type != "run-billing" || string(c.Payload) != `{"period":"2026-11"}` {
		t.Errorf("RunBilling = key %q type %q payload %s", c.Key, c.Type, c.Payload)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}
