// Package router produces workrouter's keyed commands to Kafka.
//
// A [Router] sends each [Command] to the partition its key maps to. A
// Command is an [envelope.Command]: package envelope defines the wire
// format that every producer and consumer agree on, and package consumer
// decodes with it. [Config.Partitioner] picks the mapping: by default
// [envelope.Murmur2], exactly as the Java client's default partitioner maps
// keys ([envelope.Partition]: murmur2, high bit masked, modulo the
// partition count), so workrouter producers interoperate with producers
// written in any language that follows Kafka's default; [envelope.CRC32]
// matches librdkafka's default. [Router.Redrive] sends a command again from
// a dead letter, marked with [envelope.RedriveOfHeader] and, naming the
// one consumer group that is to apply it, [envelope.RedriveForHeader].
//
// # Command IDs
//
// Every command a Router sends carries an ID, its idempotency key, in the
// [envelope.IDHeader] header, and every [Result] says which ([Result].ID).
// Workers that deduplicate apply each ID once per partition (see
// envelope.Command.ID). The ID is:
//
//   - the caller's, if cmd.ID is set: an order number, a payment's UUID,
//     anything that names this command and no other (at most
//     [envelope.MaxIDLen] bytes of UTF-8). This is the way to make a retry
//     safe whatever retries it: another attempt, another process, a
//     restarted job;
//   - otherwise one the Router generates for this send: 128 random bits
//     drawn once, when New runs, and a per-Router sequence number, so
//     unique across Routers and processes at no cost per send (no system
//     call, no allocation).
//
// The ID is fixed when the record is built: the client's own retries (an
// idempotent producer resending a batch) resend the same record, ID
// included. A second call of Send is a new send: with cmd.ID empty it gets
// a new ID, and both commands are applied if both were written. So after
// an ambiguous error (a timeout, a cancelled ctx, a broken connection: the
// first attempt may have been written), retry with cmd.ID = res.ID, the ID
// the failed send returned, or with your own ID from the start.
//
// # Latency and batching
//
// The client keeps kgo's producer defaults, among them a linger of 10ms:
// a partition's first buffered record waits up to that long for others
// to join its batch. [Router.SendAsync] under load is batched so, as raw
// kgo is. [Router.Send] does not wait for the linger: while it waits for
// its record's outcome it runs the client's Flush, which stops every
// partition's linger and lets none start, and returns once its own record
// has its outcome. So a lone Send is answered in about one round trip
// (BenchmarkSend; W9 of workrouter-lab bench), with the default options and without the caller knowing kgo's. The price falls on
// records other goroutines send through the same client while a Send
// waits: they are sent without lingering too, in smaller batches (and a
// kgo logger at info level, kgo.WithLogger, logs "flushing" for each
// such Send). With
// kgo.ProducerLinger(0) in Config.ClientOpts nothing lingers and Send
// skips the flush.
//
// The linger was kept rather than set to 0 by default: without it, kgo
// sends a request as soon as one may go, and the requests are smaller
// under load (BenchmarkSendAsync; docs/performance.md#a-lone-send).
//
// A command whose record cannot fit one record batch is refused before it
// is buffered ([ErrRecordTooLarge]): kgo would fail it after buffering,
// alone, while the later commands of its partition were written, leaving
// a hole in its key's sequence.
//
// # Partition count changes (docs/design.md#hazard-5)
//
// Per-key serialization holds only while a key keeps its partition. If
// partitions are added to the topic, the partitioner sends a key somewhere
// else while its older commands may still wait, unapplied, in the old
// partition, so two workers can apply commands of one key concurrently and
// out of order. A [Router] therefore remembers the partition count it started with,
// re-reads it periodically (and on [Router.CheckPartitions]), and never
// follows a change silently: under [Refuse] (the default) every later send
// fails with a [*PartitionCountChangedError]; under [Alarm] it logs at Error
// level, calls [Config.OnAlarm] and continues with the new count.
//
// # Events and metrics
//
// A Router reports what it does as events ([Started], [Sent], [NotSent],
// [CountChanged], [Closed]) to [Config.Observers]; package
// router/routerprom turns them into Prometheus series. Package router does
// not import Prometheus.
//
// All functions and methods of this package are safe for concurrent use by
// any number of goroutines.
package router
