package cluster

import (
	"context"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// TestCheckFeedsDeadLetters: Check reads the sink's dead letters and the
// poison records it is given into D, by position: a poison record with its
// one dead letter passes, a dead letter of a record that is not poison and
// a poison record without a dead letter are violations, and an
// unconfirmed poison record counts once its dead letter carries its
// PoisonHeader.
func TestCheckFeedsDeadLetters(t *testing.T) {
	ctx := context.Background()
	st, s := openTestStore(t)
	tok := epochs.Token{Group: "g", Topic: "ledger", Partition: 0, Epoch: 1, Member: "a"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	// Offsets 0 (acknowledged poison), 1 (not poison), 2 (poison whose
	// acknowledgement was lost) are dead-lettered.
	for off, mark := range []string{"poison-1", "", "poison-2"} {
		rec := sink.DeadRecord{Offset: int64(off), Key: []byte("k"), Reason: "undecodable", Error: "test"}
		if mark != "" {
			rec.Headers = []sink.RecordHeader{{Key: PoisonHeader, Value: []byte(mark)}}
		}
		if _, err := s.DeadLetter(ctx, tok, rec); err != nil {
			t.Fatal(err)
		}
	}
	dls, err := st.DeadLetters(ctx, "g", "ledger")
	if err != nil || len(dls) != 3 {
		t.Fatalf("dead letters %+v %v", dls, err)
	}
	cfg := CheckConfig{Group: "g", Topic: "ledger", Partitions: 1,
		Poison: []PoisonRecord{
			{ID: "poison-1", Kind: PoisonNotEnvelope, Partition: 0, Offset: 0},
			{ID: "poison-3", Kind: PoisonNullKey, Partition: 0, Offset: 3}, // never dead-lettered
		},
		Unconfirmed: []PoisonRecord{{ID: "poison-2", Kind: PoisonMalformed, Partition: 0, Offset: -1}},
	}
	rep, err := st.Check(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.D != 2 {
		t.Fatalf("D = %d (%v), want 2: offset 1 is not poison, poison-3 has no dead letter", rep.D, rep.Notes(10))
	}
	cfg.Unconfirmed = nil
	if rep, err = st.Check(ctx, cfg); err != nil || rep.D != 3 {
		t.Fatalf("without the unconfirmed record: D = %d (%v) %v, want 3", rep.D, rep.Notes(10), err)
	}
}

// TestCheckLogCopies: a command the broker wrote twice is posted twice,
// at two positions; Check counts that as X unless told the second
// position is a copy in the log (LogCopies).
func TestCheckLogCopies(t *testing.T) {
	ctx := context.Background()
	st, s := openTestStore(t)
	tok := epochs.Token{Group: "g", Topic: "ledger", Partition: 0, Epoch: 1, Member: "a"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	for off, row := range []struct {
		id  string
		seq int
	}{{"cmd-1", 0}, {"cmd-2", 1}, {"cmd-1", 0}} {
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO ledger_postings (topic, part, off, account, id, seq, kind, amount, epoch, member)
			VALUES ('ledger', 0, $1, 'acct', $2, $3, 'deposit', 5, 1, 'a')`, off, row.id, row.seq); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO ledger_accounts (account, balance) VALUES ('acct', 15)`); err != nil {
		t.Fatal(err)
	}
	cfg := CheckConfig{Group: "g", Topic: "ledger", Partitions: 1}
	rep, err := st.Check(ctx, cfg)
	if err != nil || rep.X != 1 || rep.O != 0 {
		t.Fatalf("without LogCopies: %+v %v %v, want X = 1", rep.Violations, rep.Notes(5), err)
	}
	cfg.LogCopies = map[string]string{PositionID(0, 2): "cmd-1"}
	if rep, err = st.Check(ctx, cfg); err != nil || rep.Total() != 0 {
		t.Fatalf("with LogCopies: %+v %v %v, want no violation", rep.Violations, rep.Notes(5), err)
	}
}

// openTestStore opens a Store on a fresh SQLite file, and the sink on the
// same file to write its records.
func openTestStore(t *testing.T) (*Store, *sqlite.Sink) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := OpenStore(ctx, StoreConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	s, err := sqlite.Open(ctx, sqlite.Config{Path: dir + "/ledger.db"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return st, s
}
