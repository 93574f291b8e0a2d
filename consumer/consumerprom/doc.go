// Package consumerprom is a consumer.Worker's Prometheus metrics, fed by
// its events: [New] registers them on the caller's prometheus.Registerer
// and returns the [Metrics], an Observer (and a HandlerObserver) to put in
// consumer.Config.Observers. The Worker records its work once, as events;
// this package turns them into these series,
// each with the constant label group (labels are bounded: never keys or
// payloads; partition is the partition number):
//
//   - workrouter_consumer_records_applied_total{topic,partition} and
//     workrouter_consumer_batches_applied_total{topic,partition}: counters
//     of records whose effects were applied and of accepted Applies.
//   - workrouter_consumer_batch_size: histogram of records per batch.
//   - workrouter_consumer_apply_duration_seconds: histogram of one sink
//     Apply attempt; workrouter_consumer_handler_duration_seconds: of one
//     handler call.
//   - workrouter_consumer_fenced_total{topic,partition,op="claim"|"apply"}:
//     claims and batches the sink refused.
//   - workrouter_consumer_claims_total{topic,outcome="ok"|"fenced"|"error"|"takeover"}.
//   - workrouter_consumer_partitions_assigned_total{topic},
//     workrouter_consumer_partitions_revoked_total{topic} and
//     workrouter_consumer_partitions_lost_total{topic}.
//   - workrouter_consumer_owned_partitions{topic}: gauge of partitions
//     claimed and not fenced.
//   - workrouter_consumer_tenure_epoch{topic,partition}: gauge of the epoch
//     held, set on claim and deleted when the partition is revoked, lost or
//     fenced: two members showing the same partition is a zombie.
//   - workrouter_consumer_retries_total{topic,partition,kind="apply"|"claim"|"dead-letter"} and
//     workrouter_consumer_sink_errors_total{topic,kind="effect"|"sink"}:
//     failed attempts that are retried, and failed Applies by cause.
//   - workrouter_consumer_misrouted_total{topic,partition}: records whose
//     key Config.Partitioner maps to another partition than the one they
//     arrived on (docs/design.md#hazard-11).
//   - workrouter_consumer_duplicates_skipped_total{topic,partition},
//     workrouter_consumer_redrives_skipped_total{topic,partition} and
//     workrouter_consumer_records_without_id_total{topic,partition}:
//     records skipped because their command ID was applied already,
//     other groups' redrives skipped, and applied records without a
//     command ID; workrouter_consumer_dedupe_window_offsets{topic}: the
//     sink's dedupe window (0: the sink does not deduplicate).
//   - workrouter_consumer_lag{topic,partition}: gauge of records between
//     the partition's end offset (the high watermark) and the next offset
//     to apply, refreshed every Config.LagInterval; deleted with the
//     partition.
//   - workrouter_consumer_partition_stalled{topic,partition} and
//     workrouter_consumer_partition_stalled_since_timestamp_seconds: 1
//     (and since when) while an assigned partition makes no progress (a
//     stall, or a claim blocked until an operator acts), else 0.
//   - workrouter_consumer_gapped_spans{topic,partition} and
//     workrouter_consumer_lanes_busy{topic,partition}, with
//     KeyConcurrency above 1 only: the done spans above the watermark of
//     the partition's checkpoint (lanes that ran ahead of a slower one),
//     and the lanes applying a batch.
//
// Every per-partition gauge (tenure epoch, lag, stalled and since, the
// lanes' gauges) is
// deleted when the partition leaves the member, whichever way (revoked,
// lost or fenced) and in whatever state (running, stalled, blocked,
// claiming); events of a tenure already gone do not bring it back. The
// per-partition counters stay: they are the member's history.
//
// The counters count the same events as consumer.Stats, so each equals
// a field of the Worker's Stats (summed over its labels):
// records_applied_total is Records, batches_applied_total Batches,
// fenced_total{op} FencedClaims and FencedApplies, claims_total{outcome}
// Claims (ok and takeover), Takeovers and FencedClaims (fenced),
// partitions_assigned/revoked/lost_total Assigned, Revoked and Lost,
// retries_total Retries (a retry after a good prefix too),
// dead_letters_total DeadLettered, log_changed_total LogChanged,
// records_lost_total LostToRetention, misrouted_total Misrouted,
// duplicates_skipped_total Duplicates, redrives_skipped_total
// RedrivesSkipped and records_without_id_total WithoutID. Stats fields
// without a series: Skipped, Pauses, FenceResets, ResourceRefusals,
// MemberChanges and Discarded.
//
// [MetricNames] lists the names. The series are unregistered when the
// Worker stops (its Stopped event) or by [Metrics.Unregister], so that a
// new Worker of the group may register them again.
package consumerprom
