package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/examples/internal/testenv"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
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
	verify   func(context.Context) (ledger.Report, error)
	// balances reads ledger_accounts.
	balances func(context.Context) (map[string]int64, error)
	// count runs a SELECT count(*) … query.
	count func(ctx context.Context, query string) (int, error)
}

func openSQLite(t *testing.T) backend[*sqlite.Tx] {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := ledger.SetupSQLite(ctx, s.DB()); err != nil {
		t.Fatalf("SetupSQLite: %v", err)
	}
	if err := ledger.SetupSQLite(ctx, s.DB()); err != nil { // idempotent
		t.Fatalf("SetupSQLite again: %v", err)
	}
	db := s.DB()
	return backend[*sqlite.Tx]{
		sink:     s,
		handlers: ledger.SQLiteHandlers(),
		verify:   func(ctx context.Context) (ledger.Report, error) { return ledger.VerifySQLite(ctx, db) },
		balances: func(ctx context.Context) (map[string]int64, error) {
			rows, err := db.QueryContext(ctx, `SELECT account, balance FROM ledger_accounts`)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			out := map[string]int64{}
			for rows.Next() {
				var a string
				var b int64
				if err := rows.Scan(&a, &b); err != nil {
					return nil, err
				}
				out[a] = b
			}
			return out, rows.Err()
		},
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
	if err := ledger.SetupPostgres(ctx, s.Pool()); err != nil {
		t.Fatalf("SetupPostgres: %v", err)
	}
	if err := ledger.SetupPostgres(ctx, s.Pool()); err != nil { // idempotent
		t.Fatalf("SetupPostgres again: %v", err)
	}
	pool := s.Pool()
	return backend[pgx.Tx]{
		sink:     s,
		handlers: ledger.PostgresHandlers(),
		verify:   func(ctx context.Context) (ledger.Report, error) { return ledger.VerifyPostgres(ctx, pool) },
		balances: func(ctx context.Context) (map[string]int64, error) {
			rows, err := pool.Query(ctx, `SELECT account, balance FROM ledger_accounts`)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			out := map[string]int64{}
			for rows.Next() {
				var a string
				var b int64
				if err := rows.Scan(&a, &b); err != nil {
					return nil, err
				}
				out[a] = b
			}
			return out, rows.Err()
		},
		count: func(ctx context.Context, query string) (n int, err error) {
			err = pool.QueryRow(ctx, query).Scan(&n)
			return n, err
		},
	}
}

// workload is a deterministic mix of deposits and withdrawals, some of which
// overdraw, with the balances and refusals a correct ledger ends with.
type workload struct {
	cmds     []router.Command
	perAcct  int
	balances map[string]int64
	refused  int
}

func newWorkload(accounts, perAcct int) workload {
	rng := rand.New(rand.NewPCG(1, 2))
	w := workload{perAcct: perAcct, balances: map[string]int64{}}
	for seq := range perAcct { // interleave accounts, as real traffic does
		for a := range accounts {
			account := fmt.Sprintf("acct-%02d", a)
			id := fmt.Sprintf("%s-%d", account, seq)
			amount := 1 + rng.Int64N(100)
			if seq == 0 || rng.IntN(2) == 0 {
				w.cmds = append(w.cmds, ledger.Deposit(account, id, seq, amount))
				w.balances[account] += amount
				continue
			}
			amount += rng.Int64N(60) // withdrawals run larger: some overdraw
			w.cmds = append(w.cmds, ledger.Withdraw(account, id, seq, amount))
			if w.balances[account] >= amount {
				w.balances[account] -= amount
			} else {
				w.refused++
			}
		}
	}
	return w
}

// runPipeline produces the workload through a router to an embedded broker,
// applies it with two group workers through the backend's sink, and checks
// the ledger: every command applied exactly once and in order, balances
// equal to postings and to the model, refusals present, nothing negative.
func runPipeline[Tx any](t *testing.T, b backend[Tx]) {
	ctx := context.Background()
	brokers := testenv.Cluster(t, ledger.Topic, 4)
	w := newWorkload(16, 40)
	if w.refused == 0 {
		t.Fatal("workload has no overdrafts; the test would not exercise refusals")
	}

	testenv.Worker(t, brokers, "ledger-test", ledger.Topic, "a", b.sink, b.handlers)
	testenv.Worker(t, brokers, "ledger-test", ledger.Topic, "b", b.sink, b.handlers)
	testenv.Produce(t, brokers, ledger.Topic, w.cmds)

	var rep ledger.Report
	testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d postings", len(w.cmds)), func() (bool, error) {
		var err error
		rep, err = b.verify(ctx)
		return rep.Postings >= len(w.cmds), err
	})

	if rep.Postings != len(w.cmds) {
		t.Errorf("postings = %d, want %d (one per command)", rep.Postings, len(w.cmds))
	}
	if rep.Duplicates != 0 {
		t.Errorf("%d command ids applied more than once", rep.Duplicates)
	}
	if rep.OrderViolations != 0 {
		t.Errorf("%d postings out of per-account order", rep.OrderViolations)
	}
	if len(rep.Mismatches) != 0 {
		t.Errorf("balances differ from their postings for %v", rep.Mismatches)
	}
	if rep.Accounts != len(w.balances) {
		t.Errorf("accounts = %d, want %d", rep.Accounts, len(w.balances))
	}
	if rep.Refused != w.refused {
		t.Errorf("refused = %d, want %d", rep.Refused, w.refused)
	}
	want := make([]int, w.perAcct)
	for i := range want {
		want[i] = i
	}
	for account := range w.balances {
		if got := rep.Seqs[account]; !slices.Equal(got, want) {
			t.Errorf("account %s: seqs applied %v, want 0..%d once each, in order", account, got, w.perAcct-1)
		}
	}
	balances, err := b.balances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for account, bal := range balances {
		if bal < 0 {
			t.Errorf("account %s has a negative balance %d", account, bal)
		}
		if bal != w.balances[account] {
			t.Errorf("account %s: balance %d, want %d", account, bal, w.balances[account])
		}
	}
	t.Logf("%d commands: %d postings, %d refused, %d accounts", len(w.cmds), rep.Postings, rep.Refused, rep.Accounts)
}

