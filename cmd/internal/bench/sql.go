package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/unfenced"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/postgres"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// SQLiteMaxRecords and PostgresMaxRecords cap the records the SQL workloads
// (W2, B3) apply: one upsert per command with a synchronous commit per batch
// would take minutes for the full pre-loaded topic. The cap is stated in the
// result's Name. At 200,000 and 100,000 records (under 2 and 4 s a run),
// one full run in five had both fenced ratios just under 0.90 (0.898 and
// 0.89) while the other four gave 0.91–1.00: a run that short is moved by a
// few slow fsyncs or a PostgreSQL checkpoint. Twice the records halve what
// such a moment weighs.
const (
	SQLiteMaxRecords   = 400_000
	PostgresMaxRecords = 200_000
)

// sqlMaxBatch is the batch size of the SQL workloads, fenced and unfenced.
const sqlMaxBatch = 256

// benchKVTable is the table the SQL workloads upsert into.
const benchKVTable = "bench_kv"

// handlersFor maps every type to h.
func handlersFor[Tx any](types []string, h consumer.Handler[Tx]) map[string]consumer.Handler[Tx] {
	m := make(map[string]consumer.Handler[Tx], len(types))
	for _, t := range types {
		m[t] = h
	}
	return m
}

// measureWorker measures, as row id, a Worker with cfg on env.Topic
// (fresh group, MaxBatch 256 unless cfg sets it) from New until it has
// applied at least n records; the Result's Records is how many it had
// applied then. As in runMemWorker, the Worker's Close comes after the
// measured part: it is a graceful stop (the batches in flight finish,
// offsets are committed, the group is left) that took 130–190 ms of an
// 11-second W2n-pg run, while the raw baselines stop by cancelling their
// context in a few milliseconds.
func measureWorker[Tx any](ctx context.Context, env *Env, id, name string, cfg consumer.Config[Tx], n int) (Result, error) {
	cfg.Brokers = env.Brokers
	cfg.Topic = env.Topic
	if cfg.Group == "" {
		cfg.Group = UniqueName("bench-worker")
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = sqlMaxBatch
	}
	var w *consumer.Worker[Tx]
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	var got int64
	r, err := Measure(id, name, n, func() error {
		var err error
		if w, err = consumer.New(ctx, cfg); err != nil {
			return err
		}
		return waitUntil(ctx, func() bool { got = w.Stats().Records; return got >= int64(n) }, nil)
	})
	r.Records = int(got)
	return r, err
}

// runUnfenced consumes env.Topic from the start in a fresh group with a raw
// kgo client, one goroutine per partition, and calls apply with every
// fetched partition batch cut into chunks of at most 256 records, until n
// records were applied. It returns how many were applied. No offsets are
// committed.
func runUnfenced(ctx context.Context, env *Env, n int, apply func(ctx context.Context, batch []*kgo.Record) error) (int, error) {
	return runUnfencedBatch(ctx, env, n, sqlMaxBatch, apply)
}

// runUnfencedBatch is runUnfenced with chunks of at most maxBatch records.
func runUnfencedBatch(ctx context.Context, env *Env, n, maxBatch int, apply func(ctx context.Context, batch []*kgo.Record) error) (int, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(env.Brokers...),
		kgo.ConsumerGroup(UniqueName("bench-unfenced")),
		kgo.ConsumeTopics(env.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		applied  atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		parts    = map[int32]chan []*kgo.Record{}
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	worker := func(ch chan []*kgo.Record) {
		defer wg.Done()
		for recs := range ch {
			for len(recs) > 0 {
				k := min(len(recs), maxBatch)
				if err := apply(ctx, recs[:k]); err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					return
				}
				recs = recs[k:]
				if applied.Add(int64(k)) >= int64(n) {
					cancel()
				}
			}
		}
	}
	defer func() {
		for _, ch := range parts {
			close(ch)
		}
		wg.Wait()
	}()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.Canceled) {
				fail(err)
			}
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			ch, ok := parts[p.Partition]
			if !ok {
				ch = make(chan []*kgo.Record, 4)
				parts[p.Partition] = ch
				wg.Add(1)
				go worker(ch)
			}
			select {
			case ch <- p.Records:
			case <-ctx.Done():
			}
		})
	}
	if firstErr != nil {
		return int(applied.Load()), firstErr
	}
	if got := applied.Load(); got < int64(n) {
		return int(got), ctx.Err()
	}
	return int(applied.Load()), nil
}

