package kafka

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTxRecordsInChunks: a Tx keeps each produced record, its headers
// its own (appending to one record's headers leaves the next one's
// alone), whether its first chunk was sized for the batch or far too
// small; and a batch of one record per command, each with a header,
// costs a handful of allocations, not two per record (the records and
// their headers are taken from chunks).
func TestTxRecordsInChunks(t *testing.T) {
	s := &Sink{cfg: Config{CheckpointTopic: "cp", DeadLetterTopic: "dl"}}
	const n = 2048
	in := make([]Record, n)
	for i := range in {
		in[i] = Record{Topic: "out", Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i),
			Headers: []Header{{Key: "id", Value: fmt.Appendf(nil, "c-%d", i)}}}
		if i%3 == 0 {
			in[i].Headers = append(in[i].Headers, Header{Key: "type", Value: []byte("deposit")})
		}
	}
	ctx := context.Background()
	for _, hint := range []int{n, 1} {
		tx := newTx(s, hint)
		for i := range in {
			if err := tx.Produce(ctx, in[i]); err != nil {
				t.Fatal(err)
			}
		}
		if tx.Len() != n {
			t.Fatalf("hint %d: %d records, want %d", hint, tx.Len(), n)
		}
		seen := map[*kgo.Record]bool{}
		for i, kr := range tx.recs {
			if seen[kr] {
				t.Fatalf("hint %d: record %d shares its memory with an earlier one", hint, i)
			}
			seen[kr] = true
			if kr.Topic != "out" || !bytes.Equal(kr.Key, in[i].Key) || !bytes.Equal(kr.Value, in[i].Value) || len(kr.Headers) != len(in[i].Headers) {
				t.Fatalf("hint %d: record %d is %+v, want %+v", hint, i, kr, in[i])
			}
			for j, h := range kr.Headers {
				if h.Key != in[i].Headers[j].Key || !bytes.Equal(h.Value, in[i].Headers[j].Value) {
					t.Fatalf("hint %d: record %d header %d is %s=%s", hint, i, j, h.Key, h.Value)
				}
			}
		}
		_ = append(tx.recs[0].Headers, kgo.RecordHeader{Key: "extra"})
		if got := tx.recs[1].Headers[0].Key; got != "id" {
			t.Fatalf("hint %d: appending to record 0's headers changed record 1's first header to %q", hint, got)
		}
	}
	one := in[:0:0]
	for i := range in {
		one = append(one, Record{Topic: "out", Key: in[i].Key, Value: in[i].Value, Headers: in[i].Headers[:1]})
	}
	allocs := testing.AllocsPerRun(5, func() {
		tx := newTx(s, n)
		for i := range one {
			if err := tx.Produce(ctx, one[i]); err != nil {
				t.Fatal(err)
			}
		}
	})
	// The Tx, its record list, one chunk of records, one of headers.
	if allocs > 4 {
		t.Errorf("a batch of %d records with a header each took %.0f allocations, want at most 4", n, allocs)
	}
}
