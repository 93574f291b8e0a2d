package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/unfenced"
	"github.com/workrouter/workrouter/sink"
)

// BenchmarkApply measures the cost of the fence: the same batch of N
// upserts into kv (pipelined by the handler with a pgx.Batch) applied with
// Apply under a claimed token ("fenced") and with internal/unfenced ("unfenced").
func BenchmarkApply(b *testing.B) {
	// Interleaved (fenced and unfenced of one size back to back) so that
	// drifting background load hits both alike.
	for _, n := range []int{1, 16, 256} {
		for _, mode := range []string{"fenced", "unfenced"} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, n), func(b *testing.B) {
				benchApply(b, mode == "fenced", n)
			})
		}
	}
}

func benchApply(b *testing.B, fenced bool, n int) {
	s := openSink(b, newTestSchema(b), nil)
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	// The handler queues one upsert per record and sends the whole batch
	// in one round trip with the last record.
	var batch pgx.Batch
	effect := func(ctx context.Context, tx pgx.Tx, i int) error {
		batch.Queue(upsertKV, keys[i], "value")
		if i < n-1 {
			return nil
		}
		err := tx.SendBatch(ctx, &batch).Close()
		batch = pgx.Batch{}
		return err
	}
	tok := epochs.Token{Group: "bench", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		b.Fatal(err)
	}
	offsets := make([]int64, n)
	var next int64
	batches := 0
	for b.Loop() {
		if fenced {
			for i := range offsets {
				offsets[i] = next + int64(i)
			}
			next += int64(n)
			if _, err := s.Apply(ctx, tok, offsets, effect); err != nil {
				b.Fatal(err)
			}
		} else if err := unfenced.Postgres(ctx, s.Pool(), n, effect); err != nil {
			b.Fatal(err)
		}
		batches++
	}
	b.ReportMetric(float64(batches*n)/b.Elapsed().Seconds(), "records/s")
}
