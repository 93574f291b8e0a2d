package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// A tenure claims its partition, then applies batches whose effects are
// ordinary SQL on the sink's transaction. Once a newer tenure has claimed,
// the old tenure's writes are refused.
func Example() {
	dir, err := os.MkdirTemp("", "workrouter-sqlite-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "ledger.db")})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE balances (account TEXT PRIMARY KEY, cents INTEGER NOT NULL)`); err != nil {
		panic(err)
	}
	credit := func(amounts []int64) sink.Effect[*sqlite.Tx] {
		return func(ctx context.Context, tx *sqlite.Tx, i int) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO balances VALUES ('alice', ?)
				ON CONFLICT (account) DO UPDATE SET cents = cents + excluded.cents`, amounts[i])
			return err
		}
	}

	old := epochs.Token{Group: "ledger", Topic: "postings", Partition: 0, Epoch: 1, Member: "worker-a"}
	cp, _ := s.Claim(ctx, old, sink.Observed{})
	fmt.Println("worker-a resumes at offset", cp.NextOffset)
	res, _ := s.Apply(ctx, old, sink.Batch{Offsets: []int64{0, 1}}, credit([]int64{100, 250}))
	fmt.Println("applied", res.Applied, "next offset", res.NextOffset)

	// worker-a pauses; the group hands the partition to worker-b.
	newer := epochs.Token{Group: "ledger", Topic: "postings", Partition: 0, Epoch: 2, Member: "worker-b"}
	cp, _ = s.Claim(ctx, newer, sink.Observed{})
	fmt.Println("worker-b resumes at offset", cp.NextOffset)

	// worker-a wakes up and writes: refused, nothing applied.
	_, err = s.Apply(ctx, old, sink.Batch{Offsets: []int64{2}}, credit([]int64{999}))
	fmt.Println("late write fenced:", errors.Is(err, sink.ErrFenced))

	// worker-b replays offset 1 (skipped) and applies offset 2.
	res, _ = s.Apply(ctx, newer, sink.Batch{Offsets: []int64{1, 2}}, credit([]int64{250, 50}))
	fmt.Println("applied", res.Applied, "skipped", res.Skipped)

	var cents int64
	_ = s.DB().QueryRowContext(ctx, `SELECT cents FROM balances WHERE account = 'alice'`).Scan(&cents)
	fmt.Println("alice:", cents)
	// Output:
	// worker-a resumes at offset 0
	// applied 2 next offset 2
	// worker-b resumes at offset 2
	// late write fenced: true
	// applied 1 skipped 1
	// alice: 400
}