func TestPipelineSQLite(t *testing.T)   { runPipeline(t, openSQLite(t)) }
func TestPipelinePostgres(t *testing.T) { runPipeline(t, openPostgres(t)) }

// runFencing plays a ledger worker that is paused past its session
// timeout: its partition is claimed by a successor at a higher epoch, then
// the paused worker wakes up and applies a withdrawal. The sink must
// reject that late write (sink.ErrFenced) with nothing written, and the
// successor must apply the same command normally.
func runFencing[Tx any](t *testing.T, b backend[Tx]) {
	ctx := context.Background()
	paused := epochs.Token{Group: "ledger-workers", Topic: ledger.Topic, Partition: 0, Epoch: 1, Member: "paused"}
	successor := paused
	successor.Epoch, successor.Member = 2, "successor"

	if _, err := b.sink.Claim(ctx, paused, sink.Observed{}); err != nil {
		t.Fatalf("claim epoch 1: %v", err)
	}
	first := []router.Command{ledger.Deposit("alice", "d0", 0, 100)}
	if _, err := testenv.Apply(ctx, b.sink, paused, b.handlers, []int64{0}, first); err != nil {
		t.Fatalf("epoch 1 apply before the takeover: %v", err)
	}

	// The paused worker's session expires; the partition moves on.
	next, err := nextOf(b.sink.Claim(ctx, successor, sink.Observed{}))
	if err != nil {
		t.Fatalf("claim epoch 2: %v", err)
	}
	if next != 1 {
		t.Fatalf("successor resumes at %d, want 1", next)
	}

	// The paused worker wakes up and posts its next command.
	late := []router.Command{ledger.Withdraw("alice", "w1", 1, 30)}
	_, err = testenv.Apply(ctx, b.sink, paused, b.handlers, []int64{1}, late)
	if !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("late apply of epoch 1 after the epoch 2 claim: err = %v, want sink.ErrFenced", err)
	}
	if n, err := b.count(ctx, `SELECT count(*) FROM ledger_postings WHERE off <> 0`); err != nil || n != 0 {
		t.Fatalf("rows of the fenced apply: %d (err %v), want none", n, err)
	}
	if bal, err := b.balances(ctx); err != nil || bal["alice"] != 100 {
		t.Fatalf("balance after the fenced apply = %v (err %v), want alice: 100", bal, err)
	}

	// The successor applies the same command under its own token.
	if _, err := testenv.Apply(ctx, b.sink, successor, b.handlers, []int64{1}, late); err != nil {
		t.Fatalf("epoch 2 apply: %v", err)
	}
	if n, err := b.count(ctx, `SELECT count(*) FROM ledger_postings WHERE off = 1 AND epoch = 2 AND member = 'successor' AND kind = 'withdraw'`); err != nil || n != 1 {
		t.Fatalf("successor's posting: %d rows (err %v), want 1", n, err)
	}
	rep, err := b.verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Postings != 2 || rep.Duplicates != 0 || rep.OrderViolations != 0 || len(rep.Mismatches) != 0 {
		t.Fatalf("report after takeover: %+v", rep)
	}
}

