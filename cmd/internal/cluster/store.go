package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/postgres"
	"github.com/workrouter/workrouter/sink/redis"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// ErrNotPostgres is matched by the error of Store operations that only a
// PostgreSQL sink supports.
var ErrNotPostgres = errors.New("cluster: the sink is not PostgreSQL")

// StoreConfig says which ledger sink OpenStore opens.
type StoreConfig struct {
	// Dir is a scratch directory; the SQLite file goes there when
	// SQLitePath is empty.
	Dir string
	// SQLitePath is the SQLite file; default Dir/ledger.db.
	SQLitePath string
	// PostgresDSN, if set, selects PostgreSQL, in a fresh schema named
	// SchemaPrefix_<nanos> that Close drops.
	PostgresDSN  string
	SchemaPrefix string
	// RedisURL, if set, selects Redis (redis://HOST:PORT/DB), under a
	// fresh key prefix named SchemaPrefix-<nanos> that Close deletes.
	RedisURL string
	// Kafka, if set, selects sink/kafka on the cluster at KafkaBrokers
	// (with KafkaClientOpts), on topics of the run's own (see openKafka);
	// the events topic gets KafkaPartitions partitions (default 1).
	Kafka           bool
	KafkaBrokers    []string
	KafkaClientOpts []kgo.Opt
	KafkaPartitions int32
}

// Posting is one row of ledger_postings.
type Posting struct {
	TopicID   string // the log's identity (empty before it was known)
	Partition int32
	Offset    int64
	Account   string
	ID        string
	Seq       int
	Epoch     int32
	Member    string
	// Order is the row's insert order (SQLite's rowid, PostgreSQL's
	// applied column): per account, the order the commands were applied
	// in (examples/ledger), which O checks.
	Order int64
}

// Store is the ledger sink as the harnesses see it: the workers' --sink
// value and the reads the verification needs, on SQLite or PostgreSQL. Its
// methods may be called from any goroutine; Close once, at the end.
type Store struct {
	spec, desc string
	postgres   bool
	redis      *redis.Sink // nil unless the sink is Redis
	kafka      bool        // the sink is sink/kafka

	count    func(ctx context.Context, q string, args ...any) (int, error)
	verify   func(ctx context.Context) (ledger.Report, error)
	history  func(ctx context.Context, scope epochs.Scope) ([]fenceadmin.Entry, error)
	fences   func(ctx context.Context) ([]sink.Fence, error)
	postings func(ctx context.Context) ([]Posting, error)
	exec     func(ctx context.Context, q string, args ...any) (int, error)
	close    func()
	// deadLetters is the sink's dlq.Store, nil if it has none.
	deadLetters dlq.Store
}

// OpenStore opens (and for PostgreSQL creates) the ledger sink and its
// tables. The caller must Close it.
func OpenStore(ctx context.Context, cfg StoreConfig) (*Store, error) {
	if cfg.PostgresDSN != "" {
		return openPostgres(ctx, cfg)
	}
	if cfg.RedisURL != "" {
		return openRedis(ctx, cfg)
	}
	if cfg.Kafka {
		return openKafka(ctx, cfg)
	}
	path := cfg.SQLitePath
	if path == "" {
		path = filepath.Join(cfg.Dir, "ledger.db")
	}
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		return nil, err
	}
	if err := ledger.SetupSQLite(ctx, s.DB()); err != nil {
		s.Close()
		return nil, err
	}
	return &Store{
		spec: "sqlite:" + path,
		desc: "SQLite sink " + path,
		count: func(ctx context.Context, q string, args ...any) (int, error) {
			var n int
			err := s.DB().QueryRowContext(ctx, q, args...).Scan(&n)
			return n, err
		},
		verify:  func(ctx context.Context) (ledger.Report, error) { return ledger.VerifySQLite(ctx, s.DB()) },
		history: s.History,
		fences:  s.Fences,
		postings: func(ctx context.Context) ([]Posting, error) {
			rows, err := s.DB().QueryContext(ctx, fmt.Sprintf(postingsSQL, "rowid"))
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			return scanPostings(rows)
		},
		close:       func() { s.Close() },
		deadLetters: deadLetterStore[*sqlite.Tx](s),
	}, nil
}

// deadLetterStore is s's dlq.Store, or nil.
func deadLetterStore[Tx any](s sink.Sink[Tx]) dlq.Store {
	d, _ := sink.As[dlq.Store](s)
	return d
}

// postingsSQL reads the postings; %s is the column of their insert order.
const postingsSQL = `SELECT topic_id, part, off, account, id, seq, epoch, member, %s FROM ledger_postings ORDER BY part, off`

type scanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

