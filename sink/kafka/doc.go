// Package kafka is a fenced sink whose effects are Kafka records:
// consume-transform-produce, exactly once, for commands whose outcome is
// an event (docs/kafka-sink.md).
//
// A handler's Tx produces records (any topic, key, value, headers) and
// nothing else. Apply runs the batch's effects into the Tx (nothing is
// sent while they run; an effect's error sends nothing), then produces
// the records in one Kafka transaction that also commits the input
// offset past the batch (TxnOffsetCommit, with the group member's ID and
// generation or member epoch: KIP-447), and one record to the sink's
// checkpoint topic (the committing token and offset), and commits it;
// the transaction may be shared with the calls of other scopes (see
// Group commit below), each with its own records and offset commit. A
// read_committed consumer of the output topics sees each input's records
// once, or never. DeadLetter produces the poison record, with headers
// naming its origin, the reason, the error and the token, to the
// dead-letter topic in such a transaction, so a poison record costs only
// itself.
//
// # How it differs from the row sinks
//
// A row sink (sink/postgres, sink/sqlite, sink/redis) stores the fence:
// the holder token, the checkpoint and the effects are rows of one
// database, and one transaction checks the holder and writes. Here the
// checkpoint is the consumer group's committed offset, with the
// committing token and the input log's topic ID in its metadata; Claim
// reads it (OffsetFetch with require_stable, so after any pending
// transaction of the partition ends) and writes nothing. The holder check
// is the group coordinator's: it accepts the transaction's offset commit
// only from the group's current member at its current generation or
// member epoch, and a refused commit aborts the transaction, records and
// all.
//
// # Which invariant is enforced by whom
//
//   - The broker (group coordinator, transaction coordinator): a tenure
//     whose member left the group or was expired (a process paused past
//     its session timeout) cannot commit: its transaction aborts, and
//     none of its records ever reaches a read_committed consumer
//     (*GroupFencedError wrapping the Kafka error, matching
//     sink.ErrFenced). A commit at a generation that is no longer the
//     group's is refused too, and made again at the member's current one.
//     Records and offsets commit together or not at all. A new owner's
//     claim waits for a pending transaction of the partition
//     (require_stable).
//   - The client (this Sink), before each commit: the tenure's token is
//     this Sink's last accepted claim of the scope (sink.Fence.CheckClaim
//     on the claims of this Sink, with the holder that committed last as
//     the starting point), and the member bound with BindMember is still
//     the token's, at a generation not below the token's epoch
//     (ErrMemberChanged). This fences the tenures of one process among
//     themselves, which the coordinator cannot tell apart: a member that
//     keeps its member ID across a rejoin (KIP-848) commits with its
//     current epoch whichever of its tenures asks.
//
// The sink sends the current generation, not the token's epoch: the
// token is fixed at assignment, and a cooperative or KIP-848 group moves
// the generation or member epoch of a member that keeps its partitions.
// A refusal of a known member's generation (its client has not caught up
// with a rebalance) is retried with the same records at the generation
// the client has then (ErrRebalancing after a few attempts, not
// sink.ErrFenced); only a refusal of the member itself fences.
// Fence versions, proofs and takeovers (docs/design.md#admin-reset) are
// the client-side fence's, per Sink value; a reset of the fence is a
// commit of the group's offset by an operator, which the sink reads as
// the checkpoint at the next claim. There is no fenceadmin capability.
//
// # Group commit: the calls of several scopes share a transaction
//
// Each producer has a committer goroutine (started by New, stopped and
// waited for by Close). Apply and DeadLetter queue their records, and a
// committer whose producer is free waits at most Config.Linger (2ms by
// default) for the next call of each other scope that had a call in the
// last 250ms and has none queued (a lone partition never waits), then
// takes every queued call, one per scope (a scope is in at most one
// open transaction: a tenure's next batch waits for the commit of its
// last), runs each call's client-side check under its scope's lock, and
// commits them in one transaction: every call's records and checkpoint
// record, one TxnOffsetCommit per group, member and generation, one
// EndTxn. The transaction commits only if every offset commit is
// accepted. A refusal aborts it at once, with every call's records: the
// refused calls fail as a lone call would (a *GroupFencedError for a
// member the coordinator no longer has; a refused generation is tried
// again, without the others), and every other call fails with
// ErrSharedAbort, a sink failure that is not sink.ErrFenced, its scope's
// NextOffset unchanged, so the worker applies it again in a transaction
// without the refused tenure. An EndTxn whose outcome is unknown marks
// every scope of the transaction uncertain (each re-reads its committed
// offset before its next call), and a transaction timeout or a broken
// producer fails every call in it. Dead letters share transactions on
// the same terms. TestGroupCommitStaleMember shows a stale tenure
// sharing a transaction with a live one of another group's member (one
// Sink serving two groups: BindGroupMember). Stats counts the
// transactions, the calls that shared one and the lingers, and sums
// where the transactions' time went (produce, offset commits, EndTxn)
// and how long the calls waited for their results.
//
// A partition's batches are still one round each (its next batch waits
// for its last one's commit), so the sink declares a preferred batch
// (sink.Features.PreferredBatch = PreferredBatch, 2048 records): a
// consumer.Worker whose MaxBatch is left zero applies up to that many
// records in one Apply, where the SQL sinks get 256.
//
// # Transactional IDs: per member, not per partition or per tenure
//
// Each producer of a Sink has a transactional ID of its own (the prefix,
// a random part, its number): per member, as KIP-447 allows, because the
// consumer-group metadata in the offset commit fences a zombie's
// transaction. A transactional ID per partition (before KIP-447) fenced
// the previous owner's producer by InitProducerId, at the cost of a
// producer per partition; a static transactional.id shared by a
// restarted process fences its predecessor's producer the same way, but
// two live processes with one ID fence each other in turn. A
// transactional ID per tenure would fence nothing (every tenure a new
// ID) and cost an InitProducerId per assignment. With IDs per member, a
// frozen process's open transaction is not fenced by its successor: the
// coordinator aborts it after Config.TransactionTimeout, and until then
// it holds back read_committed consumers of its output partitions (the
// last stable offset) and a claim of its input partition, if it had
// added the offset commit already.
//
// # A producer that cannot recover: replaced, never pooled again
//
// A transaction can fail in a way its producer does not recover from: a
// broker restarted with the transaction lost (kfake bumps the producer's
// epoch and keeps no trace of the transaction: PRODUCER_FENCED or
// INVALID_PRODUCER_EPOCH, then INVALID_TXN_STATE at EndTxn), a fenced
// epoch, INVALID_PRODUCER_ID_MAPPING, a record never answered
// (kgo.ErrRecordTimeout), or a client that refuses to begin a
// transaction or could not abort one. Under KIP-890 franz-go then holds
// the producer ID fatal ("producer ID has a fatal, unrecoverable error"
// at every BeginTransaction), so such a producer is never put back in
// the pool: the Sink closes its client, initializes the old
// transactional ID once more with a client of its own (InitProducerId:
// the coordinator aborts a transaction of it still open, writing ABORT
// markers to the partitions it touched, so read_committed consumers and
// require_stable fetches do not wait for the transaction timeout), writes
// ABORT markers itself (WriteTxnMarkers at the old producer ID and
// epoch) to every partition the failed transaction produced to, for a
// broker that lost the transaction and wrote none (kfake: a reader
// waiting for such a partition's last offset waits forever), and starts
// a client with a new transactional ID: the next number after the
// Sink's last (see Config.TransactionalID). If the broker is not back
// yet, the old transaction ends at its timeout and the new client is
// started by the next Apply that draws the producer. The failed Apply or
// DeadLetter returns a sink failure, not sink.ErrFenced (only a refused
// offset commit of the member is a fence), and the worker retries the
// batch. Each replacement is a Warn line naming both IDs and the cause;
// Stats counts them (ProducersReplaced, AbortMarkers, AbortsFailed,
// StartsFailed). TestBrokerRestart kills a kfake broker process with a
// data dir between transactions, before an offset commit and before an
// EndTxn.
//
// # Command IDs
//
// The sink declares no dedupe window (sink.Features.DedupeWindow 0): a
// command produced twice to the input topic is two records, and each
// yields its outputs (TestSameCommandTwiceTwoOutputs). Deduplicating
// would mean keeping the window of applied IDs in Kafka too, written in
// the same transaction (a compacted topic keyed by scope), and reading it
// at claim; it is not built. A consumer of the outputs that must see a
// command once deduplicates on the command ID it carries (a header).
//
// # Features
//
// No gaps (key concurrency needs a checkpoint with done spans, which a
// committed offset cannot hold), no dedupe window, dead letters when
// Config.DeadLetterTopic is set. Conformance: sink/sinktest runs on the
// client-side fence (Config.ClientFenceOnly, since the suite's tokens
// are made up); the coordinator's fence is tested with real group
// members in this package's tests.
package kafka
