package invariants_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/invariants"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

func tok(p, epoch int32, member string) epochs.Token {
	return epochs.Token{Group: "g", Topic: "t", Partition: p, Epoch: epoch, Member: member}
}

func claim(t epochs.Token, next int64) fenceadmin.Entry {
	return fenceadmin.Entry{Kind: fenceadmin.KindClaim, Token: t, NextOffset: next}
}

// proven marks a claim as made with a proof of membership, as every claim
// after a reset must be.
func proven(e fenceadmin.Entry) fenceadmin.Entry {
	e.Proven = true
	return e
}

func reset(next int64) fenceadmin.Entry {
	return fenceadmin.Entry{Kind: fenceadmin.KindReset, NextOffset: next}
}

func w(p int32, off int64, epoch int32, member, id, key string, seq int64) invariants.Write {
	return invariants.Write{Partition: p, Offset: off, Epoch: epoch, Member: member, ID: id, Key: key, Seq: seq}
}

// clean is a run with no violation: partition 0 claimed by a at epoch 1,
// taken over by b at epoch 3 from offset 2; partition 1 reset and claimed
// at a lower epoch after the group was recreated.
func clean() invariants.Input {
	return invariants.Input{
		Writes: []invariants.Write{
			w(0, 0, 1, "a", "c0", "k1", 1),
			w(0, 1, 1, "a", "c1", "k2", 1),
			w(0, 2, 3, "b", "c2", "k1", 2),
			w(0, 3, 3, "b", "c3", "k1", 3),
			w(1, 0, 5, "a", "c4", "k3", 1),
			w(1, 1, 1, "z", "c5", "k3", 2), // after the reset, at a lower epoch
		},
		History: map[int32][]fenceadmin.Entry{
			0: {claim(tok(0, 1, "a"), 0), claim(tok(0, 3, "b"), 2)},
			1: {claim(tok(1, 5, "a"), 0), reset(1), proven(claim(tok(1, 1, "z"), 1))},
		},
		Acked: []invariants.Acked{
			{ID: "c0", Partition: 0, Offset: 0}, {ID: "c1", Partition: 0, Offset: 1}, {ID: "c2", Partition: 0, Offset: 2},
			{ID: "c3", Partition: 0, Offset: 3}, {ID: "c4", Partition: 1, Offset: 0}, {ID: "c5", Partition: 1, Offset: 1},
			{ID: "bad", Partition: 1, Offset: 2, Poison: true},
		},
		DeadLetters: []invariants.DeadLetter{{ID: "bad", Partition: 1, Offset: 2}},
		Ends:        map[int32]int64{0: 4, 1: 3},
		Checkpoints: map[int32]int64{0: 4, 1: 3},
		Committed:   map[int32]int64{0: 4, 1: 3},
	}
}

func TestCleanRun(t *testing.T) {
	r := invariants.Check(clean())
	if r.Total() != 0 {
		t.Fatalf("a clean run has violations: %+v %v", r.Violations, r.Notes(20))
	}
	// The holder's own re-claim after a reset needs no proof.
	in := clean()
	in.History[1] = append(in.History[1], claim(tok(1, 1, "z"), 3))
	if r := invariants.Check(in); r.Total() != 0 {
		t.Fatalf("an unproven re-claim by the holder after a reset is a violation: %+v %v", r.Violations, r.Notes(20))
	}
}

