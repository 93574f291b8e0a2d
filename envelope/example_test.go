package envelope_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
)

func ExamplePartition() {
	// The same partitions the Java client's default partitioner picks.
	for _, key := range []string{"21", "foobar", "account-7"} {
		fmt.Printf("%s -> %d of 12\n", key, envelope.Partition([]byte(key), 12))
	}
	// Output:
	// 21 -> 0 of 12
	// foobar -> 6 of 12
	// account-7 -> 11 of 12
}

func ExamplePartitioner() {
	// librdkafka's default places keys by CRC32, Kafka's by murmur2: a
	// topic's producers and its workers must use the same.
	p, err := envelope.ParsePartitioner("consistent_random")
	if err != nil {
		log.Fatal(err)
	}
	for _, key := range []string{"acct-0", "acct-9"} {
		fmt.Printf("%s -> %d of 6 (%v), %d of 6 (%v)\n", key,
			p.Partition([]byte(key), 6), p, envelope.Murmur2.Partition([]byte(key), 6), envelope.Murmur2)
	}
	// Output:
	// acct-0 -> 1 of 6 (crc32), 0 of 6 (murmur2)
	// acct-9 -> 3 of 6 (crc32), 0 of 6 (murmur2)
}

func ExampleEncode() {
	rec, err := envelope.Encode("commands", 3, envelope.Command{
		Key:     []byte("account-7"),
		Type:    "ledger.post",
		ID:      "post-0042", // the caller's idempotency key
		Payload: []byte(`{"amount":10}`),
		Headers: []envelope.Header{{Key: "trace", Value: []byte("abc")}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s/%d key=%s value=%s\n", rec.Topic, rec.Partition, rec.Key, rec.Value)
	for _, h := range rec.Headers {
		fmt.Printf("header %s=%s\n", h.Key, h.Value)
	}

	// A reserved header is not a user header, even one this version does
	// not know.
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "workrouter-future", Value: []byte{1}})
	cmd, err := envelope.Decode(rec)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("decoded %s %s (ID %s), %d user header\n", cmd.Type, cmd.Key, cmd.ID, len(cmd.Headers))

	_, err = envelope.Decode(&kgo.Record{Key: []byte("k")})
	fmt.Println(errors.Is(err, envelope.ErrMalformedRecord), errors.Is(err, envelope.ErrMissingType))
	// Output:
	// commands/3 key=account-7 value={"amount":10}
	// header workrouter-type=ledger.post
	// header workrouter-id=post-0042
	// header trace=abc
	// decoded ledger.post account-7 (ID post-0042), 1 user header
	// true true
}
