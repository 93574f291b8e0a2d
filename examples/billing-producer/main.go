// Command billing-producer is the README's producer: it asks for one
// tenant's billing run by sending a keyed command to topic "billing". Every
// command of one tenant goes to the same partition, so one worker at a time
// applies them, in order.
//
//	go run ./examples/billing-producer -brokers 127.0.0.1:9092 -tenant tenant-42 -period 2026-11
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/workrouter/workrouter/router"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka brokers, comma-separated")
	tenant := flag.String("tenant", "tenant-42", "tenant to bill (the command's key)")
	period := flag.String("period", "2026-11", "billing period (the command's payload)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rt, err := router.New(ctx, router.Config{Brokers: strings.Split(*brokers, ","), Topic: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close() // flushes anything still buffered
	res, err := rt.Send(ctx, router.Command{Key: []byte(*tenant), Type: "run-billing", Payload: []byte(*period)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("partition=%d offset=%d\n", res.Partition, res.Offset)
}