func scanPostings(rows scanner) ([]Posting, error) {
	var out []Posting
	for rows.Next() {
		var p Posting
		if err := rows.Scan(&p.TopicID, &p.Partition, &p.Offset, &p.Account, &p.ID, &p.Seq, &p.Epoch, &p.Member, &p.Order); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func openPostgres(ctx context.Context, cfg StoreConfig) (*Store, error) {
	prefix := cfg.SchemaPrefix
	if prefix == "" {
		prefix = "workrouter"
	}
	dsn := cfg.PostgresDSN
	schema := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("cluster: PostgreSQL %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		return nil, fmt.Errorf("cluster: creating schema %s: %w", schema, err)
	}
	spec := withParam(dsn, "search_path", schema)
	s, err := postgres.Open(ctx, postgres.Config{DSN: spec, Schema: schema})
	if err == nil {
		err = ledger.SetupPostgres(ctx, s.Pool())
	}
	dropSchema := func() {
		admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		admin.Close()
	}
	if err != nil {
		if s != nil {
			s.Close()
		}
		dropSchema()
		return nil, err
	}
	return &Store{
		spec:     spec,
		desc:     "PostgreSQL sink in schema " + schema + " (dropped at the end)",
		postgres: true,
		count: func(ctx context.Context, q string, args ...any) (int, error) {
			var n int
			err := s.Pool().QueryRow(ctx, q, args...).Scan(&n)
			return n, err
		},
		verify:  func(ctx context.Context) (ledger.Report, error) { return ledger.VerifyPostgres(ctx, s.Pool()) },
		history: s.History,
		fences:  s.Fences,
		postings: func(ctx context.Context) ([]Posting, error) {
			rows, err := s.Pool().Query(ctx, fmt.Sprintf(postingsSQL, "applied"))
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			return scanPostings(rows)
		},
		exec: func(ctx context.Context, q string, args ...any) (int, error) {
			rows, err := admin.Query(ctx, q, args...)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				n++
			}
			return n, rows.Err()
		},
		close: func() {
			s.Close()
			dropSchema()
		},
		deadLetters: deadLetterStore[pgx.Tx](s),
	}, nil
}

// withParam adds key=value to a postgres:// URL DSN's query.
func withParam(dsn, key, value string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + key + "=" + url.QueryEscape(value)
}

// Spec is the workers' --sink value.
func (s *Store) Spec() string { return s.spec }

// WorkerSpec is the --sink value for the worker named name: on PostgreSQL
// its connections carry application_name=name, so that TerminateBackends
// can find them, on Redis client_name=name, for KillRedisClients.
func (s *Store) WorkerSpec(name string) string {
	if s.redis != nil {
		return redisWorkerSpec(s.spec, name)
	}
	if !s.postgres {
		return s.spec
	}
	return withParam(s.spec, "application_name", name)
}

// Desc describes the sink for a timeline.
func (s *Store) Desc() string { return s.desc }

// Postgres reports whether the sink is PostgreSQL.
func (s *Store) Postgres() bool { return s.postgres }

// Count runs a query returning one integer ($n placeholders).
func (s *Store) Count(ctx context.Context, q string, args ...any) (int, error) {
	return s.count(ctx, q, args...)
}

// Verify reads the ledger tables back (see ledger.VerifySQLite).
func (s *Store) Verify(ctx context.Context) (ledger.Report, error) { return s.verify(ctx) }

// Claims returns the accepted claims of scope, oldest first.
func (s *Store) Claims(ctx context.Context, scope epochs.Scope) ([]Claim, error) {
	hs, err := s.history(ctx, scope)
	var out []Claim
	for _, e := range hs {
		if e.Kind == fenceadmin.KindClaim {
			out = append(out, Claim{Epoch: e.Token.Epoch, Member: e.Token.Member, Next: e.NextOffset})
		}
	}
	return out, err
}

// History returns the accepted claims and resets of scope, in order.
func (s *Store) History(ctx context.Context, scope epochs.Scope) ([]fenceadmin.Entry, error) {
	return s.history(ctx, scope)
}

// Fences returns the sink's fence rows.
func (s *Store) Fences(ctx context.Context) ([]sink.Fence, error) { return s.fences(ctx) }

// Postings returns every ledger posting, by partition and offset.
func (s *Store) Postings(ctx context.Context) ([]Posting, error) { return s.postings(ctx) }

// TerminateBackends resets the PostgreSQL connections of the worker named
// app with pg_terminate_backend, preferring those inside a transaction, and
// returns how many it terminated. inTx reports whether at least one was in
// a transaction. It fails with ErrNotPostgres on SQLite.
func (s *Store) TerminateBackends(ctx context.Context, app string) (n int, inTx bool, err error) {
	if !s.postgres {
		return 0, false, ErrNotPostgres
	}
	n, err = s.exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')`, app)
	if err != nil || n > 0 {
		return n, n > 0, err
	}
	n, err = s.exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app)
	return n, false, err
}

// ErrNoDeadLetters is matched by the error of DeadLetters when the sink
// cannot store dead letters (it has no dlq.Store).
var ErrNoDeadLetters = errors.New("cluster: the sink has no dead letters")

// DeadLetters returns the sink's dead letters of group and topic, by ID.
func (s *Store) DeadLetters(ctx context.Context, group, topic string) ([]dlq.Letter, error) {
	if s.deadLetters == nil {
		return nil, ErrNoDeadLetters
	}
	return s.deadLetters.DeadLetters(ctx, dlq.Filter{Group: group, Topic: topic})
}

// Close closes the sink (and drops a PostgreSQL schema OpenStore created).
func (s *Store) Close() { s.close() }

// Scope is the fencing scope of partition p of topic in group.
func Scope(group, topic string, p int32) epochs.Scope {
	return epochs.Scope{Group: group, Topic: topic, Partition: p}
}
