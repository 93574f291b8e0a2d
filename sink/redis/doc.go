// Package redis is the fenced sink of workrouter on a Redis server
// (github.com/redis/go-redis/v9): every scope's fence (holder token and
// NextOffset, docs/design.md#protocol) lives in a hash next to the keys the
// handlers write; every claim is one Lua script, and every batch is either
// one Lua script or, when its commands are SET and DEL only and it read
// nothing, one MULTI … EXEC that the server runs only if the fence is
// unchanged since the sink checked it under WATCH. Either way the tenure
// check and the writes it guards cannot be separated by a pause.
//
// A Redis lock (SET NX with a TTL, or Redlock) cannot protect a resource: a
// holder paused past its TTL wakes up and writes. This sink is the answer
// the fencing-token argument gives: the token is checked at the resource,
// inside the same atomic unit as the write.
//
// # Handlers and Tx
//
// Handlers receive a *[Tx]. It has no method that writes to the server: Set,
// Del, IncrBy, HSet, HDel, HIncrBy, SAdd, SRem and RPush are buffered, and
// the sink's Apply runs them after it has checked the holder, in the same
// atomic unit that sets the new NextOffset, or not at all. Get and
// HGet read the Tx's own buffered writes first and the server's committed
// value otherwise; the script checks that every committed value read is
// unchanged, or the sink runs the batch's effects again.
//
// A Lua script is atomic but not transactional: a command that fails half
// way (WRONGTYPE, an increment of text) leaves the commands before it
// applied, and MULTI/EXEC behaves the same. The script therefore validates
// every buffered command against the key types and values it would meet
// (including the batch's own earlier commands) before the first write,
// and refuses the batch whole — an *sink.EffectError matching
// [ErrCommand] naming the record — when one would fail. Increments are
// checked to stay within ±2^53 (Lua's numbers are doubles).
//
// # The script, and WATCH/MULTI/EXEC for SET and DEL
//
// Both are one atomic unit: WATCH on the fence key, HMGET of the holder
// and NextOffset, then MULTI … EXEC (which the server refuses if any
// command touched the fence in between: a claim, a reset, another apply)
// fences as well as the script does. The difference is what happens when
// a command fails at run time: EXEC runs the other commands of the
// transaction anyway, so a batch whose fifth INCRBY meets a hash would be
// half applied, with its NextOffset moved past it. So a batch with any
// command other than SET and DEL, or one whose effects read a committed
// value, runs as the script, which validates the commands and checks the
// values read before its first write, as the Effect contract (a failed
// batch commits nothing) requires.
//
// SET and DEL cannot fail at run time (SET overwrites a key of any type),
// and MULTI/EXEC refuses the whole transaction when it cannot run all of
// it (over maxmemory, a queued command rejected), so a batch of only
// those that read nothing takes the watched path: WATCH and HMGET of the
// fence's holder, NextOffset, IDs version and done spans in one round
// trip, the script's checks on them in Go, and, only if they pass, the
// script's writes in the same order in one MULTI … EXEC on the same
// connection (go-redis does not re-dial a transaction's connection, so a
// lost one fails EXEC; a refusal sends UNWATCH before the connection goes
// back to the pool). An EXEC aborted by the WATCH wrote nothing; the sink
// reads the fence again, and a new holder fences the batch.
//
// Why: for a batch of SETs the script is the expensive part of the
// server's work. Redis builds a Lua string for each of the script's
// arguments and converts them back for the commands it calls, which costs
// more server CPU per batch than MULTI … EXEC of the same commands; for
// batches of other commands the script stays. The measurements
// (BenchmarkUnit* in bench_test.go, the server's CPU from INFO cpu) are in
// docs/performance.md#redis-w2-redis-against-b3-redis.
//
// # The held watch: one round trip a batch
//
// The watched path takes two round trips: WATCH and HMGET, then MULTI …
// EXEC. A scope applied one serial batch at a time (not by lanes, which
// would keep moving each other's watch) keeps
// a connection of its own instead, and sends WATCH and HMGET of the fence
// again behind each EXEC, in the same pipeline; its next batch checks
// what that HMGET read (the view) and sends MULTI … EXEC, WATCH and HMGET
// at once: one round trip. It is as fenced as the watched path, for the
// same reason: the server runs EXEC only if nobody wrote the fence since
// the WATCH, and the view is the fence just after that WATCH. A claim, a
// reset or another Sink's apply in between makes EXEC write nothing (the
// batch is "moved"), and the WATCH and HMGET behind it read the fence as
// it is now for the retry. A view can be older than the fence, so it may
// only let a batch through to EXEC: a refusal (fenced, a stale
// checkpoint) and a replay (no EXEC) are decided on a view read anew
// (UNWATCH, WATCH, HMGET), as is every batch after this Sink wrote the
// scope's fence on another connection (a claim, a dead letter, a script).
// The connection is a go-redis Conn, which never dials again: after an
// error every call on it fails, so a MULTI never goes out on a
// connection other than the one that sent the WATCH; any error closes
// it, and the next batch arms a new one. At most [Config.HeldWatches]
// scopes (default [DefaultHeldWatches]) hold a connection each, idle
// between their batches; the others take the watched path, and a place
// idle for 5 seconds goes to the next scope that needs one.
// [Sink.HeldStats] counts the held applies by outcome (ok, moved,
// refused, armed, dropped, evicted, no_place); package sink/redis/redisprom
// exports them as workrouter_redis_held_applies_total. With [Config.WaitReplicas] every batch takes the
// watched path (WAIT goes on the connection that wrote, before the
// reply is trusted).
//
// The checkpoint is guessed, not read: the sink caches the NextOffset
// (and done spans) each tenure's last claim or apply left, runs the
// effects for the records it does not contain, and the apply checks the
// guess (a miss makes the sink run the effects again on the stored one). A tenure this Sink has not
// seen is read first, so that a token that is not the holder runs no
// effect.
//
// # Keys
//
// Every key is under [Config.Prefix] (default "workrouter"):
// <prefix>:fence:<scope> (a hash: holder epoch and member, NextOffset,
// topic ID, the reset's proof requirement, the fence's version, the duplicates
// count, the scope's name), <prefix>:scopes (the set of scopes, for
// [Sink.Fences]), <prefix>:hist:<scope> (the history: a list of JSON
// entries, capped at [Config.HistoryCap] entries per scope, the oldest
// trimmed first; entries are numbered by <prefix>:hist-seq and stamped
// with the server's clock), <prefix>:ids:<scope> (the command IDs
// batches with IDs applied: one member per batch, its IDs front-coded as
// the SQL sinks store them, scored by the batch's last offset, pruned
// below the horizon with ZREMRANGEBYSCORE; the sink caches them per scope
// and the script checks the cache against the fence's IDs version, so a
// lookup is a map probe and a batch writes one member),
// <prefix>:dl:<id>, <prefix>:dls, <prefix>:dla:<id> (dead letters, their
// index and their audit) and <prefix>:k:<key> (the handlers' keys,
// [Sink.Key]). <scope> is the group and topic query-escaped and the
// partition. [Sink.Drop] deletes them all. One server (or one primary):
// Redis Cluster is not supported: the scripts touch keys of many slots,
// and the apply script takes the handlers' keys as arguments.
//
// # What Redis can lose, and the configuration that makes the fence trustworthy
//
// A fence is only as durable as its last acknowledged write. With Redis's
// defaults it is not durable:
//
//   - appendonly no (the default): only RDB snapshots reach the disk; a
//     crash or restart loses everything since the last one. NextOffset
//     moves backwards (records are applied twice, if their effects
//     survived and the fence did not, or lost with it), and a holder that
//     was superseded can become the holder again: a fenced zombie's
//     writes are accepted.
//   - appendonly yes with appendfsync everysec (the AOF default): up to a
//     second of acknowledged writes is lost on a crash of the machine or
//     the server, with the same consequences for that second: a
//     checkpoint can move backwards and records be applied twice, a
//     claim can be undone.
//   - appendonly yes with appendfsync always: every write is on disk
//     before the reply. This is the configuration for a trustworthy
//     fence; it costs an fsync per script or EXEC, which is why batching
//     (consumer.Config.MaxBatch) matters.
//
// [Open] reads appendonly and appendfsync (CONFIG GET) and logs a warning
// naming the risk when they are weaker than appendonly yes + appendfsync
// always, or when it cannot read them (managed services rename CONFIG);
// [Sink.Persistence] returns what it read.
//
// Replication is asynchronous: a replica promoted by a failover (Sentinel,
// a managed service) may lack the primary's last acknowledged writes, so
// the holder and NextOffset can move backwards across a failover exactly
// as across a crash with everysec. Either run a single primary (no
// automatic failover), or set [Config.WaitReplicas]: every claim, apply,
// dead letter and reset then waits (WAIT) until that many replicas have
// the write, and fails with [ErrNotReplicated] (a sink failure: the
// consumer retries, and the retry replays) when they do not acknowledge
// it within [Config.WaitTimeout]. WAIT narrows the window but is not
// consensus: a failover can still promote a replica that missed the
// write, unless the replicas also run appendfsync always and the
// failover picks the most up-to-date one.
//
// # Capabilities
//
// A *Sink implements sink.Sink[*Tx] with every feature: command IDs,
// gaps (the done spans of a gapped checkpoint are a field of the fence
// hash, and every apply and dead letter compares the stored checkpoint
// with the one its caller saw: lanes of one holder run their effects
// concurrently and commit one at a time) and dead letters; and
// [fenceadmin.Lister], [fenceadmin.Resetter], [fenceadmin.Historian], [dlq.Store],
// [sink.Health]; the metrics wrapper
// (sink/sinkmetrics) keeps them. It passes the conformance suite
// (sink/sinktest, with Harness.RequireGaps) against a real server.
package redis
