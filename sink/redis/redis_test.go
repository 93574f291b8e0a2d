package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/internal/testredis"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sinktest"
)

// openSink opens a sink on the test server under prefix (a fresh one if
// empty), dropping its keys and closing it when the test ends.
func openSink(tb testing.TB, prefix string, cfg Config) *Sink {
	tb.Helper()
	cfg.URL = testredis.URL(tb)
	if prefix == "" {
		prefix = testredis.Prefix()
	}
	cfg.Prefix = prefix
	s, err := Open(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := Open(ctx, Config{URL: cfg.URL, Prefix: prefix})
		if err == nil {
			err = d.Drop(ctx)
			d.Close()
		}
		if err != nil {
			tb.Errorf("drop %s: %v", prefix, err)
		}
		s.Close()
	})
	return s
}

func getKV(ctx context.Context, s *Sink, key string) (string, bool, error) {
	v, err := s.Client().Get(ctx, s.Key(key)).Result()
	if errors.Is(err, goredis.Nil) {
		return "", false, nil
	}
	return v, err == nil, err
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness[*Tx]{
		Open: func(t testing.TB) sink.Sink[*Tx] { return openSink(t, "", Config{}) },
		Reopen: func(t testing.TB, s sink.Sink[*Tx]) sink.Sink[*Tx] {
			rs := s.(*Sink)
			if err := rs.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return openSink(t, rs.Prefix(), Config{})
		},
		Put: func(ctx context.Context, tx *Tx, key, value string) error {
			tx.Set(key, value)
			return nil
		},
		Get: func(ctx context.Context, s sink.Sink[*Tx], key string) (string, bool, error) {
			return getKV(ctx, s.(*Sink), key)
		},
		RequireGaps: true,
	})
}