func TestFencingSQLite(t *testing.T)   { runFencing(t, openSQLite(t)) }
func TestFencingPostgres(t *testing.T) { runFencing(t, openPostgres(t)) }

// runRules applies commands through the sink directly and checks the
// overdraft rule and the rejection of malformed payloads.
func runRules[Tx any](t *testing.T, b backend[Tx]) {
	ctx := context.Background()
	tok := epochs.Token{Group: "g", Topic: ledger.Topic, Partition: 1, Epoch: 1, Member: "m"}
	if _, err := b.sink.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	cmds := []router.Command{
		ledger.Withdraw("bob", "w0", 0, 10), // new account: refused
		ledger.Deposit("bob", "d1", 1, 50),
		ledger.Withdraw("bob", "w2", 2, 51), // overdraws: refused
		ledger.Withdraw("bob", "w3", 3, 50), // exactly covered
	}
	if _, err := testenv.Apply(ctx, b.sink, tok, b.handlers, []int64{0, 1, 2, 3}, cmds); err != nil {
		t.Fatalf("apply: %v", err)
	}
	rep, err := b.verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Refused != 2 || rep.Postings != 4 || len(rep.Mismatches) != 0 || rep.Accounts != 1 {
		t.Fatalf("report = %+v, want 4 postings, 2 refused, 1 account, no mismatches", rep)
	}
	if bal, err := b.balances(ctx); err != nil || bal["bob"] != 0 {
		t.Fatalf("balances = %v (err %v), want bob: 0", bal, err)
	}

	malformed := []router.Command{
		{Key: []byte("bob"), Type: ledger.TypeDeposit, Payload: []byte(`not json`)},
		{Key: []byte("bob"), Type: ledger.TypeDeposit, Payload: []byte(`{"seq":4,"amount":5}`)},
		ledger.Deposit("bob", "d4", 4, 0),
		ledger.Withdraw("bob", "w4", 4, -5),
		ledger.Deposit("bob", "d4", -1, 5),
	}
	for i, cmd := range malformed {
		// A good command first: the malformed one must abort the whole batch.
		batch := []router.Command{ledger.Deposit("bob", "ok", 4, 7), cmd}
		_, err := testenv.Apply(ctx, b.sink, tok, b.handlers, []int64{4, 5}, batch)
		if !errors.Is(err, ledger.ErrMalformed) || !errors.Is(err, consumer.ErrPermanent) {
			t.Errorf("malformed command %d (%s): err = %v, want ErrMalformed marked permanent", i, cmd.Payload, err)
		}
	}
	if rep, err := b.verify(ctx); err != nil || rep.Postings != 4 {
		t.Fatalf("after malformed batches: %+v (err %v), want them rolled back", rep, err)
	}
}

// runMalformed produces malformed commands among good ones through a
// worker with the default poison policy: each malformed command is
// dead-lettered once, with reason permanent, and every good command is
// applied once, in order, the ones after the malformed ones included. One
// payload is truncated JSON, whose decoder error (io.ErrUnexpectedEOF)
// must not pass for a lost database connection.
func runMalformed[Tx any](t *testing.T, b backend[Tx]) {
	ctx := context.Background()
	brokers := testenv.Cluster(t, ledger.Topic, 2)
	var cmds []router.Command
	malformed := map[string]bool{}
	for seq := range 6 {
		for _, account := range []string{"ann", "bob", "cyd"} {
			id := fmt.Sprintf("%s-%d", account, seq)
			cmd := ledger.Deposit(account, id, seq, 10)
			if seq == 2 {
				cmd.Payload = []byte(fmt.Sprintf(`{"id":%q,"seq":%d,"amount":0}`, id, seq))
				if account == "cyd" {
					cmd.Payload = []byte(`{"id":"cyd-2","seq":2,"amo`) // truncated JSON
				}
				malformed[id] = true
			}
			cmds = append(cmds, cmd)
		}
	}
	testenv.Worker(t, brokers, "ledger-test", ledger.Topic, "a", b.sink, b.handlers)
	testenv.Produce(t, brokers, ledger.Topic, cmds)
	store, ok := sink.As[dlq.Store](b.sink)
	if !ok {
		t.Fatal("the sink has no dead-letter store")
	}
	var dls []dlq.Letter
	testenv.WaitFor(t, 2*time.Minute, "every command applied or dead-lettered", func() (bool, error) {
		rep, err := b.verify(ctx)
		if err != nil {
			return false, err
		}
		dls, err = store.DeadLetters(ctx, dlq.Filter{})
		return rep.Postings+len(dls) >= len(cmds), err
	})
	rep, err := b.verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Postings != len(cmds)-len(malformed) || rep.Duplicates != 0 || rep.OrderViolations != 0 || len(rep.Mismatches) != 0 {
		t.Errorf("report %+v: want %d postings, no duplicates, order violations or mismatches", rep, len(cmds)-len(malformed))
	}
	for _, account := range []string{"ann", "bob", "cyd"} {
		if got := rep.Seqs[account]; !slices.Equal(got, []int{0, 1, 3, 4, 5}) {
			t.Errorf("account %s: seqs applied %v, want [0 1 3 4 5]", account, got)
		}
	}
	if len(dls) != len(malformed) {
		t.Fatalf("%d dead letters, want %d: %+v", len(dls), len(malformed), dls)
	}
	for _, d := range dls {
		if d.Record.Reason != consumer.ReasonPermanent || d.Record.Attempts != 1 || d.State != dlq.Open ||
			!malformed[fmt.Sprintf("%s-2", d.Record.Key)] {
			t.Errorf("dead letter %+v: want an open, permanent dead letter of a malformed command, tried once", d)
		}
	}
}

