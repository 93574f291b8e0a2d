package memory_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// BenchmarkApplyWithIDs measures the memory sink's cost per record of a
// no-op batch, the sink's share of W1 (workrouter-lab bench): Apply without
// IDs and an Apply with IDs with IDs like package router's (a shared prefix and
// a counter). One iteration is one batch.
func BenchmarkApplyWithIDs(b *testing.B) {
	const batch = 256
	nop := func(context.Context, *memory.Tx, int) error { return nil }
	for _, ids := range []bool{false, true} {
		b.Run("ids="+strconv.FormatBool(ids), func(b *testing.B) {
			s := memory.New()
			ctx := context.Background()
			tok := token(1, "m")
			if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
				b.Fatal(err)
			}
			// IDs made before the clock starts, reused after 2^18
			// offsets: outside the window, so never duplicates.
			const distinct = 1 << 18
			all := make([]string, distinct)
			for i := range all {
				all[i] = "7MZQ4UOGSQ3TYUQDXXY6TQDBCA-" + strconv.FormatInt(int64(i), 16)
			}
			offs := make([]int64, batch)
			var next int64
			b.ReportAllocs()
			for b.Loop() {
				for i := range offs {
					offs[i] = next + int64(i)
				}
				k := int(next % distinct)
				var err error
				if ids {
					_, err = s.Apply(ctx, tok, sink.Batch{Offsets: offs, IDs: all[k : k+batch]}, nop)
				} else {
					_, err = s.Apply(ctx, tok, sink.Batch{Offsets: offs}, nop)
				}
				if err != nil {
					b.Fatal(err)
				}
				next += batch
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
		})
	}
}
