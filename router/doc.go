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
// a dead letter, marked with [envelope.RedriveOfHeader].
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
// # Metrics
//
// With [Config.Registerer] set, a Router registers these Prometheus series
// (listed by [MetricNames]):
//
//   - workrouter_router_sends_total{topic,outcome="ok"|"error"|"refused"}:
//     commands sent, by outcome; refused counts sends refused because the
//     partition count changed under [Refuse].
//   - workrouter_router_send_duration_seconds: histogram of the time from a
//     send to Kafka's acknowledgement or failure.
//   - workrouter_router_partition_count_changes_total{topic,policy}:
//     partition count changes seen, by the [Policy] applied.
//
// All functions and methods of this package are safe for concurrent use by
// any number of goroutines.
package router
