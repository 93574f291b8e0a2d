package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/kafka"
)

// TestChurnExactlyOnce: workers on the sink join and leave while the
// commands of 4 partitions are applied (each leave a rebalance that moves
// the generation of the members that keep their partitions, each join
// another), and a last wave of commands comes after the churn, to workers
// whose tenures began before the group's last generation: a read_committed
// consumer sees exactly one output per input.
func TestChurnExactlyOnce(t *testing.T) {
	forBrokers(t, func(t *testing.T, b *broker) {
		const parts, total, extra = 4, 4000, 400
		in := b.topic(t, "in", parts, nil)
		tp := b.sinkTopics(t)
		group := "wr-kafkasink-churn-" + b.sfx
		session := 6 * time.Second
		if b.kf != nil {
			session = time.Second
		}
		start := func() (*consumer.Worker[*kafka.Tx], *kafka.Sink) {
			s := b.newSink(t, tp, nil)
			w, err := consumer.New(t.Context(), consumer.Config[*kafka.Tx]{
				Brokers: b.addrs, Group: group, Topic: in, Sink: s, MaxBatch: 64,
				SessionTimeout: session, HeartbeatInterval: session / 10,
				Handlers: map[string]consumer.Handler[*kafka.Tx]{
					"order": func(ctx context.Context, tx *kafka.Tx, cmd consumer.Command) error {
						return tx.Produce(ctx, kafka.Record{Topic: tp.out, Key: []byte(fmt.Sprintf("%d/%d", cmd.Token.Partition, cmd.Offset)), Value: []byte(cmd.Token.Member)})
					},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			s.BindMember(w.Member)
			return w, s
		}
		pcl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.DefaultProduceTopic(in))
		if err != nil {
			t.Fatal(err)
		}
		defer pcl.Close()
		produced := make(chan error, 1)
		go func() {
			for i := range total {
				if i%100 == 0 {
					time.Sleep(60 * time.Millisecond) // spread the work over the churn
				}
				r := &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%97)), Headers: []kgo.RecordHeader{{Key: "workrouter-type", Value: []byte("order")}}}
				if err := pcl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
					produced <- err
					return
				}
			}
			produced <- nil
		}()
		var workers []*consumer.Worker[*kafka.Tx]
		for range 2 {
			w, _ := start()
			workers = append(workers, w)
		}
		adm := b.admin(t)
		committed := func() int64 {
			offs, err := adm.FetchOffsets(context.Background(), group)
			if err != nil {
				return -1
			}
			var sum int64
			for p := range int32(parts) {
				if o, ok := offs.Lookup(in, p); ok && o.At > 0 {
					sum += o.At
				}
			}
			return sum
		}
		// Churn: a new worker joins, the oldest leaves, while work is
		// left to do.
		steps := 0
		for steps < 4 && committed() < total {
			time.Sleep(300 * time.Millisecond)
			w, _ := start()
			workers = append(workers, w)
			time.Sleep(300 * time.Millisecond)
			if err := workers[0].Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			workers = workers[1:]
			steps++
		}
		if err := <-produced; err != nil {
			t.Fatal(err)
		}
		// A last wave after the churn: the workers left keep partitions
		// whose tokens are older than the group's generation now.
		for i := range extra {
			r := &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%97)), Headers: []kgo.RecordHeader{{Key: "workrouter-type", Value: []byte("order")}}}
			if err := pcl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		testwait.For(t, 60*time.Second, "the group to commit every input", func() bool { return committed() == total+extra })
		for _, w := range workers {
			w.Close()
		}
		t.Logf("%d churn steps", steps)
		seen := map[string]int{}
		for _, r := range b.readCommitted(t, tp.out) {
			seen[string(r.Key)]++
		}
		dups := 0
		for k, n := range seen {
			if n != 1 {
				dups++
				if dups < 10 {
					t.Errorf("input %s: %d outputs, want 1", k, n)
				}
			}
		}
		if len(seen) != total+extra || dups != 0 {
			t.Fatalf("%d inputs have outputs, %d of them more than one; want %d, each once", len(seen), dups, total+extra)
		}
		if steps < 3 {
			t.Fatalf("%d churn steps: the work was done before the churn", steps)
		}
	})
}
