package router_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"

	"github.com/workrouter/workrouter/router"
)

const topic = "cmds"

func TestSendPlacesByKeyAndConsumesBack(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	ctx := testContext(t)

	var sent []router.Command
	nextOffset := map[int32]int64{}
	for i := range 40 {
		cmd := router.Command{
			Key:     fmt.Appendf(nil, "key-%d", i%10),
			Type:    "test.cmd",
			Payload: fmt.Appendf(nil, "payload-%d", i),
			Headers: []envelope.Header{{Key: "seq", Value: fmt.Appendf(nil, "%d", i)}},
		}
		res, err := r.Send(ctx, cmd)
		if err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
		if want := envelope.Partition(cmd.Key, 4); res.Partition != want {
			t.Errorf("Send(%q) partition = %d, want Partition(key, 4) = %d", cmd.Key, res.Partition, want)
		}
		if res.Offset != nextOffset[res.Partition] {
			t.Errorf("Send %d offset = %d, want %d", i, res.Offset, nextOffset[res.Partition])
		}
		nextOffset[res.Partition]++
		sent = append(sent, cmd)
	}

	recs := consume(t, addrs, topic, len(sent))
	perKey := map[string][]router.Command{}
	for _, rec := range recs {
		if want := envelope.Partition(rec.Key, 4); rec.Partition != want {
			t.Errorf("record %q on partition %d, want %d", rec.Key, rec.Partition, want)
		}
		cmd, err := envelope.Decode(rec)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		perKey[string(cmd.Key)] = append(perKey[string(cmd.Key)], cmd)
	}
	// Per key, the consumed commands equal the sent ones, in send order.
	for _, want := range sent {
		k := string(want.Key)
		if len(perKey[k]) == 0 {
			t.Fatalf("command %+v not consumed", want)
		}
		got := perKey[k][0]
		perKey[k] = perKey[k][1:]
		if got.Type != want.Type || !bytes.Equal(got.Payload, want.Payload) ||
			len(got.Headers) != 1 || got.Headers[0].Key != "seq" || !bytes.Equal(got.Headers[0].Value, want.Headers[0].Value) {
			t.Errorf("consumed %+v, want %+v", got, want)
		}
	}
}

func TestSendAsyncCallsBackOncePerSend(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	ctx := testContext(t)

	const goroutines, perG = 8, 250
	var calls [goroutines * perG]atomic.Int32
	var failed atomic.Int32
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				n := g*perG + i
				cmd := router.Command{Key: fmt.Appendf(nil, "k%d", n%37), Type: "t", Payload: fmt.Appendf(nil, "%d", n)}
				if n%50 == 0 {
					cmd.Type = "" // a validation failure still gets its callback
				}
				r.SendAsync(ctx, cmd, func(res router.Result, err error) {
					calls[n].Add(1)
					if n%50 == 0 {
						if !errors.Is(err, envelope.ErrEmptyType) {
							t.Errorf("send %d: err = %v, want ErrEmptyType", n, err)
						}
						return
					}
					if err != nil {
						failed.Add(1)
						t.Errorf("send %d: %v", n, err)
					}
				})
			}
		})
	}
	wg.Wait()
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for n := range calls {
		if c := calls[n].Load(); c != 1 {
			t.Errorf("send %d: callback called %d times, want 1", n, c)
		}
	}
	wantRecords := goroutines*perG - goroutines*perG/50
	if got := len(consume(t, addrs, topic, wantRecords)); got != wantRecords {
		t.Errorf("consumed %d records, want %d", got, wantRecords)
	}
}