// TestPlantedViolations plants one violation of each kind into a clean run
// and checks that exactly it is found.
func TestPlantedViolations(t *testing.T) {
	cases := []struct {
		name  string
		plant func(in *invariants.Input)
		want  invariants.Violations
		note  string
	}{
		{"F older epoch after a newer claim", func(in *invariants.Input) {
			in.Writes = append(in.Writes, w(0, 4, 1, "a", "c6", "k9", 1))
			in.Acked = append(in.Acked, invariants.Acked{ID: "c6", Partition: 0, Offset: 4})
			in.Ends[0], in.Checkpoints[0], in.Committed[0] = 5, 5, 5
		}, invariants.Violations{F: 1}, "written at epoch 1 by a after the claim at epoch 3 by b"},
		{"F same epoch, another member", func(in *invariants.Input) {
			in.Writes[3].Member = "zombie"
		}, invariants.Violations{F: 1}, "written at epoch 3 by zombie after the claim at epoch 3 by b"},
		{"F write by a token that never claimed", func(in *invariants.Input) {
			in.Writes[3].Epoch, in.Writes[3].Member = 4, "c"
		}, invariants.Violations{F: 1}, "never claimed"},
		{"F claim went backwards without a reset", func(in *invariants.Input) {
			in.History[0] = append(in.History[0], claim(tok(0, 2, "old"), 4))
		}, invariants.Violations{F: 1}, "without a reset"},
		{"F claim without a proof after a reset", func(in *invariants.Input) {
			// A member of the group's previous incarnation at any epoch
			// (here above the one the reset cleared) came back unproven.
			in.History[1] = append(in.History[1], claim(tok(1, 7, "old"), 3))
		}, invariants.Violations{F: 1}, "claim by g/t/1@7(old) accepted without a proof of membership after a reset"},
		{"L acknowledged, never applied", func(in *invariants.Input) {
			in.Writes = in.Writes[1:]
		}, invariants.Violations{L: 1, F: 0}, "c0"},
		{"O out of order per key", func(in *invariants.Input) {
			in.Writes[3].Seq = 2
		}, invariants.Violations{O: 1}, "key k1: seq 2"},
		{"X applied twice", func(in *invariants.Input) {
			in.Writes = append(in.Writes, w(0, 3, 3, "b", "c2", "", 0))
		}, invariants.Violations{X: 1}, "c2 applied again"},
		{"X one command ID applied at two positions (a copy in the log)", func(in *invariants.Input) {
			// c1 entered the log again at offset 4 (a retried send, a
			// batch the broker wrote twice) and was applied there too:
			// X per command ID, not an O violation of its key.
			in.Writes = append(in.Writes, w(0, 4, 3, "b", "c1", "k2", 1))
			in.Ends[0], in.Checkpoints[0], in.Committed[0] = 5, 5, 5
		}, invariants.Violations{X: 1}, "command c1 applied again at partition 0 offset 4"},
		{"X extra (balances)", func(in *invariants.Input) {
			in.ExtraX, in.ExtraXNote = 2, "2 account balances do not match their postings"
		}, invariants.Violations{X: 2}, "balances"},
		{"V checkpoint behind the end", func(in *invariants.Input) {
			in.Checkpoints[1], in.Committed[1] = 2, 2
		}, invariants.Violations{V: 1}, "checkpoint is 2"},
		{"V committed behind the end", func(in *invariants.Input) {
			in.Committed[0] = 1
		}, invariants.Violations{V: 1}, "committed offset is 1"},
		{"V not converged", func(in *invariants.Input) {
			in.NotConverged = true
		}, invariants.Violations{V: 1}, "recovery timeout"},
		{"V committed ahead of the checkpoint at the end", func(in *invariants.Input) {
			in.Committed[1] = 4 // the checkpoint (and the log's end) is 3
		}, invariants.Violations{V: 1}, "committed offset 4 is ahead of the sink's NextOffset 3"},
		{"V committed ahead of NextOffset in a sample", func(in *invariants.Input) {
			at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
			in.Samples = []invariants.Sample{
				{At: at, Partition: 0, Committed: 2, Next: 2},
				{At: at.Add(time.Second), Partition: 0, Committed: 3, Next: 2, CommittedLog: "L", NextLog: "L"},
				{At: at.Add(2 * time.Second), Partition: 1, Committed: 1, Next: 3},
			}
		}, invariants.Violations{V: 1}, "partition 0 at 03:04:06.000: Kafka's committed offset 3 was ahead of the sink's NextOffset 2"},
		{"D poison skipped without a row", func(in *invariants.Input) {
			in.DeadLetters = nil
		}, invariants.Violations{D: 1}, "without a dead-letter row"},
		{"D two rows", func(in *invariants.Input) {
			in.DeadLetters = append(in.DeadLetters, in.DeadLetters[0])
		}, invariants.Violations{D: 1}, "2 dead-letter rows"},
		{"D a good record dead-lettered", func(in *invariants.Input) {
			in.DeadLetters = append(in.DeadLetters, invariants.DeadLetter{ID: "1/5", Partition: 1, Offset: 5})
		}, invariants.Violations{D: 1}, "not poison"},
		{"D a dead-letter row and an effect row", func(in *invariants.Input) {
			in.Writes = append(in.Writes, w(1, 2, 1, "z", "c7", "", 0)) // the poison record's position
		}, invariants.Violations{D: 1}, "partition 1 offset 2 has both a dead-letter row (bad) and an effect row (c7)"},
		{"D a dead-lettered good record that was applied too", func(in *invariants.Input) {
			in.DeadLetters = append(in.DeadLetters, invariants.DeadLetter{ID: "c5", Partition: 1, Offset: 1})
		}, invariants.Violations{D: 2}, "both a dead-letter row (c5) and an effect row (c5)"},
		{"D an aborted record applied", func(in *invariants.Input) {
			in.Aborted = []invariants.Position{{Partition: 0, Offset: 3}}
		}, invariants.Violations{D: 1}, "offset 3 was written in an aborted transaction but has an effect row (c3)"},
		{"D an aborted record dead-lettered", func(in *invariants.Input) {
			in.Aborted = []invariants.Position{{Partition: 1, Offset: 2}}
			in.Acked = in.Acked[:len(in.Acked)-1] // never acknowledged: the transaction aborted
		}, invariants.Violations{D: 1}, "record bad (partition 1 offset 2) was dead-lettered but was written in an aborted transaction"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := clean()
			tc.plant(&in)
			r := invariants.Check(in)
			if r.Violations != tc.want {
				t.Fatalf("violations %+v, want %+v; findings %v", r.Violations, tc.want, r.Notes(20))
			}
			if !strings.Contains(strings.Join(r.Notes(20), "\n"), tc.note) {
				t.Fatalf("findings %v do not mention %q", r.Notes(20), tc.note)
			}
		})
	}
}

