package postgres

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/unfenced"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
)

// BenchmarkApply measures the cost of the fence: the same batch of N
// upserts into kv (pipelined by the handler with a pgx.Batch) applied with
// Apply under a claimed token ("fenced") and with internal/unfenced
// ("unfenced"). Each iteration runs one of each, alternating which goes
// first, and times both, so that background load, which on a shared
// machine moves a run's rate by several times, hits both alike; it
// reports both rates and their ratio (fenced/unfenced). The commit=async
// variants set synchronous_commit=off on both sides' sessions: a COMMIT
// then does not wait for the WAL's fsync, which on a machine whose disk
// other work keeps busy is most of a small batch's time, so that the
// round trips and the server's work show.
func BenchmarkApply(b *testing.B) {
	for _, commit := range []string{"sync", "async"} {
		for _, n := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("commit=%s/batch=%d", commit, n), func(b *testing.B) {
				benchApply(b, n, commit == "async")
			})
		}
	}
}

func benchApply(b *testing.B, n int, async bool) {
	schema := newTestSchema(b)
	cfg := Config{DSN: schemaDSN(b, schema), Schema: schema}
	if async {
		if strings.Contains(cfg.DSN, "://") {
			cfg.DSN += "&synchronous_commit=off"
		} else {
			cfg.DSN += " synchronous_commit=off"
		}
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if async {
		var v string
		if err := s.Pool().QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&v); err != nil || v != "off" {
			b.Fatalf("synchronous_commit = %q, %v; want off", v, err)
		}
	}
	ctx := context.Background()
	effect := pipelinedUpserts(n)
	tok := epochs.Token{Group: "bench", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		b.Fatal(err)
	}
	offsets := make([]int64, n)
	var (
		next               int64
		batches            int
		tFenced, tUnfenced time.Duration
	)
	runFenced := func() {
		for i := range offsets {
			offsets[i] = next + int64(i)
		}
		next += int64(n)
		start := time.Now()
		if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: offsets}, effect); err != nil {
			b.Fatal(err)
		}
		tFenced += time.Since(start)
	}
	runUnfenced := func() {
		start := time.Now()
		if err := unfenced.Postgres(ctx, s.Pool(), n, effect); err != nil {
			b.Fatal(err)
		}
		tUnfenced += time.Since(start)
	}
	for b.Loop() {
		if batches%2 == 0 {
			runFenced()
			runUnfenced()
		} else {
			runUnfenced()
			runFenced()
		}
		batches++
	}
	records := float64(batches * n)
	b.ReportMetric(records/tFenced.Seconds(), "fenced-rec/s")
	b.ReportMetric(records/tUnfenced.Seconds(), "unfenced-rec/s")
	b.ReportMetric(tUnfenced.Seconds()/tFenced.Seconds(), "fenced/unfenced")
}

// commandID returns a random command ID in the textual form of a UUID
// (36 bytes), as an application might choose them.
func commandID(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// BenchmarkDedup measures the cost of deduplication (docs/design.md#command-ids):
// "off" applies batches with Apply, "on" the same batches with an Apply with IDs,
// every record with a new random command ID, on a scope whose window
// (100,000 offsets by default) is already full (rows of the batch's size),
// so that every batch also prunes as many IDs as it records (the steady
// state). The effect is BenchmarkApply's (upserts pipelined in one round
// trip). "on" also reports the storage per retained ID (B/id:
// pg_total_relation_size of the table, its index and TOAST included,
// over the window's IDs, right after they were written) and the prune
// alone (prune-µs/256: deleting the rows of the next 256 IDs at the
// horizon, in a transaction rolled back).
func BenchmarkDedup(b *testing.B) {
	for _, n := range []int{1, 256} {
		for _, mode := range []string{"off", "on"} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, n), func(b *testing.B) {
				benchDedup(b, mode == "on", n)
			})
		}
	}
}