// capRecords returns min(env.Records, limit) and a note for the name.
func capRecords(env *Env, limit int) (int, string) {
	if env.Records > limit {
		return limit, fmt.Sprintf(" (first %d of %d records)", limit, env.Records)
	}
	return env.Records, ""
}

// kvValue is the value both the fenced and the unfenced SQL workloads
// write: the payload followed by the record's offset, so that every upsert
// really changes its row. (SQLite skips rewriting a row whose content did
// not change; with identical payloads the unfenced baseline's commits would
// be empty and skip the fsync the fenced ones pay for their fence row.)
func kvValue(payload []byte, offset int64) []byte {
	return strconv.AppendInt(append(make([]byte, 0, len(payload)+20), payload...), offset, 10)
}

const sqliteUpsert = `INSERT INTO ` + benchKVTable + `(k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v`

// openSQLiteKV opens a fresh SQLite sink in env.TempDir with the kv table.
func openSQLiteKV(ctx context.Context, env *Env, name string) (*sqlite.Sink, error) {
	s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(env.TempDir, UniqueName(name)+".db")})
	if err != nil {
		return nil, err
	}
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE `+benchKVTable+` (k BLOB PRIMARY KEY, v BLOB NOT NULL)`); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// W2 variants: every fenced SQL workload runs through the worker, whose
// sink deduplicates command IDs (sink.Features.DedupeWindow: the worker applies
// each batch with an Apply with IDs, recording the batch's IDs and checking them
// in the same transaction) unless the variant turns deduplication off
// by wrapping the sink in applyOnly. W2-<sink> is deduplication on at
// MaxBatch 256, W2n-<sink> the same with it off; the -b1 variants are
// MaxBatch 1, over at most SQLiteBatch1Records and PostgresBatch1Records
// records (one commit, and fsync, per record).
const (
	SQLiteBatch1Records   = 4_000
	PostgresBatch1Records = 3_000
)

// PostgresBatch16Records caps the records of the PostgreSQL rows at
// MaxBatch 16 (W2n-pg-b16 and its baseline B3-pg-b16), which measure the
// fence at batch 16 (fence_vs_unfenced_pg_b16).
const PostgresBatch16Records = 32_000

// w2Variant is one W2 row: its ID, MaxBatch, whether the sink
// deduplicates, and its record cap for each sink.
type w2Variant struct {
	suffix        string // "" or "-b1"
	batch         int
	dedupe        bool
	sqlite, pgCap int
}

// w2Variants are the W2 rows of each SQL sink, in run order.
var w2Variants = []w2Variant{
	{"", sqlMaxBatch, true, SQLiteMaxRecords, PostgresMaxRecords},
	{"", sqlMaxBatch, false, SQLiteMaxRecords, PostgresMaxRecords},
	{"-b1", 1, true, SQLiteBatch1Records, PostgresBatch1Records},
	{"-b1", 1, false, SQLiteBatch1Records, PostgresBatch1Records},
	{"-b16", 16, false, 0, PostgresBatch16Records}, // PostgreSQL only: W2n-pg-b16
}

// id is the variant's row ID on sink (e.g. "W2n-sqlite-b1").
func (v w2Variant) id(sinkName string) string {
	w := "W2"
	if !v.dedupe {
		w = "W2n"
	}
	return w + "-" + sinkName + v.suffix
}

// describe is the variant's part of the row name.
func (v w2Variant) describe() string {
	d := "dedupe on"
	if !v.dedupe {
		d = "dedupe off"
	}
	return fmt.Sprintf("%s, batch %d", d, v.batch)
}

// applyOnly is the sink s declaring no dedupe window (and Unwrap, so that
// the worker finds the other capabilities as before): the worker applies
// through it per offset only, without command IDs. It is how the W2n rows
// turn deduplication off on the same sink.
type applyOnly[Tx any] struct{ s sink.Sink[Tx] }

func (a applyOnly[Tx]) Features() sink.Features {
	f := a.s.Features()
	f.DedupeWindow = 0
	return f
}

func (a applyOnly[Tx]) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return a.s.Claim(ctx, tok, obs)
}

func (a applyOnly[Tx]) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[Tx]) (sink.Result, error) {
	return a.s.Apply(ctx, tok, b, effect)
}

func (a applyOnly[Tx]) DeadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	return a.s.DeadLetter(ctx, tok, rec)
}

func (a applyOnly[Tx]) Unwrap() sink.Sink[Tx] { return a.s }

// sinkFor is s, or s wrapped in applyOnly when v turns deduplication off.
func sinkFor[Tx any](v w2Variant, s sink.Sink[Tx]) sink.Sink[Tx] {
	if v.dedupe {
		return s
	}
	return applyOnly[Tx]{s}
}

// W2SQLite is W2 on SQLite: the worker applies one upsert per command
// (k = record key, v = payload) into a kv table through the fenced SQLite
// sink, deduplication on, MaxBatch 256, over at most SQLiteMaxRecords
// records.
func W2SQLite(ctx context.Context, env *Env) (Result, error) {
	return w2SQLite(w2Variants[0])(ctx, env)
}

// w2SQLite returns the SQLite workload of v (see w2Variants).
func w2SQLite(v w2Variant) Workload {
	return func(ctx context.Context, env *Env) (Result, error) {
		id := v.id("sqlite")
		n, note := capRecords(env, v.sqlite)
		name := "worker, upsert per command, SQLite fenced sink, " + v.describe() + note
		types := []string{CommandType}
		s, err := openSQLiteKV(ctx, env, "w2")
		if err != nil {
			return Result{ID: id, Name: name}, err
		}
		defer s.Close()
		h := func(ctx context.Context, tx *sqlite.Tx, cmd consumer.Command) error {
			_, err := tx.ExecContext(ctx, sqliteUpsert, cmd.Key, kvValue(cmd.Payload, cmd.Offset))
			return err
		}
		r, err := measureWorker(ctx, env, id, name, consumer.Config[*sqlite.Tx]{Sink: sinkFor[*sqlite.Tx](v, s), MaxBatch: v.batch, Handlers: handlersFor(types, h)}, n)
		if err == nil {
			r.Extra, err = idRowsExtra(s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+sqlite.DefaultPrefix+`_command_ids`))
		}
		return r, err
	}
}

// idRowsExtra is a W2 row's Extra: "id_rows=N", the rows of command IDs
// the sink recorded (one per batch applied with deduplication on, none
// with it off), scanned from row.
func idRowsExtra(row interface{ Scan(...any) error }) (string, error) {
	var n int64
	if err := row.Scan(&n); err != nil {
		return "", fmt.Errorf("bench: count command ID rows: %w", err)
	}
	return fmt.Sprintf("id_rows=%d", n), nil
}

// B3SQLite is the baseline of W2SQLite: the same upserts on the same kind
// of database through internal/unfenced (no fence row, no offset update,
// the same BEGIN IMMEDIATE and in-process writer lock), one transaction
// per fetched partition batch of at most 256 records, from a raw kgo
// goroutine-per-partition consumer.
func B3SQLite(ctx context.Context, env *Env) (Result, error) {
	n, note := capRecords(env, SQLiteMaxRecords)
	name := "raw kgo per partition, same upserts, SQLite unfenced" + note
	s, err := openSQLiteKV(ctx, env, "b3")
	if err != nil {
		return Result{ID: "B3-sqlite", Name: name}, err
	}
	defer s.Close()
	var got int
	mu := make(chan struct{}, 1)
	r, err := Measure("B3-sqlite", name, n, func() error {
		var err error
		got, err = runUnfenced(ctx, env, n, func(ctx context.Context, batch []*kgo.Record) error {
			return unfenced.SQLite(ctx, s.DB(), mu, len(batch), func(ctx context.Context, tx *sql.Tx, i int) error {
				_, err := tx.ExecContext(ctx, sqliteUpsert, batch[i].Key, kvValue(batch[i].Value, batch[i].Offset))
				return err
			})
		})
		return err
	})
	r.Records = got
	return r, err
}

// pgKV is a PostgreSQL sink in a fresh schema with the kv table.
type pgKV struct {
	s      *postgres.Sink
	schema string
	upsert string
}

// openPostgresKV opens a PostgreSQL sink in a fresh schema; skip is
// non-empty when PostgreSQL is not configured or unreachable.
func openPostgresKV(ctx context.Context, env *Env) (kv *pgKV, skip string, err error) {
	return openPostgresKVConns(ctx, env, 0)
}

// openPostgresKVConns is openPostgresKV with a pool of at most conns
// connections (pool_max_conns in the DSN; 0 keeps the DSN's, or pgxpool's
// default of max(4, CPUs)).
func openPostgresKVConns(ctx context.Context, env *Env, conns int) (kv *pgKV, skip string, err error) {
	if env.PostgresDSN == "" {
		return nil, "no PostgreSQL DSN configured", nil
	}
	dsn := env.PostgresDSN
	if conns > 0 {
		u, perr := url.Parse(dsn)
		if perr != nil {
			return nil, "", fmt.Errorf("bench: PostgreSQL DSN: %w", perr)
		}
		q := u.Query()
		q.Set("pool_max_conns", strconv.Itoa(conns))
		u.RawQuery = q.Encode()
		dsn = u.String()
	}
	schema := strings.ReplaceAll(UniqueName("wrbench"), "-", "_")
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := postgres.Open(octx, postgres.Config{DSN: dsn, Schema: schema})
	if err != nil {
		return nil, fmt.Sprintf("PostgreSQL unreachable: %v", err), nil
	}
	kv = &pgKV{s: s, schema: schema,
		upsert: `INSERT INTO ` + schema + `.` + benchKVTable + ` (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v`}
	if _, err := s.Pool().Exec(octx, `CREATE TABLE `+schema+`.`+benchKVTable+` (k bytea PRIMARY KEY, v bytea NOT NULL)`); err != nil {
		kv.close()
		return nil, "", err
	}
	return kv, "", nil
}

// close drops the schema and closes the sink.
func (kv *pgKV) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv.s.Pool().Exec(ctx, `DROP SCHEMA `+kv.schema+` CASCADE`)
	kv.s.Close()
}

// W2Postgres is W2 on PostgreSQL: the worker applies one upsert per command
// into a kv table through the fenced PostgreSQL sink, deduplication on,
// MaxBatch 256, over at most PostgresMaxRecords records, in a fresh schema
// dropped at the end. It is skipped when env.PostgresDSN is empty or
// unreachable.
func W2Postgres(ctx context.Context, env *Env) (Result, error) {
	return w2Postgres(w2Variants[0])(ctx, env)
}

// w2Postgres returns the PostgreSQL workload of v (see w2Variants).
func w2Postgres(v w2Variant) Workload {
	return func(ctx context.Context, env *Env) (Result, error) {
		id := v.id("pg")
		n, note := capRecords(env, v.pgCap)
		name := "worker, upsert per command, PostgreSQL fenced sink, " + v.describe() + note
		kv, skip, err := openPostgresKV(ctx, env)
		if skip != "" || err != nil {
			return Result{ID: id, Name: name, Skipped: skip}, err
		}
		defer kv.close()
		types := []string{CommandType}
		h := func(ctx context.Context, tx pgx.Tx, cmd consumer.Command) error {
			_, err := tx.Exec(ctx, kv.upsert, cmd.Key, kvValue(cmd.Payload, cmd.Offset))
			return err
		}
		r, err := measureWorker(ctx, env, id, name, consumer.Config[pgx.Tx]{Sink: sinkFor[pgx.Tx](v, kv.s), MaxBatch: v.batch, Handlers: handlersFor(types, h)}, n)
		if err == nil {
			r.Extra, err = idRowsExtra(kv.s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+kv.schema+`.workrouter_command_ids`)) // the default Prefix
		}
		return r, err
	}
}

// unfencedPostgres is a sink without a fence, for W2u-pg only: Claim
// stores nothing and starts every scope at obs.LogStart; Apply runs the
// batch's effects in one transaction through internal/unfenced (the
// transaction of B3-pg), with no fence row, no holder check and no
// checkpoint. It is what the worker costs on its own: W2u-pg against
// B3-pg is the worker's plumbing (fetch queue, decode, tenure goroutine,
// Kafka commits), W2n-pg against W2u-pg the fence inside the same worker.
// It is not a sink anyone should run: a paused worker's late batch lands,
// and a restart applies the log again from its start.
type unfencedPostgres struct{ kv *pgKV }

// Features declares none.
func (u unfencedPostgres) Features() sink.Features { return sink.Features{} }

// Claim returns obs.LogStart.
func (u unfencedPostgres) Claim(_ context.Context, _ epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return sink.Checkpoint{NextOffset: obs.LogStart}, nil
}

// Apply runs effect for every record of b in one transaction.
func (u unfencedPostgres) Apply(ctx context.Context, _ epochs.Token, b sink.Batch, effect sink.Effect[pgx.Tx]) (sink.Result, error) {
	if err := unfenced.Postgres(ctx, u.kv.s.Pool(), len(b.Offsets), effect); err != nil {
		return sink.Result{}, err
	}
	return sink.Result{Applied: len(b.Offsets), NextOffset: b.Offsets[len(b.Offsets)-1] + 1}, nil
}

// DeadLetter refuses: the diagnostic sink stores nothing.
func (u unfencedPostgres) DeadLetter(context.Context, epochs.Token, sink.DeadRecord) (sink.DeadLetterResult, error) {
	return sink.DeadLetterResult{}, sink.ErrUnsupported
}

// W2uPostgres is W2n-pg's workload with the fence taken out: the same
// worker (MaxBatch 256) and handler, applying through unfencedPostgres on
// the same kind of pool, over at most PostgresMaxRecords records. It
// splits fence_vs_unfenced_pg_b256 in two: worker_vs_raw_pg (W2u-pg /
// B3-pg) and fence_in_worker_pg (W2n-pg / W2u-pg). It is skipped when
// env.PostgresDSN is empty or unreachable.
func W2uPostgres(ctx context.Context, env *Env) (Result, error) {
	const id = "W2u-pg"
	n, note := capRecords(env, PostgresMaxRecords)
	name := "worker, upsert per command, PostgreSQL without a fence (diagnostic), batch 256" + note
	kv, skip, err := openPostgresKV(ctx, env)
	if skip != "" || err != nil {
		return Result{ID: id, Name: name, Skipped: skip}, err
	}
	defer kv.close()
	h := func(ctx context.Context, tx pgx.Tx, cmd consumer.Command) error {
		_, err := tx.Exec(ctx, kv.upsert, cmd.Key, kvValue(cmd.Payload, cmd.Offset))
		return err
	}
	r, err := measureWorker(ctx, env, id, name, consumer.Config[pgx.Tx]{Sink: unfencedPostgres{kv}, Handlers: handlersFor([]string{CommandType}, h)}, n)
	if err == nil {
		var fences int64
		err = kv.s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+kv.schema+`.workrouter_fences`).Scan(&fences) // the default Prefix
		r.Extra = fmt.Sprintf("fence_rows=%d", fences)
	}
	return r, err
}

// B3Postgres is the baseline of W2Postgres: the same upserts through
// internal/unfenced on the sink's pool (no fence row, no offset update), one
// transaction per fetched partition batch of at most 256 records, from a raw
// kgo goroutine-per-partition consumer. It is skipped when env.PostgresDSN
// is empty or unreachable.
func B3Postgres(ctx context.Context, env *Env) (Result, error) {
	return b3Postgres("B3-pg", sqlMaxBatch, PostgresMaxRecords)(ctx, env)
}

// b3Postgres returns B3Postgres with transactions of at most batch
// records, over at most limit records, as row id: the baseline of the
// fenced PostgreSQL rows at that MaxBatch (B3-pg-b1, B3-pg-b16).
func b3Postgres(id string, batch, limit int) Workload {
	return func(ctx context.Context, env *Env) (Result, error) {
		return b3PostgresRun(ctx, env, id, batch, limit)
	}
}

func b3PostgresRun(ctx context.Context, env *Env, id string, batch, limit int) (Result, error) {
	n, note := capRecords(env, limit)
	name := "raw kgo per partition, same upserts, PostgreSQL unfenced" + note
	if batch != sqlMaxBatch {
		name = fmt.Sprintf("raw kgo per partition, same upserts, PostgreSQL unfenced, batch %d%s", batch, note)
	}
	kv, skip, err := openPostgresKV(ctx, env)
	if skip != "" || err != nil {
		return Result{ID: id, Name: name, Skipped: skip}, err
	}
	defer kv.close()
	var got int
	r, err := Measure(id, name, n, func() error {
		var err error
		got, err = runUnfencedBatch(ctx, env, n, batch, func(ctx context.Context, batch []*kgo.Record) error {
			return unfenced.Postgres(ctx, kv.s.Pool(), len(batch), func(ctx context.Context, tx pgx.Tx, i int) error {
				_, err := tx.Exec(ctx, kv.upsert, batch[i].Key, kvValue(batch[i].Value, batch[i].Offset))
				return err
			})
		})
		return err
	})
	r.Records = got
	return r, err
}
