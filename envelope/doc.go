// Package envelope is the wire format of a workrouter command: what every
// producer and consumer of a command topic agree on, whichever side they
// are on and whatever language they are written in.
//
// A [Command] travels as one Kafka record:
//
//   - the record key is the command's Key (required): it selects the
//     partition, and so the one worker that applies the command;
//   - the record value is the command's Payload, opaque to workrouter;
//   - the [TypeHeader] record header carries its Type (required, exactly
//     once, non-empty);
//   - the [IDHeader] record header carries its ID, its idempotency key
//     (optional, at most once; see [Command].ID);
//   - any other header is a user header, in [Command].Headers, unless its key
//     starts with [ReservedHeaderPrefix]: those headers are workrouter's own
//     (the list is at [ReservedHeaderPrefix]), users cannot set them, and
//     [Decode] leaves them out of Command.Headers.
//
// [Encode] and [Decode] convert between commands and *kgo.Record; a
// [Decoder] decodes as Decode does while reusing the strings of the command
// types it has seen. Package router produces commands with [Encode]'s
// encoding; package consumer decodes them with a Decoder.
//
// A key must land on the partition its workers expect
// (docs/design.md#hazard-11), so the partitioners are part of the wire
// format too, and must match the topic's producers: [Murmur2], the
// default, maps keys exactly as the Java client's default partitioner does
// ([Partition]: murmur2, high bit masked, modulo the partition count), and
// [CRC32] as librdkafka's default does. [ParsePartitioner] reads their
// names. If the topic's partition count changes, keys move
// (docs/design.md#hazard-5); package router refuses to follow such a change
// silently.
//
// # Command IDs
//
// A command's ID says which records are the same command: a send retried
// after an ambiguous error, a non-idempotent producer's retry, a batch a
// broker wrote twice, a dead letter redriven to a topic other groups read.
// Workers that deduplicate apply each ID once per partition (for as long
// as their sink remembers the IDs it applied), and a record without an ID
// once per offset. Set Command.ID to your own idempotency key
// (an order number, a payment's UUID) to make a retried send safe whatever
// process retries it; package router otherwise generates one per send and
// returns it, and a retry that reuses it is deduplicated too, while a retry
// without it is a new command. Foreign producers set the IDHeader
// themselves (docs/interop.md). A redriven command keeps the ID of the
// command it re-produces, and [RedriveForHeader] names the one group that
// is to apply it (Command.RedriveFor).
//
// Every function and method of this package is safe to call from any
// goroutine, except that a [Decoder] is used by one goroutine at a time.
package envelope