func benchDedup(b *testing.B, on bool, n int) {
	schema := newTestSchema(b)
	s := openSink(b, schema, nil)
	ctx := context.Background()
	effect := pipelinedUpserts(n)
	tok := epochs.Token{Group: "bench", Topic: "orders", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	table := pgx.Identifier{schema, "workrouter_command_ids"}.Sanitize()
	var (
		next                  int64
		bytesPerID, pruneCost float64
	)
	if on {
		// Fill the window as an Apply with IDs would have, one row per batch of
		// random IDs, in one transaction; then one Apply with IDs loads them.
		window := s.Features().DedupeWindow
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var rows pgx.Batch
		for next < window {
			k := min(int64(n), window-next)
			offs, ids := make([]int64, k), make([]string, k)
			for i := range offs {
				offs[i], ids[i] = next+int64(i), commandID(r)
			}
			rows.Queue("INSERT INTO "+table+" (grp, topic, part, first_off, last_off, ids) VALUES ($1, $2, $3, $4, $5, $6)",
				tok.Group, tok.Topic, tok.Partition, offs[0], offs[k-1], cmdids.Encode(offs[0], offs, ids))
			next += k
		}
		rows.Queue("UPDATE "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+" SET next_offset = $1, ids_version = ids_version + 1", next)
		if err := tx.SendBatch(ctx, &rows).Close(); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		var size int64
		if err := s.Pool().QueryRow(ctx, "SELECT pg_total_relation_size($1)", table).Scan(&size); err != nil {
			b.Fatal(err)
		}
		bytesPerID = float64(size) / float64(window)
		pruneCost = prunePerBatch(b, s, table, next-window)
		noop := func(context.Context, pgx.Tx, int) error { return nil }
		res, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{next}, IDs: []string{commandID(r)}}, noop)
		if err != nil || res.Applied != 1 {
			b.Fatalf("first an Apply with IDs: %+v, %v", res, err)
		}
		next = res.NextOffset
	}
	offsets, ids := make([]int64, n), make([]string, n)
	batches := 0
	b.ResetTimer()
	for b.Loop() {
		for i := range offsets {
			offsets[i], ids[i] = next+int64(i), commandID(r)
		}
		var (
			res sink.Result
			err error
		)
		if on {
			var once sink.Result
			once, err = s.Apply(ctx, tok, sink.Batch{Offsets: offsets, IDs: ids}, effect)
			res = once
		} else {
			res, err = s.Apply(ctx, tok, sink.Batch{Offsets: offsets}, effect)
		}
		if err != nil || res.Applied != n {
			b.Fatalf("%+v, %v", res, err)
		}
		next = res.NextOffset
		batches++
	}
	b.ReportMetric(float64(batches*n)/b.Elapsed().Seconds(), "records/s")
	if on {
		b.ReportMetric(bytesPerID, "B/id")
		b.ReportMetric(pruneCost, "prune-µs/256")
	}
}