// TestResetEraEnds: claims before a reset do not judge writes after it,
// but they do judge writes before it.
func TestResetEraEnds(t *testing.T) {
	in := invariants.Input{
		Writes: []invariants.Write{w(0, 0, 9, "a", "x", "", 0), w(0, 1, 2, "late", "y", "", 0)},
		History: map[int32][]fenceadmin.Entry{
			0: {claim(tok(0, 9, "a"), 0), claim(tok(0, 10, "b"), 1), reset(5), proven(claim(tok(0, 1, "c"), 5))},
		},
	}
	r := invariants.Check(in)
	if r.F != 1 || !strings.Contains(r.Notes(5)[0], "offset 1 written at epoch 2 by late") {
		t.Fatalf("want the pre-reset stale write found: %+v %v", r.Violations, r.Notes(5))
	}
}

// TestTemporal: with one sequence for writes and claims, F is the sink's own
// Apply rule, write by write.
func TestTemporal(t *testing.T) {
	h := func(seq int64, e fenceadmin.Entry) fenceadmin.Entry { e.Seq = seq; return e }
	wr := func(order int64, off int64, epoch int32, member string) invariants.Write {
		return invariants.Write{Partition: 0, Offset: off, Epoch: epoch, Member: member, Order: order}
	}
	in := invariants.Input{
		Temporal: true,
		History:  map[int32][]fenceadmin.Entry{0: {h(1, claim(tok(0, 1, "a"), 0)), h(3, claim(tok(0, 2, "b"), 1)), h(5, reset(2))}},
		Writes:   []invariants.Write{wr(2, 0, 1, "a"), wr(4, 1, 1, "a"), wr(6, 2, 2, "b")},
	}
	r := invariants.Check(in)
	if r.F != 2 || !strings.Contains(r.Notes(5)[0], "while the holder was") || !strings.Contains(r.Notes(5)[1], "no claimed holder") {
		t.Fatalf("want the stale write and the write after the reset: %+v %v", r.Violations, r.Notes(5))
	}
}

