package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/base32"
	"encoding/hex"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/unfenced"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// BenchmarkApply measures the cost of the fence: "fenced" applies batches
// with a claimed token through Apply (fence read, effects, conditional
// NextOffset update, commit); "unfenced" runs the same effects through
// internal/unfenced (effects, commit). Each effect upserts one row of a 4096-row kv
// table with a new value. One iteration is one batch; records/s counts
// records. Every commit syncs the WAL (synchronous=FULL), so results depend
// mostly on the disk's fsync latency for small batches.
func BenchmarkApply(b *testing.B) {
	for _, batch := range []int{1, 16, 256} {
		effect := func(ctx context.Context, tx execer, i int, base int64) error {
			// The value differs on every write: SQLite skips rewriting a
			// row whose content is unchanged, which would turn an
			// unfenced commit of repeated values into a no-op.
			o := base + int64(i)
			return put(ctx, tx, "k"+strconv.FormatInt(o%4096, 10), "value-written-at-offset-"+strconv.FormatInt(o, 10))
		}
		b.Run("fenced/batch="+strconv.Itoa(batch), func(b *testing.B) {
			s := openAt(b, filepath.Join(b.TempDir(), "bench.db"))
			ctx := context.Background()
			tk := epochs.Token{Group: "bench", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
			next, err := nextOf(s.Claim(ctx, tk, sink.Observed{}))
			if err != nil {
				b.Fatal(err)
			}
			offs := make([]int64, batch)
			b.ResetTimer()
			for b.Loop() {
				for i := range offs {
					offs[i] = next + int64(i)
				}
				base := next
				res, err := s.Apply(ctx, tk, sink.Batch{Offsets: offs}, func(ctx context.Context, tx *sqlite.Tx, i int) error {
					return effect(ctx, tx, i, base)
				})
				if err != nil {
					b.Fatal(err)
				}
				next = res.NextOffset
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
		})
		b.Run("unfenced/batch="+strconv.Itoa(batch), func(b *testing.B) {
			s := openAt(b, filepath.Join(b.TempDir(), "bench.db"))
			ctx := context.Background()
			var next int64
			mu := make(chan struct{}, 1)
			b.ResetTimer()
			for b.Loop() {
				base := next
				if err := unfenced.SQLite(ctx, s.DB(), mu, batch, func(ctx context.Context, tx *sql.Tx, i int) error {
					return effect(ctx, tx, i, base)
				}); err != nil {
					b.Fatal(err)
				}
				next += int64(batch)
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
		})
	}
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
// state). The effect is BenchmarkApply's. "on" also reports the storage
// per retained ID (B/id: the table and its index, from dbstat, over the
// window's IDs) and the prune alone (prune-µs/256: deleting the rows of
// the next 256 IDs at the horizon, in a transaction rolled back).
//
// "on" uses random UUIDs; "on-router" IDs shaped as package router
// generates them (routerIDs): one 27-byte prefix and a counter.
func BenchmarkDedup(b *testing.B) {
	for _, batch := range []int{1, 256} {
		for _, mode := range []string{"off", "on", "on-router"} {
			b.Run(mode+"/batch="+strconv.Itoa(batch), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				newID := func() string { return commandID(r) }
				if mode == "on-router" {
					newID = routerIDs(r)
				}
				benchDedup(b, mode != "off", batch, newID)
			})
		}
	}
}

// routerIDs returns a generator of IDs in the form package router gives
// the commands it generates an ID for: 128 random bits in base32, a dash
// and a counter in hex from 1.
func routerIDs(r *rand.Rand) func() string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	prefix := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]) + "-"
	var n uint64
	return func() string {
		n++
		return prefix + strconv.FormatUint(n, 16)
	}
}