// prunePerBatch returns the mean time, in µs, of deleting the rows of the
// 256 lowest command IDs of the bench scope from horizon on, as
// an Apply with IDs's prune does, in 20 transactions that are rolled back.
func prunePerBatch(b *testing.B, s *Sink, table string, horizon int64) float64 {
	b.Helper()
	ctx := context.Background()
	var total time.Duration
	const rounds = 20
	for range rounds {
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		_, err = tx.Exec(ctx, "DELETE FROM "+table+" WHERE grp = 'bench' AND topic = 'orders' AND part = 0 AND last_off < $1", horizon+256)
		total += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return float64(total.Microseconds()) / rounds
}

// BenchmarkLanes measures the lanes of a checkpoint with gaps
// (a lane's Apply, gaps.go): N lanes of one scope apply batches of 4
// records at once, each record an upsert and 1 ms of simulated I/O
// inside the transaction (W3's handler), lane l owning the offsets l,
// l+N, l+2N, …. "shared" is the sink as it is (the fence row taken FOR
// SHARE only by the check that records the spans); "serialized" makes
// each lane's first effect take the fence row FOR UPDATE, so the lanes'
// transactions run one at a time, as they would if each lane updated
// the fence row (what the shared design avoids). records/s is over all
// lanes; claim-ms is how long a Claim made halfway through took
// (it takes the fence row FOR UPDATE, waiting for the lanes that hold it).
func BenchmarkLanes(b *testing.B) {
	for _, lanes := range []int{1, 4, 16} {
		for _, mode := range []string{"shared", "serialized"} {
			b.Run(fmt.Sprintf("%s/lanes=%d", mode, lanes), func(b *testing.B) {
				benchLanes(b, mode == "serialized", lanes, 4, time.Millisecond)
			})
		}
	}
}

// BenchmarkLanesFast is BenchmarkLanes's shared lanes with a handler that
// only upserts (no simulated I/O), so that what the sink itself costs the
// server per lane batch shows: 16 lanes, batches of 4 records and of 128.
func BenchmarkLanesFast(b *testing.B) {
	for _, batch := range []int{4, 128} {
		b.Run(fmt.Sprintf("lanes=16/batch=%d", batch), func(b *testing.B) {
			benchLanes(b, false, 16, batch, 0)
		})
	}
}

// benchLanes runs lanes lanes of batches of batch records, each record an
// upsert and sleep of simulated I/O.
func benchLanes(b *testing.B, serialized bool, lanes, batch int, sleep time.Duration) {
	schema := newTestSchema(b)
	s := openSink(b, schema, func(c *Config) {
		c.DSN = strings.Replace(c.DSN, "pool_max_conns=6", fmt.Sprintf("pool_max_conns=%d", lanes+2), 1)
	})
	ctx := context.Background()
	tok := epochs.Token{Group: "bench", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		b.Fatal(err)
	}
	lock := "SELECT 1 FROM " + pgx.Identifier{schema, "workrouter_fences"}.Sanitize() + " WHERE grp = 'bench' AND topic = 't' AND part = 0 FOR UPDATE"
	var (
		next    atomic.Int64 // batches handed out
		wg      sync.WaitGroup
		errOnce sync.Once
		failed  error
	)
	total := int64(b.N)
	b.ResetTimer()
	start := time.Now()
	for lane := range lanes {
		wg.Go(func() {
			for k := int64(0); ; k++ {
				if next.Add(1) > total {
					return
				}
				offs := make([]int64, batch)
				for j := range offs {
					offs[j] = int64(lane) + int64(lanes)*(k*int64(batch)+int64(j))
				}
				effect := func(ctx context.Context, tx pgx.Tx, i int) error {
					if serialized && i == 0 {
						if _, err := tx.Exec(ctx, lock); err != nil {
							return err
						}
					}
					if _, err := tx.Exec(ctx, upsertKV, fmt.Sprint("key-", offs[i]%1200), "v"); err != nil {
						return err
					}
					if sleep > 0 {
						time.Sleep(sleep)
					}
					return nil
				}
				if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: offs, From: offs}, effect); err != nil {
					errOnce.Do(func() { failed = err })
					return
				}
			}
		})
	}
	// A claim (the holder's own re-claim: it takes the fence row FOR
	// UPDATE like a new owner's, without fencing the lanes) while the
	// lanes run: how long it waits for the row.
	for next.Load() < total/2 && failed == nil {
		time.Sleep(time.Millisecond)
	}
	claimStart := time.Now()
	_, claimErr := s.Claim(ctx, tok, sink.Observed{})
	claimWait := time.Since(claimStart)
	wg.Wait()
	elapsed := time.Since(start)
	if failed != nil {
		b.Fatal(failed)
	}
	if claimErr != nil {
		b.Fatal(claimErr)
	}
	b.ReportMetric(float64(total*int64(batch))/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(claimWait.Microseconds())/1000, "claim-ms")
	b.ReportMetric(float64(s.GapStats().Compactions[compactBusy]), "compactions-busy")
	b.ReportMetric(float64(s.GapStats().Compactions[compactDone]), "compactions-done")
}

// pipelinedUpserts is the benchmarks' effect for batches of n records: it
// queues one upsert per record and sends the whole batch in one round trip
// with the last record.
func pipelinedUpserts(n int) func(ctx context.Context, tx pgx.Tx, i int) error {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	var batch pgx.Batch
	return func(ctx context.Context, tx pgx.Tx, i int) error {
		batch.Queue(upsertKV, keys[i], "value")
		if i < n-1 {
			return nil
		}
		err := tx.SendBatch(ctx, &batch).Close()
		batch = pgx.Batch{}
		return err
	}
}
