package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// TestDedupeStaleCacheAfterFailedBatch: two Sinks on one file, one of
// which loaded the scope's command IDs in a batch that failed (so its
// cache is labelled with the IDs version it read, and nothing of its
// own moved it). The other Sink applies "x"; the first Sink's next batch
// of "x" must find its cache older than the fence row's IDs version,
// reload, and skip "x". It holds only if every store of applied IDs
// moves the version: an Apply with IDs's, and a lane's Apply's.
func TestDedupeStaleCacheAfterFailedBatch(t *testing.T) {
	type once func(s *sqlite.Sink, tk epochs.Token, off int64, id string, effect sink.Effect[*sqlite.Tx]) (sink.Result, error)
	for _, tc := range []struct {
		name  string
		apply once
	}{
		{"an Apply with IDs", func(s *sqlite.Sink, tk epochs.Token, off int64, id string, effect sink.Effect[*sqlite.Tx]) (sink.Result, error) {
			return s.Apply(context.Background(), tk, sink.Batch{Offsets: []int64{off}, IDs: []string{id}}, effect)
		}},
		{"a lane's Apply", func(s *sqlite.Sink, tk epochs.Token, off int64, id string, effect sink.Effect[*sqlite.Tx]) (sink.Result, error) {
			return s.Apply(context.Background(), tk, sink.Batch{Offsets: []int64{off}, From: []int64{off}, IDs: []string{id}}, effect)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "ids.db")
			s1, s2 := openAt(t, path), openAt(t, path)
			a := tok("g", 0, 1, "a")
			if _, err := s1.Claim(ctx, a, sink.Observed{}); err != nil {
				t.Fatal(err)
			}
			appendX := func(ctx context.Context, tx *sqlite.Tx, _ int) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES ('x', 'x') ON CONFLICT (k) DO UPDATE SET v = kv.v || 'x'`)
				return err
			}
			// s1 loads the IDs (version 0) and fails: nothing committed.
			boom := errors.New("boom")
			if _, err := tc.apply(s1, a, 0, "p", func(context.Context, *sqlite.Tx, int) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("s1's failing batch: %v", err)
			}
			if res, err := tc.apply(s2, a, 0, "x", appendX); err != nil || res.Applied != 1 {
				t.Fatalf("s2 applies x: %+v, %v", res, err)
			}
			res, err := tc.apply(s1, a, 1, "x", appendX)
			if err != nil || res.Applied != 0 || !slices.Equal(res.Duplicates, []int{0}) {
				t.Fatalf("s1 applies x, which s2 applied, again: %+v, %v; want a duplicate", res, err)
			}
			if v, err := readKV(t, s1, "x"); err != nil || v != "x" {
				t.Fatalf("kv(x) = %q, %v; want x, applied once", v, err)
			}
		})
	}
}