// TestNewLog: after a reset onto a new log (the topic was recreated, and
// the scope restarts at 0), the new log's writes reuse offsets; they are
// judged by the claims on that log only, and they are not duplicates of
// the old log's.
func TestNewLog(t *testing.T) {
	claimOn := func(tk epochs.Token, next int64, log string) fenceadmin.Entry {
		e := claim(tk, next)
		e.TopicID = log
		return e
	}
	resetOnto := func(next int64, log string) fenceadmin.Entry {
		e := reset(next)
		e.TopicID = log
		return e
	}
	wl := func(log string, off int64, epoch int32, member string) invariants.Write {
		return invariants.Write{Log: log, Partition: 0, Offset: off, Epoch: epoch, Member: member}
	}
	in := invariants.Input{
		History: map[int32][]fenceadmin.Entry{0: {claimOn(tok(0, 9, "a"), 0, "old"), resetOnto(0, "new"), proven(claimOn(tok(0, 1, "b"), 0, "new"))}},
		Writes:  []invariants.Write{wl("old", 0, 9, "a"), wl("old", 1, 9, "a"), wl("new", 0, 1, "b"), wl("new", 1, 1, "b")},
	}
	if r := invariants.Check(in); r.Total() != 0 {
		t.Fatalf("a clean restart on a new log: %+v %v", r.Violations, r.Notes(5))
	}
	in.Writes = append(in.Writes, wl("new", 2, 9, "a")) // the old incarnation writes on the new log
	if r := invariants.Check(in); r.F != 1 {
		t.Fatalf("a write on the new log by the old claim: %+v %v", r.Violations, r.Notes(5))
	}

	// Per-key order across the two logs: the new log's offsets restart,
	// so its writes come after the old log's whatever their offsets, in
	// whatever order the sink listed them.
	keyed := func(log string, off, seq int64, epoch int32, member string) invariants.Write {
		w := wl(log, off, epoch, member)
		w.Key, w.Seq, w.ID = "k", seq, log+"-"+strconv.FormatInt(off, 10)
		return w
	}
	in.Writes = []invariants.Write{keyed("new", 0, 2, 1, "b"), keyed("old", 0, 0, 9, "a"), keyed("new", 1, 3, 1, "b"), keyed("old", 1, 1, 9, "a")}
	if r := invariants.Check(in); r.Total() != 0 {
		t.Fatalf("per-key order across logs: %+v %v", r.Violations, r.Notes(5))
	}
	in.Writes[0].Seq = 0 // the new log applies seq 0 again after seq 1
	in.Writes[1].Seq = 5
	if r := invariants.Check(in); r.O == 0 {
		t.Fatalf("out of order across logs not found: %+v %v", r.Violations, r.Notes(5))
	}
}

