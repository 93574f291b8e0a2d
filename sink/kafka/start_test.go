package kafka_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/sink/kafka"
)

// TestNewStartsProducersAtOnce: New starts its transactional producers
// concurrently, their InitProducerId requests at the coordinator
// together (a kfake control holds the first until the second arrives, or
// 10 s), and a producer that cannot start fails New with its own error,
// after New closed the producers that did start (goleak, in TestMain,
// sees a client left open).
func TestNewStartsProducersAtOnce(t *testing.T) {
	b := newFake(t)
	tp := b.sinkTopics(t)
	var (
		mu             sync.Mutex
		seen, in, most int
		second         = make(chan struct{})
	)
	b.kf.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		b.kf.KeepControl()
		mu.Lock()
		seen++
		n := seen
		in++
		most = max(most, in)
		if n == 2 {
			close(second)
		}
		mu.Unlock()
		if n == 1 {
			b.kf.SleepControl(func() {
				select {
				case <-second:
				case <-time.After(10 * time.Second):
				}
			})
		}
		mu.Lock()
		in--
		mu.Unlock()
		if n != 2 {
			return nil, nil, false // the cluster answers it
		}
		resp := kreq.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := kafka.New(ctx, kafka.Config{Brokers: b.addrs, CheckpointTopic: tp.checkpoint,
		TransactionalID: "wr-kafkasink-start-" + b.sfx, Producers: 2})
	if s != nil {
		s.Close()
	}
	if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || !strings.Contains(err.Error(), "start transactional producer") {
		t.Fatalf("New = %v; want the refused producer's start error (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen != 2 {
		t.Fatalf("%d InitProducerId requests; want 2 (one per producer)", seen)
	}
	if most != 2 {
		t.Fatalf("at most %d InitProducerId request at the coordinator at once; want both: New starts its producers one after another", most)
	}
}
