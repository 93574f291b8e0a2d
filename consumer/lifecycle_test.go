package consumer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestClientOptsRefused: every ClientOpt that would undo a guarantee is
// refused by New with an error naming the option; harmless ones pass.
func TestClientOptsRefused(t *testing.T) {
	base := func(opts ...kgo.Opt) consumer.Config[*memory.Tx] {
		return consumer.Config[*memory.Tx]{
			Brokers: []string{"127.0.0.1:1"}, Group: "g", Topic: "t", Sink: memory.New(),
			Handlers:   map[string]consumer.Handler[*memory.Tx]{"append": appendHandler},
			ClientOpts: opts,
		}
	}
	noop := func(context.Context, *kgo.Client, map[string][]int32) {}
	refused := map[string]kgo.Opt{
		"ConsumerGroup":        kgo.ConsumerGroup("other"),
		"ConsumeTopics":        kgo.ConsumeTopics("other"),
		"ConsumeRegex":         kgo.ConsumeRegex(),
		"ConsumePartitions":    kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset()}}),
		"Balancers":            kgo.Balancers(kgo.RoundRobinBalancer()),
		"AutoCommitMarks":      kgo.AutoCommitMarks(),
		"AutoCommitInterval":   kgo.AutoCommitInterval(time.Second),
		"GreedyAutoCommit":     kgo.GreedyAutoCommit(),
		"BlockRebalanceOnPoll": kgo.BlockRebalanceOnPoll(),
		"OnPartitionsAssigned": kgo.OnPartitionsAssigned(noop),
		"OnPartitionsRevoked":  kgo.OnPartitionsRevoked(noop),
		"OnPartitionsLost":     kgo.OnPartitionsLost(noop),
		"AdjustFetchOffsetsFn": kgo.AdjustFetchOffsetsFn(func(_ context.Context, o map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			return o, nil
		}),
		"FetchIsolationLevel":       kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		"KeepControlRecords":        kgo.KeepControlRecords(),
		"ConsumeResetOffset":        kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		"ShareGroup":                kgo.ShareGroup("s"),
		"ServerSideBalancer":        kgo.ServerSideBalancer(),
		"GroupProtocol":             kgo.GroupProtocol("consumer"),
		"ConsumeExcludeTopics":      kgo.ConsumeExcludeTopics("x"),
		"AutoCommitCallback":        kgo.AutoCommitCallback(func(*kgo.Client, *kmsg.OffsetCommitRequest, *kmsg.OffsetCommitResponse, error) {}),
		"ConsumeStartOffset":        kgo.ConsumeStartOffset(kgo.NewOffset().AtEnd()),
		"DisableAutoCommit":         kgo.DisableAutoCommit(),
		"RequireStableFetchOffsets": kgo.RequireStableFetchOffsets(),
		"OnOffsetsFetched":          kgo.OnOffsetsFetched(func(context.Context, *kgo.Client, *kmsg.OffsetFetchResponse) error { return nil }),
	}
	for name, opt := range refused {
		_, err := consumer.New(context.Background(), base(kgo.ClientID("ok"), opt))
		if !errors.Is(err, consumer.ErrConfig) || !strings.Contains(err.Error(), "kgo."+name) {
			t.Errorf("ClientOpts with kgo.%s: err = %v, want ErrConfig naming kgo.%s", name, err, name)
		}
	}
	if _, err := consumer.New(context.Background(), base(kgo.InstanceID("i"))); !errors.Is(err, consumer.ErrStaticMembership) {
		t.Errorf("ClientOpts with kgo.InstanceID: err = %v, want ErrStaticMembership", err)
	}
	// Harmless options pass validation (and fail only on the unreachable broker).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := consumer.New(ctx, base(kgo.ClientID("x"), kgo.FetchMaxBytes(1<<20), kgo.DialTimeout(time.Second)))
	if errors.Is(err, consumer.ErrConfig) || err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("harmless ClientOpts: err = %v, want only the unreachable-broker error", err)
	}
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []consumer.Event
}

func (r *recorder) Observe(e consumer.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.Kind())
	}
	return out
}