// TestGapsAreNormal (docs/design.md#invariants, D and L): offsets without a
// record — transaction markers, aborted records — between applied records
// and right before a dead letter are not violations, and the aborted
// records, neither applied nor dead-lettered, are not lost.
func TestGapsAreNormal(t *testing.T) {
	// Partition 0: c0@0, commit marker @1, c1@2, aborted @3 @4, abort
	// marker @5, the poison record @6 (dead-lettered above the record
	// before it), commit marker @7, c2@8, commit marker @9.
	in := invariants.Input{
		Writes: []invariants.Write{
			w(0, 0, 1, "a", "c0", "k", 1), w(0, 2, 1, "a", "c1", "k", 2), w(0, 8, 1, "a", "c2", "k", 3),
		},
		History: map[int32][]fenceadmin.Entry{0: {claim(tok(0, 1, "a"), 0)}},
		Acked: []invariants.Acked{
			{ID: "c0", Partition: 0, Offset: 0}, {ID: "c1", Partition: 0, Offset: 2}, {ID: "c2", Partition: 0, Offset: 8},
			{ID: "0/6", Partition: 0, Offset: 6, Poison: true},
		},
		Aborted:     []invariants.Position{{Partition: 0, Offset: 3}, {Partition: 0, Offset: 4}},
		DeadLetters: []invariants.DeadLetter{{ID: "0/6", Partition: 0, Offset: 6}},
		Ends:        map[int32]int64{0: 10},
		Committed:   map[int32]int64{0: 10},
		Checkpoints: map[int32]int64{0: 10},
		Samples: []invariants.Sample{
			{Partition: 0, Committed: 1, Next: 1}, {Partition: 0, Committed: 3, Next: 6}, {Partition: 0, Committed: 7, Next: 7},
		},
	}
	r := invariants.Check(in)
	if r.Total() != 0 || r.Samples != 3 || r.SamplesSkipped != 0 {
		t.Fatalf("gaps reported as violations: %+v %v (samples %d, skipped %d)", r.Violations, r.Notes(10), r.Samples, r.SamplesSkipped)
	}
}

// TestSamplesAcrossALogChange: a committed offset and a NextOffset of
// different logs (the topic recreated, a broker that lost its data) are
// not compared, and each such sample is counted as skipped; the same
// values on one log are a violation.
func TestSamplesAcrossALogChange(t *testing.T) {
	in := invariants.Input{
		Samples: []invariants.Sample{
			{Partition: 0, Committed: 40, Next: 3, CommittedLog: "new", NextLog: "old"},
			{Partition: 0, Committed: 2, Next: 3, CommittedLog: "new", NextLog: "new"},
		},
		Committed: map[int32]int64{0: 40}, Checkpoints: map[int32]int64{0: 3},
		CommittedLog: "new", CheckpointLogs: map[int32]string{0: "old"},
	}
	r := invariants.Check(in)
	if r.Total() != 0 || r.Samples != 1 || r.SamplesSkipped != 1 {
		t.Fatalf("across a log change: %+v %v (samples %d, skipped %d), want none, 1 compared, 1 skipped",
			r.Violations, r.Notes(5), r.Samples, r.SamplesSkipped)
	}
	in.Samples[0].NextLog, in.CheckpointLogs[0] = "new", "new"
	if r := invariants.Check(in); r.V != 2 || r.Samples != 2 || r.SamplesSkipped != 0 {
		t.Fatalf("on one log: %+v %v (samples %d, skipped %d), want V = 2", r.Violations, r.Notes(5), r.Samples, r.SamplesSkipped)
	}
}

// gappedClaim is a claim of a gapped checkpoint: NextOffset and the done
// spans above it that lanes of the earlier tenure applied.
func gappedClaim(t epochs.Token, next int64, done ...sink.Span) fenceadmin.Entry {
	e := claim(t, next)
	e.Done = done
	return e
}

