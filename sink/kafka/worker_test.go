package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
)

// TestSameCommandTwiceTwoOutputs runs a consumer.Worker on the sink
// (BindMember(worker.Member)) and sends it commands, one of them twice
// with the same command ID, and one poison command. The sink declares no
// dedupe window, so the worker passes no IDs and the command sent twice
// yields two outputs, one per input record, each seen once by a
// read_committed consumer; the poison command is a record of the
// dead-letter topic, with its reason and token as headers, and the
// committed offset is past every input.
func TestSameCommandTwiceTwoOutputs(t *testing.T) {
	forBrokers(t, func(t *testing.T, b *broker) {
		ctx := t.Context()
		in := b.topic(t, "in", 1, nil)
		tp := b.sinkTopics(t)
		group := "wr-kafkasink-worker-" + b.sfx
		s := b.newSink(t, tp, nil)
		if f := s.Features(); f.DedupeWindow != 0 || f.Gaps || !f.DeadLetters || f.PreferredBatch != kafka.PreferredBatch {
			t.Fatalf("Features = %+v, want dead letters and a preferred batch of %d only", f, kafka.PreferredBatch)
		}
		tok := epochs.Token{Group: group, Topic: in, Partition: 0, Epoch: 1, Member: "m"}
		if _, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}, IDs: []string{"x"}}, produceEffect(tp.out, []int64{0}, "x")); !errors.Is(err, sink.ErrUnsupported) {
			t.Fatalf("Apply with command IDs: %v, want sink.ErrUnsupported", err)
		}

		// Committed events before the first Revoked are the worker's
		// commits after batches (a revoke commits once more).
		var lagCommits atomic.Int64
		var revoked atomic.Bool
		obs := consumer.ObserverFunc(func(e consumer.Event) {
			switch e.(type) {
			case consumer.Revoked, consumer.Lost:
				revoked.Store(true)
			case consumer.Committed:
				if !revoked.Load() {
					lagCommits.Add(1)
				}
			}
		})
		w, err := consumer.New(ctx, consumer.Config[*kafka.Tx]{
			Observers: []consumer.Observer{obs},
			Brokers:   b.addrs, Group: group, Topic: in, Sink: s,
			SessionTimeout: 6 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
			Handlers: map[string]consumer.Handler[*kafka.Tx]{
				"order": func(ctx context.Context, tx *kafka.Tx, cmd consumer.Command) error {
					return tx.Produce(ctx, kafka.Record{Topic: tp.out, Key: []byte(strconv.FormatInt(cmd.Offset, 10)), Value: []byte(cmd.ID),
						Headers: []kafka.Header{{Key: "command-id", Value: []byte(cmd.ID)}}})
				},
				"poison": func(context.Context, *kafka.Tx, consumer.Command) error {
					return consumer.Permanent(errors.New("this command can never apply"))
				},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		s.BindMember(w.Member)
		closed := false
		defer func() {
			if !closed {
				w.Close()
			}
		}()

		rt, err := router.New(ctx, router.Config{Brokers: b.addrs, Topic: in})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		send := []envelope.Command{
			{Key: []byte("k"), Type: "order", ID: "cmd-1"},
			{Key: []byte("k"), Type: "order", ID: "cmd-2"},
			{Key: []byte("k"), Type: "order", ID: "cmd-1"}, // the same command again
			{Key: []byte("k"), Type: "poison", ID: "cmd-p"},
			{Key: []byte("k"), Type: "order", ID: "cmd-3"},
		}
		for _, c := range send {
			if _, err := rt.Send(ctx, router.Command(c)); err != nil {
				t.Fatal(err)
			}
		}
		testwait.For(t, 60*time.Second, "the worker to commit past every input", func() bool {
			st := w.Stats()
			return st.Records+st.DeadLettered >= int64(len(send))
		})
		got := outputsOf(t, b, tp.out)
		want := map[int64]string{0: "cmd-1", 1: "cmd-2", 2: "cmd-1", 4: "cmd-3"}
		for off, id := range want {
			if v := got[off]; len(v) != 1 || v[0] != id {
				t.Errorf("input %d: outputs %q, want exactly [%s]", off, v, id)
			}
		}
		if len(got) != len(want) {
			t.Errorf("outputs for %d inputs, want %d: %v", len(got), len(want), got)
		}
		dead := b.readCommitted(t, tp.dead)
		if len(dead) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dead))
		}
		d := dead[0]
		if header(d, kafka.HeaderOriginalOffset) != "3" || header(d, kafka.HeaderReason) == "" ||
			header(d, kafka.HeaderToken) == "" || header(d, kafka.HeaderExceptionMessage) == "" || header(d, envelope.IDHeader) != "cmd-p" {
			t.Fatalf("dead letter headers %+v", d.Headers)
		}
		t.Logf("dead letter: reason %q, token %s, error %q", header(d, kafka.HeaderReason), header(d, kafka.HeaderToken), header(d, kafka.HeaderExceptionMessage))

		// The offset commits after each batch are the sink's, in its
		// transactions: the worker makes none of its own while it runs
		// (consumer.OffsetCommitter), since a plain commit of an earlier
		// batch reaching the coordinator after a later batch's
		// transactional commit would move the checkpoint back.
		closed = true
		if err := w.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if n := lagCommits.Load(); n != 0 {
			t.Errorf("the worker made %d offset commits of its own before its partition was revoked, beside the sink's transactions", n)
		}
		offs, err := b.admin(t).FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := offs.Lookup(in, 0); !ok || o.At != int64(len(send)) {
			t.Fatalf("committed offset of %s/0 = %+v, want %d", in, o, len(send))
		}
	})
}
