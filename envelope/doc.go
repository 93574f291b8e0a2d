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
// Every function and method of this package is safe to call from any
// goroutine, except that a [Decoder] is used by one goroutine at a time.
package envelope