// TestGappedTakeover (F with lanes): a's lanes applied offsets 0, 1, 3 and
// 4 but not 2 when b claimed from 2 with [3, 5) done; a's writes in the
// done span are not stale writes past b's claim, but a write by a at an
// offset past the claim outside the spans (below them, between them or
// above them) is.
func TestGappedTakeover(t *testing.T) {
	base := func() invariants.Input {
		return invariants.Input{
			Writes: []invariants.Write{
				w(0, 0, 1, "a", "c0", "k1", 1), w(0, 1, 1, "a", "c1", "k2", 1),
				w(0, 3, 1, "a", "c3", "k3", 1), w(0, 4, 1, "a", "c4", "k3", 2),
				w(0, 2, 2, "b", "c2", "k1", 2), w(0, 5, 2, "b", "c5", "k2", 2),
				w(0, 7, 2, "b", "c7", "k4", 1),
			},
			History: map[int32][]fenceadmin.Entry{0: {
				claim(tok(0, 1, "a"), 0),
				gappedClaim(tok(0, 2, "b"), 2, sink.Span{From: 3, To: 5}),
			}},
		}
	}
	if r := invariants.Check(base()); r.Total() != 0 {
		t.Fatalf("a takeover of a gapped checkpoint: %+v %v", r.Violations, r.Notes(5))
	}
	for _, tc := range []struct {
		name  string
		plant func(in *invariants.Input)
		note  string
	}{
		{"below the spans", func(in *invariants.Input) {
			in.Writes[4].Epoch, in.Writes[4].Member = 1, "a" // a applied 2 after b claimed from it
		}, "offset 2 written at epoch 1 by a after the claim at epoch 2 by b from offset 2"},
		{"above the spans", func(in *invariants.Input) {
			in.Writes = append(in.Writes, w(0, 6, 1, "a", "c6", "k5", 1)) // a zombie lane's late write
		}, "offset 6 written at epoch 1 by a after the claim at epoch 2 by b"},
		{"a done span the claim's own tenure wrote", func(in *invariants.Input) {
			// The sink said 3 was done when b claimed, but only b wrote
			// it: the span was not done then (a lane's false report).
			in.Writes[2].Epoch, in.Writes[2].Member = 2, "b"
		}, "offset 3 was done, said the claim at epoch 2 by b, but it was written at epoch 2 by b"},
		{"between the spans", func(in *invariants.Input) {
			// b claimed with 3 and 5 done: a's write at 5 was before the
			// claim, its write at 4 after it.
			in.History[0][1].Done = []sink.Span{{From: 3, To: 4}, {From: 5, To: 6}}
			in.Writes[5].Epoch, in.Writes[5].Member = 1, "a"
		}, "offset 4 written at epoch 1 by a after the claim at epoch 2 by b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.plant(&in)
			r := invariants.Check(in)
			if r.F != 1 || r.Total() != 1 || !strings.Contains(r.Notes(5)[0], tc.note) {
				t.Fatalf("want the stale write outside the done spans found: %+v %v", r.Violations, r.Notes(5))
			}
		})
	}
}

// TestGappedReset: a reset on the same log keeps the done spans
// (fenceadmin.AfterReset); the writes in them belong to the era before the
// reset, not to the claim after it (at a lower epoch, a recreated group),
// and are still judged by the claims before the reset.
func TestGappedReset(t *testing.T) {
	rs := reset(2)
	rs.Done = []sink.Span{{From: 3, To: 4}}
	in := invariants.Input{
		Writes: []invariants.Write{
			w(0, 0, 5, "a", "c0", "k1", 1), w(0, 1, 5, "a", "c1", "k2", 1), w(0, 3, 5, "a", "c3", "k3", 1),
			w(0, 2, 1, "z", "c2", "k1", 2), w(0, 4, 1, "z", "c4", "k2", 2),
		},
		History: map[int32][]fenceadmin.Entry{0: {
			claim(tok(0, 5, "a"), 0), rs, proven(gappedClaim(tok(0, 1, "z"), 2, sink.Span{From: 3, To: 4})),
		}},
	}
	if r := invariants.Check(in); r.Total() != 0 {
		t.Fatalf("a reset that kept the done spans: %+v %v", r.Violations, r.Notes(5))
	}
	in.History[0] = slices.Insert(in.History[0], 1, claim(tok(0, 6, "b"), 2))
	r := invariants.Check(in)
	if r.F != 1 || !strings.Contains(r.Notes(5)[0], "offset 3 written at epoch 5 by a after the claim at epoch 6 by b from offset 2") {
		t.Fatalf("a stale write in the reset's done spans, past a claim before the reset: %+v %v", r.Violations, r.Notes(5))
	}
}

