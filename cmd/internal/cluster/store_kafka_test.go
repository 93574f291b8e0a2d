package cluster

import (
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/invariants"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// The Kafka sink writes no claims: the history the checker reads is
// derived from its checkpoint records, one per committed transaction. A
// stale tenure whose transaction committed after a newer tenure's (what
// the coordinator's fence prevents) shows as a claim going backwards, and
// F counts it; the same records in the right order are clean.
func TestCheckpointHistoryFindsStaleCommit(t *testing.T) {
	scope := epochs.Scope{Group: "g", Topic: "ledger", Partition: 2}
	old := epochs.Token{Group: "g", Topic: "ledger", Partition: 2, Epoch: 1, Member: "w1-a(b)"}
	cur := epochs.Token{Group: "g", Topic: "ledger", Partition: 2, Epoch: 4, Member: "w2-c"}
	rec := func(tok epochs.Token, next string) checkpointRecord {
		t.Helper()
		r, ok := parseCheckpoint("g/ledger/2", tok.String()+" next="+next)
		if !ok || r.tok != tok || r.scope != scope {
			t.Fatalf("parseCheckpoint(%s next=%s) = %+v, %v", tok, next, r, ok)
		}
		return r
	}
	if _, ok := parseCheckpoint("g/ledger/3", old.String()+" next=1"); ok {
		t.Fatal("a record whose key is another scope than its token's was parsed")
	}
	write := func(tok epochs.Token, off int64) invariants.Write {
		return invariants.Write{Partition: 2, Offset: off, Epoch: tok.Epoch, Member: tok.Member, ID: tok.Member + string(rune('a'+off)), Key: "k", Seq: off}
	}
	clean := []checkpointRecord{rec(old, "2"), rec(old, "3"), rec(cur, "5")}
	h := checkpointHistory(clean, scope)
	if len(h) != 2 || h[0].Token != old || h[0].NextOffset != 0 || h[1].Token != cur || h[1].NextOffset != 3 || h[1].Kind != fenceadmin.KindClaim {
		t.Fatalf("history %+v", h)
	}
	in := invariants.Input{History: map[int32][]fenceadmin.Entry{2: h},
		Writes: []invariants.Write{write(old, 0), write(old, 1), write(old, 2), write(cur, 3), write(cur, 4)}}
	if rep := invariants.Check(in); rep.F != 0 {
		t.Fatalf("clean run: %+v", rep.Findings)
	}
	stale := append(clean, rec(old, "6"))
	in.History[2] = checkpointHistory(stale, scope)
	in.Writes = append(in.Writes, write(old, 5))
	if rep := invariants.Check(in); rep.F == 0 {
		t.Fatalf("a stale commit after the newer tenure's: F = 0, want it counted (%+v)", rep.Findings)
	}
}
