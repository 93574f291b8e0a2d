package router_test

import (
	"context"
	"fmt"
	"log"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/workrouter/workrouter/router"
)

func ExampleRouter() {
	// An in-process Kafka-protocol broker with a 4-partition topic.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "commands"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	ctx := context.Background()
	r, err := router.New(ctx, router.Config{Brokers: cluster.ListenAddrs(), Topic: "commands"})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	for _, key := range []string{"account-7", "account-9", "account-7"} {
		res, err := r.Send(ctx, router.Command{
			Key:     []byte(key),
			Type:    "ledger.post",
			Payload: []byte(`{"amount":10}`),
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s -> partition %d, offset %d\n", key, res.Partition, res.Offset)
	}
	// Output:
	// account-7 -> partition 3, offset 0
	// account-9 -> partition 0, offset 0
	// account-7 -> partition 3, offset 1
}

// A send that fails ambiguously (here its context is cancelled; a timeout
// or a broken connection is the same: the command may have been written)
// is retried as the same command: with the ID the failed send returned,
// so that workers that deduplicate apply it once. A command can also carry
// the caller's own idempotency key from the start.
func ExampleRouter_Send_retry() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "commands"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	ctx := context.Background()
	r, err := router.New(ctx, router.Config{Brokers: cluster.ListenAddrs(), Topic: "commands"})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	cmd := router.Command{Key: []byte("account-7"), Type: "ledger.post", Payload: []byte(`{"amount":10}`)}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	first, err := r.Send(gone, cmd)
	fmt.Println("first attempt failed:", err != nil, "- its ID is known:", first.ID != "")

	cmd.ID = first.ID // the same command, not a new one
	again, err := r.Send(ctx, cmd)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("retried with the same ID:", again.ID == first.ID)

	own, err := r.Send(ctx, router.Command{Key: []byte("account-9"), Type: "ledger.post", ID: "post-2026-0042"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the caller's own ID:", own.ID)
	// Output:
	// first attempt failed: true - its ID is known: true
	// retried with the same ID: true
	// the caller's own ID: post-2026-0042
}