func TestSendValidationErrors(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	ctx := testContext(t)
	for _, c := range []struct {
		cmd  router.Command
		want error
	}{
		{router.Command{Type: "t"}, envelope.ErrEmptyKey},
		{router.Command{Key: []byte("k")}, envelope.ErrEmptyType},
		{router.Command{Key: []byte("k"), Type: "t", Headers: []envelope.Header{{Key: envelope.TypeHeader}}}, envelope.ErrReservedHeader},
	} {
		if _, err := r.Send(ctx, c.cmd); !errors.Is(err, c.want) {
			t.Errorf("Send(%+v) = %v, want %v", c.cmd, err, c.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	ctx := testContext(t)
	manual := newClient(t, addrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	hashing := newClient(t, addrs)
	for _, c := range []struct {
		name string
		cfg  router.Config
		want error
	}{
		{"no topic", router.Config{Brokers: addrs}, router.ErrConfig},
		{"no brokers", router.Config{Topic: topic}, router.ErrConfig},
		{"bad policy", router.Config{Brokers: addrs, Topic: topic, OnPartitionCountChange: 7}, router.ErrConfig},
		{"negative interval", router.Config{Brokers: addrs, Topic: topic, PartitionCheckInterval: -1}, router.ErrConfig},
		{"client without manual partitioner", router.Config{Client: hashing, Topic: topic}, router.ErrConfig},
		{"missing topic", router.Config{Brokers: addrs, Topic: "nope"}, router.ErrTopicNotFound},
		{"missing topic, given client", router.Config{Client: manual, Topic: "nope"}, router.ErrTopicNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := router.New(ctx, c.cfg)
			if !errors.Is(err, c.want) {
				t.Errorf("New = %v, want %v", err, c.want)
			}
			if r != nil {
				t.Errorf("New returned a router with error %v", err)
				r.Close()
			}
		})
	}
}

func TestNewUnreachableBrokers(t *testing.T) {
	// An address nothing listens on: bind a port, then release it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	dead := ln.Addr().String()
	ln.Close()
	r, err := router.New(testContext(t), router.Config{
		Brokers: []string{dead}, Topic: topic,
		ClientOpts: []kgo.Opt{kgo.RequestRetries(0)},
	})
	if !errors.Is(err, router.ErrMetadata) || r != nil {
		t.Errorf("New with unreachable brokers = %v, %v, want ErrMetadata", r, err)
	}
}

func TestPartitionCountChangeRefuse(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r := newRouter(t, router.Config{Brokers: addrs, Topic: topic})
	ctx := testContext(t)
	cmd := router.Command{Key: []byte("k"), Type: "t"}
	if _, err := r.Send(ctx, cmd); err != nil {
		t.Fatalf("Send before change: %v", err)
	}
	if err := r.CheckPartitions(ctx); err != nil {
		t.Fatalf("CheckPartitions without change: %v", err)
	}

	before, after := addPartitions(t, addrs, topic, 2)

	err := r.CheckPartitions(ctx)
	if !errors.Is(err, router.ErrPartitionCountChanged) {
		t.Fatalf("CheckPartitions after change = %v, want ErrPartitionCountChanged", err)
	}
	_, err = r.Send(ctx, cmd)
	var pce *router.PartitionCountChangedError
	if !errors.As(err, &pce) || !errors.Is(err, router.ErrPartitionCountChanged) {
		t.Fatalf("Send after change = %v, want *PartitionCountChangedError", err)
	}
	if pce.Topic != topic || pce.Expected != before || pce.Current != after {
		t.Errorf("error = %+v, want {%s %d %d}", *pce, topic, before, after)
	}
	for _, s := range []string{"per-key serialization", "drain", "restart"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error message %q does not mention %q", err, s)
		}
	}
	called := 0
	r.SendAsync(ctx, cmd, func(_ router.Result, err error) {
		called++
		if !errors.Is(err, router.ErrPartitionCountChanged) {
			t.Errorf("SendAsync after change = %v, want ErrPartitionCountChanged", err)
		}
	})
	if called != 1 {
		t.Errorf("SendAsync callback called %d times, want 1", called)
	}
	// Refusal is sticky.
	if err := r.CheckPartitions(ctx); !errors.Is(err, router.ErrPartitionCountChanged) {
		t.Errorf("second CheckPartitions = %v, want ErrPartitionCountChanged", err)
	}
}

func TestPartitionCountChangeAlarm(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	var (
		mu     sync.Mutex
		alarms []router.PartitionCountChangedError
	)
	r := newRouter(t, router.Config{
		Brokers: addrs, Topic: topic,
		OnPartitionCountChange: router.Alarm,
		OnAlarm: func(e router.PartitionCountChangedError) {
			mu.Lock()
			defer mu.Unlock()
			alarms = append(alarms, e)
		},
	})
	ctx := testContext(t)
	// A key that moves to one of the new partitions.
	var key []byte
	for i := 0; ; i++ {
		key = fmt.Appendf(nil, "key-%d", i)
		if envelope.Partition(key, 6) >= 4 {
			break
		}
	}
	cmd := router.Command{Key: key, Type: "t"}
	if res, err := r.Send(ctx, cmd); err != nil || res.Partition != envelope.Partition(key, 4) {
		t.Fatalf("Send before change = %+v, %v; want partition %d", res, err, envelope.Partition(key, 4))
	}

	before, after := addPartitions(t, addrs, topic, 2)

	for range 2 { // the second check sees no new change: no second alarm
		if err := r.CheckPartitions(ctx); err != nil {
			t.Fatalf("CheckPartitions under Alarm: %v", err)
		}
	}
	mu.Lock()
	got := append([]router.PartitionCountChangedError(nil), alarms...)
	mu.Unlock()
	want := router.PartitionCountChangedError{Topic: topic, Expected: before, Current: after}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("OnAlarm calls = %+v, want exactly [%+v]", got, want)
	}
	res, err := r.Send(ctx, cmd)
	if err != nil {
		t.Fatalf("Send after change under Alarm: %v", err)
	}
	if wantP := envelope.Partition(key, after); res.Partition != wantP {
		t.Errorf("Send after change: partition %d, want %d (new count %d)", res.Partition, wantP, after)
	}
}

func TestBackgroundCheckDetectsChange(t *testing.T) {
	addrs := newCluster(t, topic, 2)
	alarms := make(chan router.PartitionCountChangedError, 1)
	var extra atomic.Int32
	r := newRouter(t, router.Config{
		Brokers: addrs, Topic: topic,
		OnPartitionCountChange: router.Alarm,
		OnAlarm: func(e router.PartitionCountChangedError) {
			select {
			case alarms <- e:
			default:
				extra.Add(1) // reported below; never block the router
			}
		},
		PartitionCheckInterval: 5 * time.Millisecond,
	})
	before, after := addPartitions(t, addrs, topic, 1)
	select {
	case e := <-alarms:
		if e.Expected != before || e.Current != after {
			t.Errorf("alarm %+v, want %d -> %d", e, before, after)
		}
	case <-testContext(t).Done():
		t.Fatal("the router's goroutine never reported the partition count change")
	}
	if err := r.Close(); err != nil { // stops and waits for the checker goroutine
		t.Fatalf("Close: %v", err)
	}
	if n := extra.Load(); n != 0 {
		t.Errorf("OnAlarm called %d extra times for one change", n)
	}
}

func TestCloseIdempotentAndErrClosed(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	r, err := router.New(testContext(t), router.Config{Brokers: addrs, Topic: topic})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := testContext(t)
	cmd := router.Command{Key: []byte("k"), Type: "t"}
	done := make(chan error, 1)
	r.SendAsync(ctx, cmd, func(_ router.Result, err error) { done <- err })
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("send outstanding at Close: %v (Close must flush it)", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := r.Send(ctx, cmd); !errors.Is(err, router.ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
	calls := 0
	r.SendAsync(ctx, cmd, func(_ router.Result, err error) {
		calls++
		if !errors.Is(err, router.ErrClosed) {
			t.Errorf("SendAsync after Close = %v, want ErrClosed", err)
		}
	})
	if calls != 1 {
		t.Errorf("SendAsync after Close called back %d times, want 1", calls)
	}
	if err := r.Flush(ctx); !errors.Is(err, router.ErrClosed) {
		t.Errorf("Flush after Close = %v, want ErrClosed", err)
	}
	if err := r.CheckPartitions(ctx); !errors.Is(err, router.ErrClosed) {
		t.Errorf("CheckPartitions after Close = %v, want ErrClosed", err)
	}
}

func TestCallerClientIsNotClosed(t *testing.T) {
	addrs := newCluster(t, topic, 4)
	cl := newClient(t, addrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	r, err := router.New(testContext(t), router.Config{Client: cl, Topic: topic})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := testContext(t)
	res, err := r.Send(ctx, router.Command{Key: []byte("k"), Type: "t"})
	if err != nil || res.Partition != envelope.Partition([]byte("k"), 4) {
		t.Fatalf("Send = %+v, %v", res, err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The caller's client still works.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("x")}).FirstErr(); err != nil {
		t.Errorf("caller's client after router Close: %v", err)
	}
}
