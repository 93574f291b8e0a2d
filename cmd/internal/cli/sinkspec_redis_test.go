package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testredis"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/redis"
)

func TestParseRedisSinkSpec(t *testing.T) {
	spec, err := parseSinkSpec("redis://alice:secret@127.0.0.1:6379/2?prefix=ledger-a")
	if err != nil {
		t.Fatal(err)
	}
	if spec.kind != "redis" || spec.prefix != "ledger-a" || strings.Contains(spec.dsn, "prefix") {
		t.Fatalf("spec = %+v, want kind redis, prefix ledger-a, the URL without the prefix", spec)
	}
	if got, want := spec.String(), "redis://127.0.0.1:6379/2?prefix=ledger-a"; got != want {
		t.Fatalf("String() = %q, want %q (no password)", got, want)
	}
	_, err = parseSinkSpec("redis://alice:secret@127.0.0.1:6379/2?nonsense=1")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("a bad Redis URL: %v, want an error without the password", err)
	}
	if dsn, path, u, err := LedgerSink("redis://127.0.0.1:6379/0?prefix=x"); err != nil || dsn != "" || path != "" || u != "redis://127.0.0.1:6379/0" {
		t.Fatalf("LedgerSink(redis://…) = %q, %q, %q, %v; want the Redis URL without its prefix", dsn, path, u, err)
	}
}

// fences list, fences history and dlq list read a Redis sink.
func TestAdminCommandsOnRedis(t *testing.T) {
	u := testredis.URL(t)
	prefix := testredis.Prefix()
	ctx := t.Context()
	s, err := redis.Open(ctx, redis.Config{URL: u, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Drop(context.Background()); s.Close() })
	tok := epochs.Token{Group: "ledger-g", Topic: "ledger", Partition: 2, Epoch: 7, Member: "worker-a"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1, 2}}, func(ctx context.Context, tx *redis.Tx, i int) error { tx.IncrBy("n", 1); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 3, Reason: "permanent", Error: "bad payload", Value: []byte("{")}); err != nil {
		t.Fatal(err)
	}
	spec := u + "?prefix=" + prefix
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"fences", "list", "--sink", spec}, []string{"ledger-g", "worker-a", "4"}},
		{[]string{"fences", "history", "--sink", spec, "--group", "ledger-g", "--topic", "ledger", "--partition", "2"}, []string{"claim", "worker-a"}},
		{[]string{"dlq", "list", "--sink", spec}, []string{"permanent", "ledger-g"}},
	} {
		out, stderr, err := runCLI(t, nil, c.args...)
		if err != nil {
			t.Fatalf("%v: %v (%s)", c.args, err, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Fatalf("%v: output lacks %q:\n%s", c.args, w, out)
			}
		}
	}
}
