package bench

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/sink/redis"
)

// RedisMaxRecords caps the records of the Redis workloads (W2-redis,
// B3-redis), stated in the result's Name.
const RedisMaxRecords = 400_000

// openRedisBench opens a Redis sink under a fresh key prefix; skip is
// non-empty when Redis is not configured or unreachable. Close drops the
// prefix's keys.
func openRedisBench(ctx context.Context, env *Env, name string) (s *redis.Sink, skip string, err error) {
	if env.RedisURL == "" {
		return nil, "no Redis URL configured (--redis)", nil
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err = redis.Open(octx, redis.Config{URL: env.RedisURL, Prefix: UniqueName("wrbench-" + name)})
	if err != nil {
		return nil, fmt.Sprintf("Redis unreachable: %v", err), nil
	}
	return s, "", nil
}

func closeRedisBench(s *redis.Sink) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = s.Drop(ctx)
	s.Close()
}

// W2Redis is W2 on Redis: the worker applies one SET per command (key =
// record key, value = payload and offset) through the fenced Redis sink,
// deduplication on, MaxBatch 256, over at most RedisMaxRecords records.
// It is skipped when env.RedisURL is empty or unreachable.
func W2Redis(ctx context.Context, env *Env) (Result, error) {
	const id = "W2-redis"
	n, note := capRecords(env, RedisMaxRecords)
	name := "worker, SET per command, Redis fenced sink (held WATCH, one MULTI per batch), dedupe on, batch 256" + note
	s, skip, err := openRedisBench(ctx, env, "w2")
	if skip != "" || err != nil {
		return Result{ID: id, Name: name, Skipped: skip}, err
	}
	defer closeRedisBench(s)
	h := func(ctx context.Context, tx *redis.Tx, cmd consumer.Command) error {
		tx.Set(string(cmd.Key), string(kvValue(cmd.Payload, cmd.Offset)))
		return nil
	}
	r, err := measureWorker(ctx, env, id, name, consumer.Config[*redis.Tx]{Sink: s, Handlers: handlersFor([]string{CommandType}, h)}, n)
	if err == nil {
		ids, cerr := redisIDCount(ctx, s)
		r.Extra, err = fmt.Sprintf("id_rows=%d", ids), cerr
	}
	return r, err
}

// redisIDCount counts the rows of applied command IDs the sink holds (one
// per batch applied with IDs, in its ids sorted sets).
func redisIDCount(ctx context.Context, s *redis.Sink) (int64, error) {
	var total int64
	var cursor uint64
	for {
		keys, next, err := s.Client().Scan(ctx, cursor, s.Prefix()+":ids:*", 1000).Result()
		if err != nil {
			return 0, err
		}
		for _, k := range keys {
			n, err := s.Client().ZCard(ctx, k).Result()
			if err != nil {
				return 0, err
			}
			total += n
		}
		if next == 0 {
			return total, nil
		}
		cursor = next
	}
}

// B3Redis is the baseline of W2Redis: the same SETs, one MULTI … EXEC per
// fetched partition batch of at most 256 records with the batch's
// checkpoint SET in it (no fence check, no command IDs), from a raw kgo
// goroutine-per-partition consumer.
func B3Redis(ctx context.Context, env *Env) (Result, error) {
	const id = "B3-redis"
	n, note := capRecords(env, RedisMaxRecords)
	name := "raw kgo per partition, same SETs, one MULTI per batch, Redis unfenced" + note
	s, skip, err := openRedisBench(ctx, env, "b3")
	if skip != "" || err != nil {
		return Result{ID: id, Name: name, Skipped: skip}, err
	}
	defer closeRedisBench(s)
	rdb := s.Client()
	var got int
	r, err := Measure(id, name, n, func() error {
		var err error
		got, err = runUnfenced(ctx, env, n, func(ctx context.Context, batch []*kgo.Record) error {
			_, err := rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				for _, rec := range batch {
					p.Set(ctx, s.Key(string(rec.Key)), kvValue(rec.Value, rec.Offset), 0)
				}
				last := batch[len(batch)-1]
				p.Set(ctx, s.Key(fmt.Sprintf("next:%d", last.Partition)), last.Offset+1, 0)
				return nil
			})
			return err
		})
		return err
	})
	r.Records = got
	return r, err
}
