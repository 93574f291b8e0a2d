package consumer_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink/memory"
)

// A worker applies each command's effects through the sink's transaction
// handle; the sink fences every batch with the tenure token.
func ExampleWorker() {
	broker, _ := kfake.NewCluster(kfake.SeedTopics(3, "orders"))
	defer broker.Close()
	ctx := context.Background()

	rt, err := router.New(ctx, router.Config{Brokers: broker.ListenAddrs(), Topic: "orders"})
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	for _, id := range []string{"order-1", "order-2", "order-1"} {
		if _, err := rt.Send(ctx, router.Command{Key: []byte(id), Type: "touch"}); err != nil {
			panic(err)
		}
	}

	s := memory.New()
	w, err := consumer.New(ctx, consumer.Config[*memory.Tx]{
		Brokers: broker.ListenAddrs(),
		Group:   "order-workers",
		Topic:   "orders",
		Sink:    s,
		Handlers: map[string]consumer.Handler[*memory.Tx]{
			"touch": func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
				n, _ := tx.Get(string(cmd.Key))
				tx.Put(string(cmd.Key), append(n, '+'))
				return nil
			},
		},
	})
	if err != nil {
		panic(err)
	}
	defer w.Close()

	for {
		a, _ := s.Get("order-1")
		b, _ := s.Get("order-2")
		if len(a) == 2 && len(b) == 1 {
			fmt.Println("order-1:", string(a), "order-2:", string(b))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output: order-1: ++ order-2: +
}
