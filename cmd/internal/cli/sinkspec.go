package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/postgres"
	"github.com/workrouter/workrouter/sink/redis"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// sinkSpecHelp describes the accepted --sink values, for flag usage and
// error messages.
const sinkSpecHelp = `sqlite:PATH, postgres://USER[:PASSWORD]@HOST[:PORT]/DB, redis://HOST[:PORT][/DB][?prefix=NAME] ` +
	`or kafka://[HOST:PORT[,HOST:PORT]][?events-topic=…&checkpoint-topic=…&dead-letter-topic=…] ` +
	`(the worker's ledger only, its decisions as records in transactions on the cluster of --brokers, which no hosts means; ` +
	`the fences, status and dlq commands refuse it: its checkpoint is the group's committed offset)`

// sinkSpec is a parsed --sink value: "sqlite:PATH" or "postgres://…"/"postgresql://…".
type sinkSpec struct {
	kind   string // "sqlite" | "postgres" | "redis"
	path   string // sqlite: the database file
	dsn    string // postgres: the connection string, as given; redis: the server URL without prefix
	prefix string // redis: the sink's key prefix ("" for the default)
	kafka  kafkaSinkSpec
}

// schema is the PostgreSQL schema of the sink's tables: the search_path
// the DSN names, if any (the worker and the admin commands agree on it, so
// that the sink's tables and the examples' live together).
func (s sinkSpec) schema() string {
	if pc, err := pgx.ParseConfig(s.dsn); err == nil {
		return pc.RuntimeParams["search_path"]
	}
	return ""
}

// String describes the sink for messages, without secrets: the SQLite path,
// or the PostgreSQL server, database, user and schema (the search_path, if
// the DSN names one; never the password).
func (s sinkSpec) String() string {
	switch s.kind {
	case "sqlite":
		return "sqlite:" + s.path
	case "postgres":
		cfg, err := pgx.ParseConfig(s.dsn)
		if err != nil {
			return "postgres"
		}
		out := fmt.Sprintf("postgres://%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
		if schema := s.schema(); schema != "" {
			out += "?search_path=" + url.QueryEscape(schema)
		}
		return out
	case "redis":
		return s.redisString()
	case "kafka":
		return s.kafkaString()
	}
	return s.kind
}

// parseSinkSpec parses a --sink value. The errors are one line, name the
// flag, and never repeat a password.
func parseSinkSpec(s string) (sinkSpec, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return sinkSpec{}, fmt.Errorf("--sink is empty: want %s", sinkSpecHelp)
	}
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok || scheme == "" {
		return sinkSpec{}, fmt.Errorf("--sink %q has no kind: want %s (for an SQLite file, write sqlite:%s)", s, sinkSpecHelp, s)
	}
	switch strings.ToLower(scheme) {
	case "sqlite", "sqlite3":
		if strings.TrimSpace(rest) == "" {
			return sinkSpec{}, fmt.Errorf("--sink %q: empty path after \"sqlite:\" (e.g. sqlite:./workrouter.db)", s)
		}
		if strings.HasPrefix(rest, "file:") {
			return sinkSpec{}, fmt.Errorf("--sink %q: give the SQLite file's path (e.g. sqlite:./workrouter.db), not a file: URI: "+
				"the commands that only read open it read-only themselves", s)
		}
		return sinkSpec{kind: "sqlite", path: rest}, nil
	case "postgres", "postgresql":
		if _, err := pgx.ParseConfig(s); err != nil {
			// pgx redacts the password in its parse errors.
			return sinkSpec{}, fmt.Errorf("--sink: not a valid PostgreSQL connection string: %w", err)
		}
		return sinkSpec{kind: "postgres", dsn: s}, nil
	case "redis", "rediss":
		return parseRedisSpec(s)
	case "kafka":
		return parseKafkaSpec(s)
	default:
		// Only the scheme is repeated: the rest may hold a password.
		return sinkSpec{}, fmt.Errorf("--sink: unknown sink kind %q: want %s", scheme, sinkSpecHelp)
	}
}

// adminSink is what the admin commands (status, fences) need from a sink.
type adminSink interface {
	fenceadmin.Lister
	fenceadmin.Resetter
	fenceadmin.Historian
}

// openAdmin opens the sink for admin use that writes (fences reset:
// Lister + Resetter + History); close it with the returned func. An SQLite
// file must already exist: an admin command never creates an empty sink at
// a mistyped path. Commands that only read use openAdminReadOnly.
func openAdmin(ctx context.Context, spec sinkSpec) (adminSink, func() error, error) {
	return openAdminSink(ctx, spec, false)
}

// openAdminSink implements openAdmin and, with readOnly, openAdminReadOnly.
func openAdminSink(ctx context.Context, spec sinkSpec, readOnly bool) (adminSink, func() error, error) {
	switch spec.kind {
	case "sqlite":
		if err := sqliteFileExists(spec); err != nil {
			return nil, nil, err
		}
		s, err := sqlite.Open(ctx, sqlite.Config{Path: spec.path, ReadOnly: readOnly})
		if err != nil {
			return nil, nil, fmt.Errorf("sink %s: %w", spec, err)
		}
		return s, s.Close, nil
	case "postgres":
		s, err := postgres.Open(ctx, postgres.Config{DSN: spec.dsn, Schema: spec.schema(), ReadOnly: readOnly})
		if err != nil {
			if errors.Is(err, postgres.ErrNoSchema) && spec.schema() != "" {
				return nil, nil, fmt.Errorf("sink %s: %w; the schema is the DSN's search_path: check it", spec, err)
			}
			return nil, nil, fmt.Errorf("sink %s: %w", spec, err)
		}
		return s, s.Close, nil
	case "redis":
		// A Redis sink has no read-only mode: the commands that only
		// read call only its reading methods.
		s, err := openRedis(ctx, spec, nil, nil, 0)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	case "kafka":
		return nil, nil, kafkaAdminError(spec)
	}
	return nil, nil, fmt.Errorf("--sink: unknown sink kind %q: want %s", spec.kind, sinkSpecHelp)
}

// Compile-time checks.
var (
	_ adminSink = (*sqlite.Sink)(nil)
	_ adminSink = (*postgres.Sink)(nil)
	_ adminSink = (*redis.Sink)(nil)
)

// filterFences keeps the fences of group and topic; an empty filter keeps
// every value.
func filterFences(fs []sink.Fence, group, topic string) []sink.Fence {
	var out []sink.Fence
	for _, f := range fs {
		if (group == "" || f.Scope.Group == group) && (topic == "" || f.Scope.Topic == topic) {
			out = append(out, f)
		}
	}
	return out
}

// LedgerSink splits the --sink value of the demo and the chaos harness into
// a PostgreSQL DSN, an SQLite path or a Redis URL (all empty when sink is
// empty: the harness's default). A Redis URL's prefix is not used: the
// harnesses run under a fresh prefix of their own, deleted at the end.
func LedgerSink(sink string) (dsn, path, redisURL string, err error) {
	if sink == "" {
		return "", "", "", nil
	}
	spec, err := parseSinkSpec(sink)
	if err != nil {
		return "", "", "", err
	}
	switch spec.kind {
	case "postgres":
		return spec.dsn, "", "", nil
	case "redis":
		return "", "", spec.dsn, nil
	case "kafka":
		return "", "", "", fmt.Errorf("--sink %s: the demo and chaos take --sink kafka alone, with no hosts or topics", spec)
	}
	return "", spec.path, "", nil
}
