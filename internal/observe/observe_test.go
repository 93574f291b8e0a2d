package observe_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/internal/observe"
	"github.com/workrouter/workrouter/internal/topicid"
)

// TestReadLogRetriesWhenTheTopicIDMoves: when the topic ID read after the
// offsets is not the one read before them (the topic was recreated in
// between, so the offsets may be of either log), ReadLog looks again, and
// returns a look whose two reads agree.
func TestReadLogRetriesWhenTheTopicIDMoves(t *testing.T) {
	const topic = "orders"
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	real, err := topicid.Read(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}

	// After the first look's two offset listings, the next metadata
	// request (the look's second read of the ID) is answered with another
	// topic ID, once.
	var mu sync.Mutex
	listings, served := 0, 0
	kf.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		mu.Lock()
		listings++
		mu.Unlock()
		return nil, nil, false
	})
	kf.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		if listings != 2 || served > 0 {
			return nil, nil, false
		}
		served++
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic = kmsg.StringPtr(topic)
		rt.TopicID = [16]byte{0xde, 0xad}
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})

	look, err := observe.ReadLog(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if served != 1 {
		t.Fatalf("the moved topic ID was served %d times, want 1: the fault did not happen", served)
	}
	if listings != 4 {
		t.Fatalf("ReadLog listed offsets %d times, want 4 (a second look after the ID moved)", listings)
	}
	if look.ID != real || len(look.Partitions) != 2 || look.Partitions[0] != 0 || look.Partitions[1] != 1 {
		t.Fatalf("look: ID %x, partitions %v; want ID %x, partitions [0 1]", look.ID, look.Partitions, real)
	}
	if obs, err := look.Observed(topic, 1); err != nil || obs.TopicID != look.TopicID() || obs.LogEnd != 0 {
		t.Fatalf("Observed(1): %+v, %v", obs, err)
	}
}
