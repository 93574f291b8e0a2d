// Package consumer runs the consumer-group side of workrouter: a Worker
// joins a group, runs one goroutine per owned partition, and applies the
// partition's commands in offset order, in batches, to a fenced sink.
//
// The tenure protocol (docs/design.md#protocol), per partition, in the
// order of the files that implement it:
//
//  1. assign.go — on assignment the Worker captures the tenure token
//     {Group, Topic, Partition, Epoch, Member}: Epoch is the group
//     generation (classic) or member epoch (KIP-848) at that moment. It
//     stays fixed for the tenure, even when later rebalances bump the
//     generation while the member keeps the partition.
//  2. claim.go — before any record is fetched, the Worker claims the scope
//     in the sink and starts fetching at the sink's NextOffset: the sink,
//     not Kafka's committed offset, is the source of truth.
//  3. fetch.go — one poll loop takes whole fetches and hands each
//     partition's records to its tenure's queue, pausing a partition whose
//     queue is full.
//  4. apply.go — each tenure goroutine takes batches of up to MaxBatch
//     records and applies each in one sink Apply: the holder check, the
//     handlers' effects and the new NextOffset commit atomically. A fenced
//     Claim or Apply stops the partition at once and is never retried; a
//     failure of the sink is retried with exponential backoff without
//     limit; a record that cannot be applied (poison.go: a handler that
//     keeps failing, no handler, not a command) is retried or
//     dead-lettered as Config.Poison says, and never passed over without
//     a dead letter stored by the sink. With a sink that declares a
//     dedupe window (sink.Features.DedupeWindow) the batch carries the
//     records' command IDs, so a command that entered the log twice is
//     applied once
//     (DuplicateSkipped); a redrive for another consumer group is skipped
//     inside the unit, its ID not recorded (RedriveSkipped;
//     docs/design.md#the-worker-and-command-ids).
//     With Config.KeyConcurrency above 1, lanes.go: the partition's
//     goroutine dispatches records to lanes by key (see Key concurrency
//     below), and each lane runs the same apply with lanes' batches
//     (sink.Batch.From).
//  5. commit.go — after Apply the Kafka offset is committed, for lag
//     visibility; a rejected commit is not an error of the work. A sink
//     that commits the offsets itself in its fenced unit (OffsetCommitter,
//     sink/kafka) gets no such commit.
//  6. revoke.go — on revoke or loss the partition goroutine finishes its
//     in-flight batch (bounded by Config.RevokeTimeout) and stops; a
//     partition with nothing in flight (blocked, claiming) is cancelled at
//     once. A tenure that is gone never acts: the sink's late answers to it
//     are discarded (Discarded events), never applied to its successor.
//
// # Key concurrency
//
// Config.KeyConcurrency N > 1 (docs/operating.md#key-concurrency) applies
// the keys of one partition concurrently, for handlers that wait on I/O.
// The tenure's goroutine becomes a dispatcher: it takes the partition's
// records in offset order and queues each on its key's lane. A key is
// bound to one lane while any of its records is queued or in flight
// there, so its records are applied by one lane at a time, in offset
// order; a key with nothing pending is free, and its next record goes to
// the least-loaded lane (fewest pending records, the first on a tie).
// Keys move between lanes only when idle: a fixed hash of the key left
// the busiest of 16 lanes about twice the average and capped W7/W3 near
// 8.6 (docs/performance.md#key-concurrency). The dispatcher's table of
// bound keys (a 64-bit hash of the key, its lane and pending count; two
// keys of one hash share a lane while either is pending) drops a key
// when its last record is done, so it holds at most the records in
// flight; each lane releases its records once their apply or dead
// letter committed. Records without a key are one key, ordered among
// themselves (they are not commands and are dead-lettered as undecodable
// by default). Each lane is a goroutine of the tenure: it batches
// (MaxBatch) and applies lanes' batches (sink.Batch.From) with the
// tenure token, through the same poison, dead-letter (a lane's
// sink.DeadRecord), retry and fence handling as KeyConcurrency 1, and with the command IDs when the sink
// deduplicates. Each record covers the offsets from the one after the
// record the dispatcher took before it (of any lane; the claim's
// watermark for the first), so offsets without records (transaction
// markers) are done with it. The tenure starts from Claim's
// checkpoint and passes over the records it holds; it keeps its own
// checkpoint (the claim's plus every successful lane apply's spans),
// whose watermark is the Kafka commit and Worker.Partitions' NextOffset:
// the sink, which records the same spans in each fenced unit, stays the
// source of truth. The sink must declare sink.Features.Gaps: New fails
// with an error matching ErrConfig and sink.ErrUnsupported otherwise.
//
// A poison record, or a slow key, holds up only the keys bound to its
// lane (queued behind it) while the lane's queue (max(QueueSize/N,
// MaxBatch) records) has room; once it is full the dispatcher waits, the partition's queue fills and its fetching
// pauses. A revoke lets every lane finish its in-flight batch; a fenced
// lane halts every lane of the partition (an in-flight apply of another
// lane is refused by the sink), and so do loss and Close. Records of
// different keys are applied out of offset order: a handler that must see
// a partition's records in order across keys needs KeyConcurrency 1, the
// default and the fastest path for fast handlers.
//
// # Events
//
// Everything the Worker does is an [Event] delivered to its [Observer]s
// (Config.Observers): a partition assigned, claimed, a batch applied, a
// claim or apply fenced, a duplicate or another group's redrive skipped,
// a stall, a blocked partition, a fetch paused for a full queue, a revoke
// or loss, an offset commit, a
// fetch error, lag, a topic that does not exist (and its creation), and the
// Worker stopping. Logging (Config.Logger, see
// [NewLogObserver]) and Prometheus metrics (package consumer/consumerprom)
// are Observers on the same events; package consumer/eventlog writes them as
// JSON lines for other processes to follow. [Worker.Stats] is derived
// from the events too, by an Observer the Worker installs ahead of every
// other: each of its fields counts one kind of event (see [Stats]), so the
// Worker records its work once.
//
// # Lifecycle
//
// [New] starts the Worker; [Worker.Close] stops it. [Worker.Done] is
// closed when the Worker stopped for good — after Close, or by itself on
// an error it cannot recover from — and [Worker.Err] says why.
//
// # Metrics
//
// Package consumer/consumerprom is the Worker's Prometheus metrics: an
// Observer fed by these events, registered on a prometheus.Registerer the
// caller gives. Package consumer does not import Prometheus;
// [Worker.Stats] keeps the cumulative counts of the same events without
// it.
package consumer
