package postgres

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/unfenced"
	"github.com/workrouter/workrouter/sink"
)

// BenchmarkFenceCost splits what the fence costs a batch of one upsert
// into CPU time, per transaction, of the server process (the backend of
// the pool's one connection, from /proc/<pid>/schedstat: the server must
// run on this host) and of this process (getrusage), for four
// transactions run in blocks of 100, rotating, so that background load
// hits them alike:
//
//   - unfenced: internal/unfenced (BEGIN, the upsert, COMMIT).
//   - read: BEGIN and the fence read in one pipeline, the upsert, COMMIT —
//     the early refusal alone, no checkpoint (not a fence).
//   - read+advance: the same with a plain conditional UPDATE of the fence
//     row pipelined with COMMIT — the least a fenced batch that refuses a
//     stale token before its effects and stores its checkpoint with them
//     must run (it does not abort the COMMIT when the UPDATE matched no
//     row: not a fence either).
//   - Apply: the sink's.
//
// synchronous_commit is off, so that the fsync's wait does not drown the
// statements' work. Each reports server-µs/txn and client-µs/txn.
func BenchmarkFenceCost(b *testing.B) {
	schema := newTestSchema(b)
	dsn := schemaDSN(b, schema)
	if strings.Contains(dsn, "://") {
		dsn += "&synchronous_commit=off&pool_max_conns=1"
	} else {
		dsn += " synchronous_commit=off pool_max_conns=1"
	}
	s, err := Open(context.Background(), Config{DSN: dsn, Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	c, err := s.Pool().Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	pid := c.Conn().PgConn().PID()
	c.Release()
	server := func() time.Duration {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			b.Skipf("the server's backend is not a process of this host (%v): its CPU time cannot be read", err)
		}
		ns, err := strconv.ParseInt(strings.Fields(string(data))[0], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return time.Duration(ns)
	}
	client := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	server()
	tok := epochs.Token{Group: "bench", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		b.Fatal(err)
	}
	const keys = 1000
	for k := range keys {
		if _, err := s.Pool().Exec(ctx, upsertKV, fmt.Sprint("k", k), "v"); err != nil {
			b.Fatal(err)
		}
	}
	var next int64 // the fence row's NextOffset
	upsert := func(ctx context.Context, tx pgx.Tx, _ int) error {
		_, err := tx.Exec(ctx, upsertKV, "k"+strconv.FormatInt(next%keys, 10), "v")
		return err
	}
	onConn := func(f func(*pgx.Conn) error) error {
		c, err := s.Pool().Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		return f(c.Conn())
	}
	// read runs BEGIN and the fence read, the upsert, and then COMMIT,
	// after the plain advance when advance.
	read := func(advance bool) func() error {
		return func() error {
			return onConn(func(conn *pgx.Conn) error {
				begin := &pgx.Batch{}
				begin.BeginTx(pgx.TxOptions{})
				begin.Queue(s.q.fenceRead, tok.Group, tok.Topic, tok.Partition)
				br := conn.SendBatch(ctx, begin)
				_, err := br.Exec()
				var (
					epoch      int32
					member     string
					nx, idsVer int64
					gapped     bool
				)
				if err == nil {
					err = br.QueryRow().Scan(&epoch, &member, &nx, &idsVer, &gapped)
				}
				if cerr := br.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return err
				}
				if err := upsert(ctx, br.Tx(), 0); err != nil {
					return err
				}
				end := &pgx.Batch{}
				if advance {
					end.Queue(s.q.advance, tok.Group, tok.Topic, tok.Partition, tok.Epoch, tok.Member, nx, nx+1)
					next++
				}
				end.Queue("commit")
				return conn.SendBatch(ctx, end).Close()
			})
		}
	}
	shapes := []struct {
		name string
		run  func() error
	}{
		{"unfenced", func() error { return unfenced.Postgres(ctx, s.Pool(), 1, upsert) }},
		{"read", read(false)},
		{"read+advance", read(true)},
		{"Apply", func() error {
			_, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{next}}, upsert)
			next++
			return err
		}},
	}
	const block = 100
	srv := make([]time.Duration, len(shapes))
	cli := make([]time.Duration, len(shapes))
	blocks := 0
	for b.Loop() {
		for i, sh := range shapes {
			s0, c0 := server(), client()
			for range block {
				if err := sh.run(); err != nil {
					b.Fatalf("%s: %v", sh.name, err)
				}
			}
			srv[i] += server() - s0
			cli[i] += client() - c0
		}
		blocks++
	}
	for i, sh := range shapes {
		n := float64(blocks * block)
		b.ReportMetric(float64(srv[i].Nanoseconds())/1e3/n, sh.name+"-server-µs/txn")
		b.ReportMetric(float64(cli[i].Nanoseconds())/1e3/n, sh.name+"-client-µs/txn")
	}
}
