package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// TestStoreReadsSQLiteRecords: the store reads back postings and claims
// written through the real SQLite sink, and Check finds the stale posting
// (F) among them.
func TestStoreReadsSQLiteRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := OpenStore(ctx, StoreConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	path := filepath.Join(dir, "ledger.db")
	if st.Spec() != "sqlite:"+path || st.WorkerSpec("w1") != st.Spec() || st.Postgres() {
		t.Fatalf("spec %q, worker spec %q", st.Spec(), st.WorkerSpec("w1"))
	}
	if _, _, err := st.TerminateBackends(ctx, "w1"); !errors.Is(err, ErrNotPostgres) {
		t.Fatalf("TerminateBackends on SQLite: %v, want ErrNotPostgres", err)
	}

	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := epochs.Token{Group: "g", Topic: "ledger", Partition: 0, Epoch: 1, Member: "a"}
	b := a
	b.Epoch, b.Member = 2, "b"
	if _, err := s.Claim(ctx, a, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, b, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	// Offset 0 by a before b's claim (at NextOffset 0, so it counts as
	// stale too) and offset 1 by b.
	for _, row := range []struct {
		off    int64
		epoch  int32
		member string
	}{{0, 1, "a"}, {1, 2, "b"}} {
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO ledger_postings (topic, part, off, account, id, seq, kind, amount, epoch, member)
			VALUES ('ledger', 0, $1, 'acct', $2, $1, 'deposit', 5, $3, $4)`, row.off, "cmd-"+row.member, row.epoch, row.member); err != nil {
			t.Fatal(err)
		}
	}
	claims, err := st.Claims(ctx, Scope("g", "ledger", 0))
	if err != nil || len(claims) != 2 || claims[1] != (Claim{Epoch: 2, Member: "b", Next: 0}) {
		t.Fatalf("claims %+v %v", claims, err)
	}
	ps, err := st.Postings(ctx)
	if err != nil || len(ps) != 2 || ps[1] != (Posting{Partition: 0, Offset: 1, Account: "acct", ID: "cmd-b", Seq: 1, Epoch: 2, Member: "b", Order: 2}) {
		t.Fatalf("postings %+v %v", ps, err)
	}
	rep, err := st.Check(ctx, CheckConfig{Group: "g", Topic: "ledger", Partitions: 1})
	if err != nil || rep.F != 1 || rep.O != 0 {
		t.Fatalf("check %+v %v %v, want one F violation (a's posting at offset 0 after b claimed from 0)", rep.Violations, rep.Notes(5), err)
	}
	if !strings.HasPrefix(st.Desc(), "SQLite sink ") {
		t.Fatalf("desc %q", st.Desc())
	}
}

// TestStorePostgresPostingsOrder: on PostgreSQL the postings' Order is the
// ledger's applied column, their insert order, not their offsets'.
func TestStorePostgresPostingsOrder(t *testing.T) {
	ctx := context.Background()
	st, err := OpenStore(ctx, StoreConfig{PostgresDSN: testpg.DSN(t), SchemaPrefix: "cluster_order"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, off := range []int64{3, 1, 2} {
		n, err := st.Count(ctx, `WITH ins AS (INSERT INTO ledger_postings (topic, part, off, account, id, seq, kind, amount, epoch, member)
			VALUES ('ledger', 0, $1, 'acct', $2, $3, 'deposit', 5, 1, 'a') RETURNING 1) SELECT count(*) FROM ins`, off, fmt.Sprint("cmd-", off), int(off))
		if err != nil || n != 1 {
			t.Fatalf("insert offset %d: %d %v", off, n, err)
		}
	}
	ps, err := st.Postings(ctx)
	if err != nil || len(ps) != 3 {
		t.Fatalf("postings %+v %v", ps, err)
	}
	// By offset: 1 (inserted second), 2 (third), 3 (first).
	if ps[0].Offset != 1 || ps[1].Offset != 2 || ps[2].Offset != 3 || !(ps[2].Order < ps[0].Order && ps[0].Order < ps[1].Order) {
		t.Fatalf("postings %+v: want offsets 1, 2, 3 with insert orders second, third, first", ps)
	}
}
