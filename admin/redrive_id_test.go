package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestRedriveKeepsTheIDAndNamesTheGroup: through a real Router, a
// redrive keeps the ID of the dead-lettered command and names the dead
// letter's group in one RedriveForHeader, also for a dead letter that was
// itself a redrive (its old redrive headers are replaced, not repeated);
// a dead letter without an ID is redriven with the ID the Router gives it,
// which Redriven.Result reports.
func TestRedriveKeepsTheIDAndNamesTheGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()

	s := memory.New()
	tok := epochs.Token{Group: "ledger-workers", Topic: "ledger", Partition: 1, Epoch: 1, Member: "m-1"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	h := func(k, v string) sink.RecordHeader { return sink.RecordHeader{Key: k, Value: []byte(v)} }
	for i, headers := range [][]sink.RecordHeader{
		{h(envelope.TypeHeader, "deposit"), h(envelope.IDHeader, "deposit-c9"), h("trace", "abc"),
			h(envelope.RedriveOfHeader, "4"), h(envelope.RedriveForHeader, "ledger-workers")}, // a redrive, dead-lettered again
		{h(envelope.TypeHeader, "deposit")}, // a foreign producer's, without an ID
	} {
		if _, err := s.DeadLetter(ctx, tok, sink.DeadRecord{Offset: int64(i), Key: []byte("alice"), Value: []byte(`{"amount":500}`),
			Headers: headers, Timestamp: time.Now(), Reason: consumer.ReasonPermanent, Error: "permanent: x", Attempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := router.New(ctx, router.Config{Brokers: cluster.ListenAddrs(), Topic: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	var results []router.Result
	for id := int64(1); id <= 2; id++ {
		res, err := admin.Redrive(ctx, s, rt, id, admin.RedriveOptions{Reason: "fixed"})
		if err != nil {
			t.Fatalf("Redrive(%d): %v", id, err)
		}
		results = append(results, res.Result)
	}
	if results[0].ID != "deposit-c9" || results[1].ID == "" || results[1].ID == results[0].ID {
		t.Fatalf("the redrives' IDs are %q and %q, want deposit-c9 and a generated one", results[0].ID, results[1].ID)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("ledger"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < 2 && ctx.Err() == nil {
		recs = append(recs, cl.PollFetches(ctx).Records()...)
	}
	if len(recs) != 2 {
		t.Fatalf("read %d records, want the 2 redriven", len(recs))
	}
	for i, rec := range recs {
		values := map[string][]string{}
		for _, hd := range rec.Headers {
			values[hd.Key] = append(values[hd.Key], string(hd.Value))
		}
		want := map[string][]string{
			envelope.TypeHeader:       {"deposit"},
			envelope.IDHeader:         {results[i].ID},
			envelope.RedriveOfHeader:  {[]string{"1", "2"}[i]},
			envelope.RedriveForHeader: {"ledger-workers"},
		}
		if i == 0 {
			want["trace"] = []string{"abc"}
		}
		if len(values) != len(want) {
			t.Errorf("record %d has headers %v, want %v", i, values, want)
		}
		for k, vs := range want {
			if got := values[k]; len(got) != len(vs) || got[0] != vs[0] {
				t.Errorf("record %d: header %s is %q, want %q", i, k, got, vs)
			}
		}
		cmd, err := envelope.Decode(rec)
		if err != nil || cmd.ID != results[i].ID || cmd.RedriveFor != "ledger-workers" {
			t.Errorf("record %d decodes to %+v, %v", i, cmd, err)
		}
	}
}
