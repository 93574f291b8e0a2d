package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCleanupDeletesTopics runs Setup against an external broker (a kfake
// cluster of the test's own, not Setup's embedded one): its cleanup
// deletes the pre-loaded topic and a row's topics, and returns the
// topics the broker refused to delete, so a run on a shared broker says
// what it left behind.
func TestCleanupDeletesTopics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	exists := func(topic string) bool {
		t.Helper()
		// A client of its own: a client's metadata may be cached.
		adm, err := kadm.NewOptClient(kgo.SeedBrokers(kf.ListenAddrs()...))
		if err != nil {
			t.Fatal(err)
		}
		defer adm.Close()
		td, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return td.Has(topic)
	}

	setup := func() (*Env, func() error) {
		env, cleanup, err := Setup(ctx, SetupConfig{Brokers: kf.ListenAddrs(), Records: 100, Keys: 10})
		if err != nil {
			t.Fatal(err)
		}
		if Cluster(env) != nil {
			t.Fatal("Setup started an embedded broker beside the external one")
		}
		return env, cleanup
	}

	// Deleted: the pre-loaded topic and a row's.
	env, cleanup := setup()
	row, drop, err := createTopic(ctx, env, "test-row", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !exists(env.Topic) || !exists(row) {
		t.Fatalf("topics %s and %s not created", env.Topic, row)
	}
	drop()
	if err := cleanup(); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	for _, topic := range []string{env.Topic, row} {
		if exists(topic) {
			t.Errorf("topic %s left on the broker after cleanup", topic)
		}
	}

	// Refused: the broker answers every deletion with an error.
	env, cleanup = setup()
	var refused int
	kf.ControlKey(int16(kmsg.DeleteTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		refused++
		r := req.(*kmsg.DeleteTopicsRequest)
		resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
		for _, tr := range r.Topics {
			st := kmsg.NewDeleteTopicsResponseTopic()
			st.Topic = tr.Topic
			st.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	row, drop, err = createTopic(ctx, env, "test-row", 1)
	if err != nil {
		t.Fatal(err)
	}
	drop()
	err = cleanup()
	if refused < 2 {
		t.Fatalf("the broker refused %d deletions, want the row's and the pre-loaded topic's", refused)
	}
	if err == nil {
		t.Fatal("cleanup returned no error though the broker refused every deletion")
	}
	for _, topic := range []string{env.Topic, row} {
		if !strings.Contains(err.Error(), topic) {
			t.Errorf("cleanup's error does not name the topic %s it left: %v", topic, err)
		}
	}
}