// TestOrderPerKey (O with lanes): in application order (Write.Order),
// lanes apply a partition's keys out of offset order across keys, which is
// no violation; within one key, the offsets of one log must grow as Seq
// does, strictly.
func TestOrderPerKey(t *testing.T) {
	ord := func(order int64, p int32, off int64, key string, seq int64) invariants.Write {
		x := w(p, off, 1, "a", key+"-"+strconv.FormatInt(seq, 10), key, seq)
		x.Order = order
		return x
	}
	base := func() invariants.Input {
		return invariants.Input{
			// Two lanes: k1 at 0, 2, 4 and k2 at 1, 3; k2's lane ran
			// ahead. k3 is on two partitions (offsets not compared).
			Writes: []invariants.Write{
				ord(1, 0, 1, "k2", 1), ord(2, 0, 3, "k2", 2), ord(3, 0, 0, "k1", 1),
				ord(4, 0, 2, "k1", 2), ord(5, 1, 7, "k3", 1), ord(6, 0, 4, "k1", 3), ord(7, 0, 5, "k3", 2),
			},
			History: map[int32][]fenceadmin.Entry{0: {claim(tok(0, 1, "a"), 0)}, 1: {claim(tok(1, 1, "a"), 0)}},
		}
	}
	if r := invariants.Check(base()); r.Total() != 0 {
		t.Fatalf("lanes out of offset order across keys: %+v %v", r.Violations, r.Notes(5))
	}
	for _, tc := range []struct {
		name  string
		plant func(in *invariants.Input)
		note  string
	}{
		{"offsets of a key go back", func(in *invariants.Input) {
			// k1's lane applied offset 2 before offset 0; the producer
			// had sent them out of order too (seq 1 at offset 2), so
			// Seq grows and only the offsets show it.
			in.Writes[2].Offset, in.Writes[3].Offset = 2, 0
		}, "key k1: partition 0 offset 0 (seq 2) applied after offset 2 of the same log"},
		{"seq of a key goes back", func(in *invariants.Input) {
			in.Writes[2].Order, in.Writes[3].Order = 4, 3
		}, "key k1: seq 1 applied at partition 0 offset 0 after seq 2"},
		{"seq repeated (strict)", func(in *invariants.Input) {
			in.Writes[5].Seq = 2
		}, "key k1: seq 2 applied at partition 0 offset 4 after seq 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.plant(&in)
			r := invariants.Check(in)
			if r.O != 1 || r.Total() != 1 || !strings.Contains(r.Notes(5)[0], tc.note) {
				t.Fatalf("want one O: %+v %v", r.Violations, r.Notes(5))
			}
		})
	}
}

// TestOrderDoesNotChangeF: F from offsets (Input.Temporal false) does not
// depend on the writes' application order: giving the writes an Order
// (here the reverse of their offsets, so the sort puts them back to front)
// finds the same F violations, as the ledger's posting row IDs, a
// sequence of their own, must.
func TestOrderDoesNotChangeF(t *testing.T) {
	zombie := clean()
	zombie.Writes = append(zombie.Writes, w(0, 4, 1, "a", "c6", "", 0), w(0, 5, 3, "zombie", "c7", "", 0), w(1, 2, 5, "a", "c8", "", 0))
	for name, in := range map[string]invariants.Input{"clean": clean(), "stale writes": zombie} {
		fs := func(r invariants.Report) []string {
			var out []string
			for _, f := range r.Findings {
				if f.Invariant == "F" {
					out = append(out, f.Detail)
				}
			}
			slices.Sort(out)
			return out
		}
		want := fs(invariants.Check(in))
		ordered := in
		ordered.Writes = slices.Clone(in.Writes)
		for i := range ordered.Writes {
			ordered.Writes[i].Order = 1000 - int64(ordered.Writes[i].Partition)*100 - ordered.Writes[i].Offset
		}
		if got := fs(invariants.Check(ordered)); !slices.Equal(got, want) {
			t.Errorf("%s: F with an Order %v, without %v", name, got, want)
		}
		if name == "stale writes" && len(want) != 3 {
			t.Errorf("%s: F %v, want the three stale writes", name, want)
		}
	}
}
