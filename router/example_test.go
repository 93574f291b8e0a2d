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