func benchDedup(b *testing.B, on bool, batch int, newID func() string) {
	ctx := context.Background()
	s := openAt(b, filepath.Join(b.TempDir(), "bench.db"))
	tk := epochs.Token{Group: "bench", Topic: "orders", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tk, sink.Observed{}); err != nil {
		b.Fatal(err)
	}
	window := s.Features().DedupeWindow
	noop := func(context.Context, *sqlite.Tx, int) error { return nil }
	var (
		next                  int64
		bytesPerID, pruneCost float64
	)
	if on {
		// Fill the window as an Apply with IDs would have, one row per batch of
		// random IDs, in one transaction; then one Apply with IDs loads them.
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for next < window {
			n := min(int64(batch), window-next)
			offs, ids := make([]int64, n), make([]string, n)
			for i := range offs {
				offs[i], ids[i] = next+int64(i), newID()
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO workrouter_command_ids (grp, topic, part, first_off, last_off, ids) VALUES (?, ?, ?, ?, ?, ?)`,
				tk.Group, tk.Topic, tk.Partition, offs[0], offs[n-1], cmdids.Encode(offs[0], offs, ids)); err != nil {
				b.Fatal(err)
			}
			next += n
		}
		if _, err := tx.ExecContext(ctx, `UPDATE workrouter_fences SET next_offset = ?, ids_version = ids_version + 1`, next); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		var bytes int64
		if err := s.DB().QueryRowContext(ctx, `SELECT sum(pgsize) FROM dbstat WHERE name IN ('workrouter_command_ids', 'workrouter_command_ids_scope')`).Scan(&bytes); err != nil {
			b.Fatal(err)
		}
		bytesPerID = float64(bytes) / float64(window)
		pruneCost = prunePerBatch(b, s, tk, next-window)
		res, err := s.Apply(ctx, tk, sink.Batch{Offsets: []int64{next}, IDs: []string{newID()}}, noop)
		if err != nil || res.Applied != 1 {
			b.Fatalf("first an Apply with IDs: %+v, %v", res, err)
		}
		next = res.NextOffset
	}
	offs, ids := make([]int64, batch), make([]string, batch)
	b.ResetTimer()
	for b.Loop() {
		for i := range offs {
			offs[i], ids[i] = next+int64(i), newID()
		}
		base := next
		effect := func(ctx context.Context, tx *sqlite.Tx, i int) error {
			o := base + int64(i)
			return put(ctx, tx, "k"+strconv.FormatInt(o%4096, 10), "value-written-at-offset-"+strconv.FormatInt(o, 10))
		}
		var res sink.Result
		var err error
		if on {
			var once sink.Result
			once, err = s.Apply(ctx, tk, sink.Batch{Offsets: offs, IDs: ids}, effect)
			res = once
		} else {
			res, err = s.Apply(ctx, tk, sink.Batch{Offsets: offs}, effect)
		}
		if err != nil || res.Applied != batch {
			b.Fatalf("%+v, %v", res, err)
		}
		next = res.NextOffset
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
	if on {
		b.ReportMetric(bytesPerID, "B/id")
		b.ReportMetric(pruneCost, "prune-µs/256")
	}
}

// prunePerBatch returns the mean time, in µs, of deleting the rows of the
// 256 lowest command IDs of tk's scope from horizon on, as an Apply with IDs's
// prune does, in 20 transactions that are rolled back.
func prunePerBatch(b *testing.B, s *sqlite.Sink, tk epochs.Token, horizon int64) float64 {
	b.Helper()
	ctx := context.Background()
	var total time.Duration
	const rounds = 20
	for range rounds {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		_, err = tx.ExecContext(ctx, `DELETE FROM workrouter_command_ids WHERE grp = ? AND topic = ? AND part = ? AND last_off < ?`,
			tk.Group, tk.Topic, tk.Partition, horizon+256)
		total += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			b.Fatal(err)
		}
	}
	return float64(total.Microseconds()) / rounds
}

// BenchmarkGapLanes measures what lanes (sink.Features.Gaps, concurrent
// a lane's Apply calls of one scope, as consumer.Config.KeyConcurrency
// makes them) buy on SQLite: each iteration runs lanes goroutines that
// each apply one batch of 4 records of their own offsets; each record's
// effect waits io (a handler's I/O inside the transaction) and upserts
// one row. SQLite has one writer, so the lanes' transactions, effects
// included, serialize on its write lock: with io=1ms, records/s stays
// near 1,000 whatever the lanes. One iteration is lanes batches;
// records/s counts records.
func BenchmarkGapLanes(b *testing.B) {
	const batch = 4
	for _, io := range []time.Duration{0, time.Millisecond} {
		for _, lanes := range []int{1, 4, 16} {
			b.Run("io="+io.String()+"/lanes="+strconv.Itoa(lanes), func(b *testing.B) {
				s := openAt(b, filepath.Join(b.TempDir(), "bench.db"))
				ctx := context.Background()
				tk := epochs.Token{Group: "bench", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
				if _, err := s.Claim(ctx, tk, sink.Observed{}); err != nil {
					b.Fatal(err)
				}
				var round int64
				b.ResetTimer()
				for b.Loop() {
					errs := make(chan error, lanes)
					for lane := range lanes {
						go func() {
							// Lane l's k-th record of the round is at
							// round*lanes*batch + k*lanes + l.
							offs := make([]int64, batch)
							for k := range offs {
								offs[k] = round*int64(lanes*batch) + int64(k*lanes+lane)
							}
							_, err := s.Apply(ctx, tk, sink.Batch{Offsets: offs, From: offs}, func(ctx context.Context, tx *sqlite.Tx, i int) error {
								if io > 0 {
									time.Sleep(io)
								}
								return put(ctx, tx, "k"+strconv.FormatInt(offs[i]%4096, 10), "v"+strconv.FormatInt(offs[i], 10))
							})
							errs <- err
						}()
					}
					for range lanes {
						if err := <-errs; err != nil {
							b.Fatal(err)
						}
					}
					round++
				}
				b.ReportMetric(float64(b.N*lanes*batch)/b.Elapsed().Seconds(), "records/s")
				cp, err := s.Claim(ctx, tk, sink.Observed{})
				if err != nil || cp.NextOffset != round*int64(lanes*batch) || len(cp.Done) != 0 {
					b.Fatalf("after %d rounds: checkpoint %+v, %v", round, cp, err)
				}
			})
		}
	}
}
