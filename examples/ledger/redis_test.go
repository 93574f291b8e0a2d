package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/redis"
)

// openRedis opens a Redis sink under a fresh prefix on the test server
// (WORKROUTER_TEST_REDIS, default redis://127.0.0.1:6379/0), skipping
// without one (failing under CI=true), and drops its keys at the end.
func openRedis(t *testing.T) *redis.Sink {
	t.Helper()
	u := os.Getenv("WORKROUTER_TEST_REDIS")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s, err := redis.Open(t.Context(), redis.Config{URL: u, Prefix: "wr-test-ledger-" + hex.EncodeToString(b[:])})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Redis test server at %s: %v; CI=true, so this fails instead of skipping", u, err)
		}
		t.Skipf("Redis test server unreachable at %s (set WORKROUTER_TEST_REDIS): %v", u, err)
	}
	t.Cleanup(func() {
		if err := s.Drop(context.Background()); err != nil {
			t.Errorf("drop: %v", err)
		}
		s.Close()
	})
	return s
}

// The ledger's handlers on Redis: deposits, a refused overdraft, a
// withdrawal that reads the balance a deposit of the same batch left, and
// a stale tenure's batch refused whole.
func TestRedisHandlers(t *testing.T) {
	s := openRedis(t)
	ctx := t.Context()
	scope := epochs.Scope{Group: "ledger", Topic: Topic, Partition: 0}
	tok := epochs.Token{Group: scope.Group, Topic: scope.Topic, Partition: 0, Epoch: 1, Member: "a"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	cmds := []envelope.Command{
		Deposit("acct-1", "c0", 0, 100),
		Withdraw("acct-1", "c1", 1, 150), // refused: 100 < 150
		Deposit("acct-1", "c2", 2, 100),
		Withdraw("acct-1", "c3", 3, 150), // 200 >= 150 within the batch
	}
	h := RedisHandlers()
	apply := func(tok epochs.Token, from int) error {
		offs := make([]int64, len(cmds)-from)
		for i := range offs {
			offs[i] = int64(from + i)
		}
		_, err := s.Apply(ctx, tok, sink.Batch{Offsets: offs}, func(ctx context.Context, tx *redis.Tx, i int) error {
			c := cmds[from+i]
			return h[c.Type](ctx, tx, consumer.Command{Command: c, Offset: offs[i], Token: tok})
		})
		return err
	}
	if err := apply(tok, 0); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	newer := tok
	newer.Epoch, newer.Member = 2, "b"
	if _, err := s.Claim(ctx, newer, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	cmds = append(cmds, Deposit("acct-1", "c4", 4, 1000))
	if err := apply(tok, 4); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("the stale tenure's batch: %v, want sink.ErrFenced", err)
	}
	r, err := VerifyRedis(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if r.Postings != 4 || r.Refused != 1 || r.Duplicates != 0 || r.OrderViolations != 0 || len(r.Mismatches) != 0 {
		t.Fatalf("report %+v: want 4 postings, 1 refused, no duplicate, order violation or mismatch", r)
	}
	if v, _ := s.Client().Get(ctx, s.Key(redisBalance+"acct-1")).Result(); v != "50" {
		t.Fatalf("balance %q, want 50", v)
	}
}
