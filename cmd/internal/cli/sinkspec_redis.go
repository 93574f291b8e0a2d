package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/examples/ledger"

	"github.com/workrouter/workrouter/sink/redis"
	"github.com/workrouter/workrouter/sink/redis/redisprom"
)

// parseRedisSpec parses a --sink redis://[USER:PASSWORD@]HOST[:PORT][/DB][?prefix=NAME]
// (or rediss://): the server as go-redis reads it, and the sink's key
// prefix (default redis.DefaultPrefix). Errors never repeat a password.
func parseRedisSpec(s string) (sinkSpec, error) {
	u, err := url.Parse(s)
	if err != nil {
		return sinkSpec{}, fmt.Errorf("--sink: not a valid Redis URL (redis://HOST:PORT/DB)")
	}
	q := u.Query()
	prefix := q.Get("prefix")
	q.Del("prefix")
	u.RawQuery = q.Encode()
	if _, err := goredis.ParseURL(u.String()); err != nil {
		return sinkSpec{}, fmt.Errorf("--sink: not a valid Redis URL (redis://HOST:PORT/DB[?prefix=NAME]): %s", redactRedis(err.Error(), u))
	}
	return sinkSpec{kind: "redis", dsn: u.String(), prefix: prefix}, nil
}

// redactRedis removes u's password from msg.
func redactRedis(msg string, u *url.URL) string {
	if pw, ok := u.User.Password(); ok && pw != "" {
		return strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}

// redisString describes a Redis sink without its password.
func (s sinkSpec) redisString() string {
	u, err := url.Parse(s.dsn)
	if err != nil {
		return "redis"
	}
	u.User = nil
	out := u.Scheme + "://" + u.Host + u.Path
	if s.prefix != "" {
		out += "?prefix=" + url.QueryEscape(s.prefix)
	}
	return out
}

// openRedis opens the Redis sink spec names; its own series go on reg
// (package redisprom), if not nil.
func openRedis(ctx context.Context, spec sinkSpec, reg prometheus.Registerer, logger *slog.Logger, window int64) (*redis.Sink, error) {
	s, err := redis.Open(ctx, redis.Config{URL: spec.dsn, Prefix: spec.prefix, Logger: logger, DedupeWindow: window})
	if err != nil {
		return nil, fmt.Errorf("sink %s: %w", spec, err)
	}
	if reg != nil {
		if _, err := redisprom.Register(reg, s); err != nil {
			s.Close()
			return nil, fmt.Errorf("sink %s: %w", spec, err)
		}
	}
	return s, nil
}

// serveRedisWorker runs the worker of RunWorker on a Redis sink: the
// ledger example only (the invoices example is SQL).
func serveRedisWorker(cmd *cobra.Command, f WorkerFlags, c Conn, spec sinkSpec, protocol consumer.Protocol, reg *prometheus.Registry, logger *slog.Logger, h *WorkerHooks) error {
	if f.example != "ledger" {
		return fmt.Errorf("--example %s: on a Redis sink the worker runs the ledger example only", f.example)
	}
	s, err := openRedis(cmd.Context(), spec, reg, logger, f.dedupeWindow)
	if err != nil {
		return err
	}
	defer s.Close()
	return serveWorker[*redis.Tx](cmd, f, c, spec, protocol, "redis", s, ledger.RedisHandlers(), reg, logger, h.redisHook(), h.lagEvery(), nil)
}
