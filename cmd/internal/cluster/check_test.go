package cluster

import (
	"context"
	"fmt"
	"strings"
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

// TestCheckCommandIDAppliedTwice: X is per command ID, strict. A command
// that entered the log twice (here cmd-1 at offsets 0 and 2, as a retried
// send or a batch the broker wrote twice leaves it) and was posted at both
// positions is one X violation, whatever the positions; it is not an O
// violation (a repeated command is X's). Once the copy's posting is gone
// (the worker skipped it as a duplicate), nothing is violated.
func TestCheckCommandIDAppliedTwice(t *testing.T) {
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
	cfg := CheckConfig{Group: "g", Topic: "ledger", Partitions: 1,
		Acked: map[string]Acked{"cmd-1": {Account: "acct", Partition: 0, Offset: 0}, "cmd-2": {Account: "acct", Seq: 1, Partition: 0, Offset: 1}}}
	rep, err := st.Check(ctx, cfg)
	if err != nil || rep.X != 1 || rep.O != 0 || rep.Total() != 1 {
		t.Fatalf("cmd-1 posted twice: %+v %v %v, want X = 1 and nothing else", rep.Violations, rep.Notes(5), err)
	}
	if len(rep.Findings) != 1 || !strings.Contains(rep.Findings[0].Detail, "command cmd-1 applied again at partition 0 offset 2") {
		t.Fatalf("findings %v, want cmd-1 applied again at offset 2", rep.Notes(5))
	}
	// The copy skipped: one posting per command ID.
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM ledger_postings WHERE off = 2`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE ledger_accounts SET balance = 10`); err != nil {
		t.Fatal(err)
	}
	if rep, err = st.Check(ctx, cfg); err != nil || rep.Total() != 0 {
		t.Fatalf("the copy skipped: %+v %v %v, want no violation", rep.Violations, rep.Notes(5), err)
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

// TestCheckApplicationOrder: Check takes O in the postings' insert order
// (SQLite's rowid), the order lanes applied them in. Two accounts of one
// partition applied out of offset order across accounts are no violation;
// one account's postings applied out of offset order are, even when their
// seqs read in offset order would grow (acct-c: seq 1 at offset 5 applied
// before seq 0 at offset 4). F is the same as in offset order.
func TestCheckApplicationOrder(t *testing.T) {
	ctx := context.Background()
	st, s := openTestStore(t)
	a := epochs.Token{Group: "g", Topic: "ledger", Partition: 0, Epoch: 1, Member: "a"}
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	insert := func(off int64, account string, seq int, member string) {
		t.Helper()
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO ledger_postings (topic, part, off, account, id, seq, kind, amount, epoch, member)
			VALUES ('ledger', 0, $1, $2, $3, $4, 'deposit', 5, 1, $5)`, off, account, fmt.Sprintf("%s-%d", account, seq), seq, member); err != nil {
			t.Fatal(err)
		}
	}
	// acct-b's lane ran ahead of acct-a's.
	insert(1, "acct-b", 0, "a")
	insert(3, "acct-b", 1, "a")
	insert(0, "acct-a", 0, "a")
	insert(2, "acct-a", 1, "a")
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO ledger_accounts (account, balance) VALUES ('acct-a', 10), ('acct-b', 10)`); err != nil {
		t.Fatal(err)
	}
	cfg := CheckConfig{Group: "g", Topic: "ledger", Partitions: 1}
	if rep, err := st.Check(ctx, cfg); err != nil || rep.Total() != 0 {
		t.Fatalf("accounts applied out of offset order across accounts: %+v %v %v, want no violation", rep.Violations, rep.Notes(5), err)
	}
	insert(5, "acct-c", 1, "a")
	insert(4, "acct-c", 0, "a")
	insert(6, "acct-b", 2, "zombie") // the same epoch, another member: F
	if _, err := s.DB().ExecContext(ctx, `UPDATE ledger_accounts SET balance = 15 WHERE account = 'acct-b';
		INSERT INTO ledger_accounts (account, balance) VALUES ('acct-c', 10)`); err != nil {
		t.Fatal(err)
	}
	rep, err := st.Check(ctx, cfg)
	if err != nil || rep.O != 1 || rep.F != 1 || rep.Total() != 2 {
		t.Fatalf("acct-c applied out of offset order: %+v %v %v, want O = 1 and F = 1", rep.Violations, rep.Notes(5), err)
	}
	if notes := strings.Join(rep.Notes(5), "\n"); !strings.Contains(notes, "key acct-c: seq 0 applied at partition 0 offset 4 after seq 1") ||
		!strings.Contains(notes, "offset 6 written at epoch 1 by zombie after the claim at epoch 1 by a") {
		t.Fatalf("findings %v", rep.Notes(5))
	}
}
