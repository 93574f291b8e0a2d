package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/unfenced"
	"github.com/workrouter/workrouter/sink"
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
			next, err := s.Claim(ctx, tk, sink.Observed{})
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
				res, err := s.Apply(ctx, tk, offs, func(ctx context.Context, tx *sqlite.Tx, i int) error {
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