func TestMalformedDeadLetteredSQLite(t *testing.T)   { runMalformed(t, openSQLite(t)) }
func TestMalformedDeadLetteredPostgres(t *testing.T) { runMalformed(t, openPostgres(t)) }

func TestRulesSQLite(t *testing.T)   { runRules(t, openSQLite(t)) }
func TestRulesPostgres(t *testing.T) { runRules(t, openPostgres(t)) }

func TestCommands(t *testing.T) {
	d := ledger.Deposit("acct-1", "id-1", 3, 250)
	if string(d.Key) != "acct-1" || d.Type != "deposit" || string(d.Payload) != `{"id":"id-1","seq":3,"amount":250}` {
		t.Errorf("Deposit = key %q type %q payload %s", d.Key, d.Type, d.Payload)
	}
	w := ledger.Withdraw("acct-1", "id-2", 4, 100)
	if string(w.Key) != "acct-1" || w.Type != "withdraw" || string(w.Payload) != `{"id":"id-2","seq":4,"amount":100}` {
		t.Errorf("Withdraw = key %q type %q payload %s", w.Key, w.Type, w.Payload)
	}
	for _, c := range []router.Command{d, w} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", c.Type, err)
		}
	}
}

// TestVerifyDetects writes broken ledger rows directly (not through the
// handlers) and checks that Verify reports each kind of violation, so that
// the pipeline tests' clean reports are not vacuous.
func TestVerifyDetects(t *testing.T) {
	ctx := context.Background()
	b := openSQLite(t)
	db := b.sink.(*sqlite.Sink).DB()
	for _, stmt := range []string{
		`INSERT INTO ledger_accounts VALUES ('ok', 7), ('off', 5), ('orphan', 3)`,
		`INSERT INTO ledger_postings (topic, part, off, account, id, seq, kind, amount, epoch, member) VALUES
			('ledger', 0, 0, 'ok', 'a', 0, 'deposit', 10, 1, 'm'),
			('ledger', 0, 1, 'ok', 'a', 1, 'withdraw', 3, 1, 'm'),
			('ledger', 0, 2, 'ok', 'c', 1, 'refused', 99, 1, 'm'),
			('ledger', 0, 3, 'off', 'd', 0, 'deposit', 10, 1, 'm'),
			('ledger', 0, 4, 'nobalance', 'e', 0, 'deposit', 1, 1, 'm')`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	rep, err := ledger.VerifySQLite(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Report{
		Accounts: 3, Postings: 5, Refused: 1,
		Duplicates:      1, // id "a" twice
		OrderViolations: 1, // ok: seq 1 after seq 1
		Mismatches:      []string{"nobalance", "off", "orphan"},
	}
	if rep.Accounts != want.Accounts || rep.Postings != want.Postings || rep.Refused != want.Refused ||
		rep.Duplicates != want.Duplicates || rep.OrderViolations != want.OrderViolations ||
		!slices.Equal(rep.Mismatches, want.Mismatches) {
		t.Errorf("report = %+v, want %+v", rep, want)
	}
	if got := rep.Seqs["ok"]; !slices.Equal(got, []int{0, 1, 1}) {
		t.Errorf("seqs of ok = %v, want [0 1 1]", got)
	}
}
