package kafka_test

import (
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
)

// TestStatsTimes: Stats counts every call queued for a transaction and
// sums where the transactions' time went (produce, offset commits, end)
// and how long the calls waited. Each step of a committed transaction
// takes some time, and a call waits at least for the transactions it is
// in, alone or shared: CallTime is never below the steps' sum.
func TestStatsTimes(t *testing.T) {
	b := newFake(t)
	ctx := t.Context()
	tp := b.sinkTopics(t)
	in := b.topic(t, "in", 2, nil)
	out := b.topic(t, "out", 1, nil)
	s := b.newSink(t, tp, func(c *kafka.Config) { c.ClientFenceOnly = true })
	toks := make([]epochs.Token, 2)
	for i := range toks {
		toks[i] = epochs.Token{Group: "wr-kafkasink-stats-" + b.sfx, Topic: in, Partition: int32(i), Epoch: 1, Member: "m"}
		if _, err := s.Claim(ctx, toks[i], sink.Observed{}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, calls int64) {
		t.Helper()
		st := s.Stats()
		t.Logf("%s: %+v", what, st)
		if st.Calls != calls {
			t.Errorf("%s: Calls %d, want %d", what, st.Calls, calls)
		}
		if st.ProduceTime <= 0 || st.OffsetCommitTime <= 0 || st.EndTime <= 0 {
			t.Errorf("%s: ProduceTime %v, OffsetCommitTime %v, EndTime %v; want each above 0 after %d transactions",
				what, st.ProduceTime, st.OffsetCommitTime, st.EndTime, st.Transactions)
		}
		if steps := st.ProduceTime + st.OffsetCommitTime + st.EndTime; st.CallTime < steps {
			t.Errorf("%s: CallTime %v below the transactions' steps %v: a call waits for its transaction", what, st.CallTime, steps)
		}
	}
	for o := range int64(3) {
		if _, err := s.Apply(ctx, toks[0], sink.Batch{Offsets: offsets(o, o+1)}, produceEffect(out, offsets(o, o+1), "alone")); err != nil {
			t.Fatal(err)
		}
	}
	check("3 Applies one after the other", 3)

	// Two scopes side by side: calls share transactions, and each
	// call's wait still covers its transaction's steps.
	applySideBySide(t, s, toks, []int64{3, 0}, 10, []string{out, out})
	check("and 20 Applies of two scopes side by side", 23)
}
