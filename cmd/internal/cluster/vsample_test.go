package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/topicid"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// TestSampleCommitted: a sample pairs each partition's committed offset
// with the sink's NextOffset and both logs; Check passes a committed offset
// at NextOffset, skips (and counts) one whose fence is on another log, and
// finds one ahead of NextOffset (V).
func TestSampleCommitted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id, err := topicid.Read(ctx, cl, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	log := topicid.Format(id)
	other := topicid.Format([16]byte{1})

	st, s := openTestStore(t)
	// Partition 0 claimed on the topic's log and applied up to 3;
	// partition 1 claimed on another log (as if the topic had been
	// recreated and not reset yet).
	for p, l := range []string{log, other} {
		tok := epochs.Token{Group: "g", Topic: "ledger", Partition: int32(p), Epoch: 1, Member: "a"}
		if _, err := s.Claim(ctx, tok, sink.Observed{TopicID: l}); err != nil {
			t.Fatal(err)
		}
		if p == 0 {
			if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1, 2}}, func(context.Context, *sqlite.Tx, int) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit := func(offsets map[int32]int64) {
		t.Helper()
		os := kadm.Offsets{}
		for p, o := range offsets {
			os.AddOffset("ledger", p, o, -1)
		}
		if err := kadm.NewClient(cl).CommitAllOffsets(ctx, "g", os); err != nil {
			t.Fatal(err)
		}
	}
	commit(map[int32]int64{0: 3, 1: 7})
	ss, err := st.SampleCommitted(ctx, cl, "g", "ledger")
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].Partition != 0 || ss[0].Committed != 3 || ss[0].Next != 3 || ss[0].CommittedLog != log || ss[0].NextLog != log ||
		ss[1].Committed != 7 || ss[1].Next != 0 || ss[1].NextLog != other || ss[0].At.IsZero() {
		t.Fatalf("samples %+v", ss)
	}
	rep, err := st.Check(ctx, CheckConfig{Group: "g", Topic: "ledger", Partitions: 2, Samples: ss})
	if err != nil || rep.V != 0 || rep.Samples != 1 || rep.SamplesSkipped != 1 {
		t.Fatalf("check %+v %v (samples %d, skipped %d) %v, want 1 compared, 1 skipped", rep.Violations, rep.Notes(5), rep.Samples, rep.SamplesSkipped, err)
	}

	commit(map[int32]int64{0: 5}) // ahead of the sink's NextOffset 3
	more, err := st.SampleCommitted(ctx, cl, "g", "ledger")
	if err != nil {
		t.Fatal(err)
	}
	rep, err = st.Check(ctx, CheckConfig{Group: "g", Topic: "ledger", Partitions: 2, Samples: append(ss, more...)})
	if err != nil || rep.V != 1 || !strings.Contains(strings.Join(rep.Notes(5), "\n"), "committed offset 5 was ahead of the sink's NextOffset 3") {
		t.Fatalf("check %+v %v %v, want the committed offset ahead found", rep.Violations, rep.Notes(5), err)
	}

	// At the end, read from the brokers: partition 0's committed offset 5
	// is ahead of its checkpoint 3 (and the checkpoint behind the log's
	// end); partition 1's committed offset 7 is not compared with a
	// checkpoint on another log (whose lag is still a violation).
	for _, p := range []int32{0, 0, 0, 0, 0, 1} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "ledger", Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = st.Check(ctx, CheckConfig{Brokers: kf.ListenAddrs(), Group: "g", Topic: "ledger", Partitions: 2})
	notes := strings.Join(rep.Notes(10), "\n")
	if err != nil || rep.V != 3 || !strings.Contains(notes, "partition 0: Kafka's committed offset 5 is ahead of the sink's NextOffset 3") ||
		strings.Contains(notes, "committed offset 7 is ahead") {
		t.Fatalf("check at the end %+v %v %v", rep.Violations, rep.Notes(10), err)
	}
}
