package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/memory"
)

// A worker dead-lettered a deposit its handler refused; once the handler
// is fixed, an operator's tool lists the open dead letters, redrives the
// deposit through the router as a new command, and reads its audit rows.
func ExampleRedrive() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "ledger"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	// The sink, holding the dead letter as a worker stores it.
	s := memory.New()
	tok := epochs.Token{Group: "ledger-workers", Topic: "ledger", Partition: 1, Epoch: 1, Member: "m-1"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		log.Fatal(err)
	}
	if _, err := s.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 0, Key: []byte("alice"), Value: []byte(`{"amount":500}`),
		Headers:   []sink.RecordHeader{{Key: envelope.TypeHeader, Value: []byte("deposit")}},
		Timestamp: time.Now(), Reason: consumer.ReasonPermanent, Error: "permanent: unknown currency", Attempts: 1}); err != nil {
		log.Fatal(err)
	}

	page, err := admin.DeadLetters(ctx, s, admin.DeadLetterQuery{States: []dlq.State{dlq.Open}})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range page.DeadLetters {
		fmt.Printf("dead letter %d: %s offset %d, %s %s: %s\n", d.ID, d.Scope, d.Record.Offset, admin.RecordType(d.Record), d.Record.Key, d.Record.Reason)
	}

	rt, err := router.New(ctx, router.Config{Brokers: cluster.ListenAddrs(), Topic: "ledger"})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	res, err := admin.Redrive(ctx, s, rt, 1, admin.RedriveOptions{Reason: "INC-88: currency table fixed", Actor: "ops-bot"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("redriven: %s\n", res.Detail)

	audit, err := admin.DeadLetterAudit(ctx, s, 1)
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range audit {
		fmt.Printf("%s -> %s: %s (%s)\n", a.From, a.To, a.Reason, a.Detail)
	}
	// Output:
	// dead letter 1: ledger-workers/ledger/1 offset 0, deposit alice: permanent
	// redriven: produced to ledger partition 1 offset 0
	// open -> redriving: INC-88: currency table fixed (ops-bot: producing it again to topic ledger)
	// redriving -> redriven: INC-88: currency table fixed (produced to ledger partition 1 offset 0)
}

// A record that is not a command (here: no key) cannot be redriven; the
// operator drops it instead, with the reason in its audit row.
func ExampleDrop() {
	ctx := context.Background()
	s := memory.New()
	tok := epochs.Token{Group: "ledger-workers", Topic: "ledger", Partition: 0, Epoch: 1, Member: "m-0"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		log.Fatal(err)
	}
	if _, err := s.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 0, Value: []byte("hello"), Timestamp: time.Now(),
		Reason: consumer.ReasonUndecodable, Error: "consumer: undecodable record: no key"}); err != nil {
		log.Fatal(err)
	}

	_, err := admin.PlanRedrive(ctx, s, 1)
	fmt.Println("redrive refused, not a command:", errors.Is(err, admin.ErrNotACommand))
	d, err := admin.Drop(ctx, s, 1, admin.DropOptions{Reason: "a stray record from a test producer", Actor: "ops-bot"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("dead letter %d is %s\n", d.ID, d.State)
	_, err = admin.Drop(ctx, s, 1, admin.DropOptions{Reason: "again"})
	fmt.Println(err)
	// Output:
	// redrive refused, not a command: true
	// dead letter 1 is dropped
	// admin.Drop: dead letter 1 is dropped, not open
}