func (r *recorder) all() []consumer.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// TestEventsFollowTheProtocol: a Worker's events arrive in protocol order
// per partition (assigned, claimed, applied…, revoked) with the tenure's
// token, and the last one is Stopped with ErrClosed; Done and Err agree.
func TestEventsFollowTheProtocol(t *testing.T) {
	t.Parallel()
	const partitions = 2
	c := newCluster(t, partitions)
	s := memory.New()
	keys := makeKeys(20)
	produce(t, c, partitions, keys, 0, 10)
	rec := &recorder{}
	w := startWorker(t, c, s, workerOpts{name: "w1", observers: []consumer.Observer{rec}})
	testwait.For(t, 30*time.Second, "every command applied", func() bool { return appliedCount(s, keys) == len(keys)*10 })
	select {
	case <-w.Done():
		t.Fatal("Done closed while the worker runs")
	default:
	}
	if err := w.Err(); err != nil {
		t.Fatalf("Err = %v while running", err)
	}
	w.Close()
	<-w.Done()
	if !errors.Is(w.Err(), consumer.ErrClosed) {
		t.Fatalf("Err after Close = %v, want ErrClosed", w.Err())
	}
	w.Close() // idempotent

	evs := rec.all()
	if last := evs[len(evs)-1]; last.Kind() != consumer.KindStopped || !errors.Is(last.(consumer.Stopped).Err, consumer.ErrClosed) {
		t.Fatalf("last event %#v, want Stopped(ErrClosed)", last)
	}
	// Per partition: assigned, claimed, applied…, revoked, all with one token.
	applied := 0
	for p := int32(0); p < partitions; p++ {
		var seq []string
		var tok = consumer.Assigned{}.Token
		for _, e := range evs {
			var kind string
			switch e := e.(type) {
			case consumer.Assigned:
				if e.Token.Partition != p {
					continue
				}
				kind, tok = e.Kind(), e.Token
			case consumer.Claimed:
				if e.Token.Partition != p {
					continue
				}
				if e.Token != tok {
					t.Errorf("partition %d claimed with %v, assigned %v", p, e.Token, tok)
				}
				kind = e.Kind()
			case consumer.Applied:
				if e.Token.Partition != p {
					continue
				}
				applied += e.Applied
				kind = e.Kind()
			case consumer.Revoked:
				if e.Token.Partition != p {
					continue
				}
				kind = e.Kind()
			default:
				continue
			}
			if len(seq) == 0 || seq[len(seq)-1] != kind {
				seq = append(seq, kind)
			}
		}
		want := []string{consumer.KindAssigned, consumer.KindClaimed, consumer.KindApplied, consumer.KindRevoked}
		if !slices.Equal(seq, want) {
			t.Errorf("partition %d events %v, want %v", p, seq, want)
		}
	}
	if applied != len(keys)*10 {
		t.Errorf("Applied events sum to %d records, the sink holds %d", applied, len(keys)*10)
	}
	if !slices.Contains(rec.kinds(), consumer.KindCommitted) {
		t.Errorf("no Committed event: %v", rec.kinds())
	}
}

// TestFatalGroupErrorStopsWorker: when the coordinator refuses the member
// for a reason a retry cannot fix (here GROUP_AUTHORIZATION_FAILED on
// every JoinGroup), the Worker stops by itself: Done is closed and Err
// says why, matching the broker's error code.
func TestFatalGroupErrorStopsWorker(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1)
	var refusals int
	var mu sync.Mutex
	c.kf.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.kf.KeepControl()
		mu.Lock()
		refusals++
		mu.Unlock()
		resp := req.(*kmsg.JoinGroupRequest).ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp, nil, true
	})
	rec := &recorder{}
	w, err := consumer.New(context.Background(), consumer.Config[*memory.Tx]{
		Brokers: c.ListenAddrs(), Group: c.group, Topic: c.topic, Sink: memory.New(),
		Handlers:  map[string]consumer.Handler[*memory.Tx]{"append": appendHandler},
		Observers: []consumer.Observer{rec},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	select {
	case <-w.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop after its joins were refused")
	}
	mu.Lock()
	n := refusals
	mu.Unlock()
	if n == 0 {
		t.Fatal("no JoinGroup was refused: the fault did not happen")
	}
	var fe *consumer.FatalError
	if err := w.Err(); !errors.As(err, &fe) || !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("Err = %v, want a *FatalError matching GROUP_AUTHORIZATION_FAILED", err)
	}
	if !slices.Contains(rec.kinds(), consumer.KindFetchFailed) || rec.kinds()[len(rec.kinds())-1] != consumer.KindStopped {
		t.Errorf("events %v: want a fetch_failed and a final stopped", rec.kinds())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if errors.Is(w.Err(), consumer.ErrClosed) {
		t.Fatal("Close after a fatal stop replaced the reason with ErrClosed")
	}
}
