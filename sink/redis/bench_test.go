package redis

import (
	"context"
	"errors"
	"github.com/workrouter/workrouter/sink"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
)

// The fenced unit three ways, for the choice the package documentation
// explains: the sink's Lua script (one round trip per batch), the same
// check with WATCH/MULTI/EXEC on the fence key (WATCH + HMGET, then
// MULTI … EXEC: two round trips), and no fence at all (one MULTI per
// batch, the bench baseline). Each batch is benchBatch records writing
// INCRBY on one of 16 accounts and RPUSH of a posting.
//
//	go test ./sink/redis -run '^$' -bench 'Unit' -benchtime 2000x -count 5

const benchBatch = 100

func benchRecord(off int64) (acct, post string) {
	return "acct-" + strconv.FormatInt(off%16, 10), "p" + strconv.FormatInt(off, 10)
}

func BenchmarkUnitLuaScript(b *testing.B) {
	s := openSink(b, "", Config{})
	ctx := context.Background()
	tok := epochs.Token{Group: "bench", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, emptyObs); err != nil {
		b.Fatal(err)
	}
	offs := make([]int64, benchBatch)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range offs {
			offs[i] = int64(n*benchBatch + i)
		}
		if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: offs}, func(ctx context.Context, tx *Tx, i int) error {
			acct, post := benchRecord(offs[i])
			tx.IncrBy(acct, 1)
			tx.RPush("postings:"+acct, post)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkUnitWatchMulti(b *testing.B) {
	s := openSink(b, "", Config{})
	ctx := context.Background()
	tok := epochs.Token{Group: "bench", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, emptyObs); err != nil {
		b.Fatal(err)
	}
	fk := s.fenceKey(tok.Scope())
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		base := int64(n * benchBatch)
		err := s.rdb.Watch(ctx, func(tx *goredis.Tx) error {
			f, err := tx.HMGet(ctx, fk, "e", "m", "n").Result()
			if err != nil {
				return err
			}
			if !tok.Holds(holder(tok.Scope(), true, f[0], f[1])) || i64(f[2]) != base {
				return errors.New("fenced")
			}
			_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				for i := range int64(benchBatch) {
					acct, post := benchRecord(base + i)
					p.IncrBy(ctx, s.Key(acct), 1)
					p.RPush(ctx, s.Key("postings:"+acct), post)
				}
				p.HSet(ctx, fk, "n", base+benchBatch)
				return nil
			})
			return err
		}, fk)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkUnitUnfencedMulti(b *testing.B) {
	s := openSink(b, "", Config{})
	ctx := context.Background()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		base := int64(n * benchBatch)
		if _, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			for i := range int64(benchBatch) {
				acct, post := benchRecord(base + i)
				p.IncrBy(ctx, s.Key(acct), 1)
				p.RPush(ctx, s.Key("postings:"+acct), post)
			}
			p.Set(ctx, s.Key("next"), base+benchBatch, 0)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "records/s")
}

var emptyObs = sink.Observed{}

// BenchmarkUnitW2Shape is the bench's W2-redis unit without Kafka: batches
// of 256 records, one SET each, applied with an Apply with IDs (command IDs of
// the router's shape), against BenchmarkUnitB3Shape, the same SETs in one
// MULTI per batch.
func BenchmarkUnitW2Shape(b *testing.B) {
	s := openSink(b, "", Config{})
	ctx := context.Background()
	tok := epochs.Token{Group: "bench", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, emptyObs); err != nil {
		b.Fatal(err)
	}
	const batch = 256
	offs := make([]int64, batch)
	ids := make([]string, batch)
	val := strings.Repeat("x", 100)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range offs {
			offs[i] = int64(n*batch + i)
			ids[i] = "0193a1b2-c3d4-7e5f-8a9b-" + strconv.FormatInt(offs[i], 10)
		}
		if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: offs, IDs: ids}, func(ctx context.Context, tx *Tx, i int) error {
			tx.Set("k"+strconv.FormatInt(offs[i]%10000, 10), val)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkUnitB3Shape(b *testing.B) {
	s := openSink(b, "", Config{})
	ctx := context.Background()
	const batch = 256
	val := strings.Repeat("x", 100)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		if _, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			for i := range int64(batch) {
				p.Set(ctx, s.Key("k"+strconv.FormatInt((int64(n*batch)+i)%10000, 10)), val, 0)
			}
			p.Set(ctx, s.Key("next"), n*batch+batch, 0)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
}

// What Lua's argument passing costs the server, for the package
// documentation's figures: 256 key/value pairs per call as MSET inside a
// script (UnitLuaMSET), passed to a script that only counts them
// (UnitLuaCount), and as one MSET in a MULTI (UnitMultiMSET). Read the
// server's CPU (INFO cpu) around each.

var (
	luaMSET  = goredis.NewScript("#!lua\nredis.call('MSET', unpack(ARGV))\nreturn 1")
	luaCount = goredis.NewScript("#!lua\nreturn #ARGV")
)

func msetPairs(s *Sink, n int) []any {
	val := strings.Repeat("x", 100)
	args := make([]any, 0, 512)
	for i := range 256 {
		args = append(args, s.Key("k"+strconv.Itoa((n*256+i)%10000)), val)
	}
	return args
}

func BenchmarkUnitLuaMSET(b *testing.B) {
	s := openSink(b, "", Config{})
	ctx := context.Background()
	for n := 0; n < b.N; n++ {
		if err := luaMSET.Run(ctx, s.rdb, nil, msetPairs(s, n)...).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnitLuaCount(b *testing.B) {
	s := openSink(b, "", Config{})
	ctx := context.Background()
	for n := 0; n < b.N; n++ {
		if err := luaCount.Run(ctx, s.rdb, nil, msetPairs(s, n)...).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnitMultiMSET(b *testing.B) {
	s := openSink(b, "", Config{})
	ctx := context.Background()
	for n := 0; n < b.N; n++ {
		if _, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.MSet(ctx, msetPairs(s, n)...)
			p.Set(ctx, s.Key("next"), n, 0)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}
