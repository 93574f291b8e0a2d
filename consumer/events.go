package consumer

import (
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// Observer receives a Worker's events (see Config.Observers). Observe is
// called synchronously from the Worker's goroutines — the group's
// assignment goroutine, the poll loop, the offset committer and every
// partition goroutine — often concurrently, so an Observer must be safe
// for concurrent use, must return quickly and must not block: a slow
// Observer slows the partition it is called from. It must not call the
// Worker's Close. Events of one partition are delivered in the order they
// happened.
//
// The Worker's own logging (Config.Logger) is an Observer too
// ([NewLogObserver] builds it for use elsewhere); so are its Prometheus
// metrics (package consumer/consumerprom): a Worker records its work once,
// as events, and everything else is fed by them.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e). It is called as any Observer is.
func (f ObserverFunc) Observe(e Event) { f(e) }

// HandlerObserver is an optional capability of an Observer, discovered by
// type assertion: ObserveHandler is called after every handler call with
// the command's type, how long the call took and its error. Handlers are
// timed only when some Observer has this capability, so a Worker without
// one pays nothing per record. It is called from the partition's goroutine,
// inside the sink's atomic unit: it must return at once.
type HandlerObserver interface {
	ObserveHandler(tok epochs.Token, cmdType string, d time.Duration, err error)
}

// Event is one thing that happened to a Worker: one of the types in this
// file, each named for what happened. Switch on the concrete type; Kind
// names it in a stable form for logs and event streams. Worker.Stats is
// the count of these events: each Stats field names the one kind of
// event that feeds it, and each event's doc names the fields it feeds;
// Committed, CommitFailed, FetchFailed, Lag, the topic checks, Started,
// LanesBusy, GapSpans, Resumed and Stopped feed none, nor do
// DuplicateSkipped and RedriveSkipped (their batch's Applied counts them).
type Event interface {
	// Kind returns the event's stable name (one of the Kind* constants).
	Kind() string
	isEvent()
}

// Kinds of Event, as returned by Event.Kind. They are stable: event
// streams (see package consumer/eventlog) and tooling key on them.
const (
	KindAssigned       = "assigned"
	KindClaimed        = "claimed"
	KindApplied        = "applied"
	KindFenced         = "fenced"
	KindStalled        = "stalled"
	KindRevoked        = "revoked"
	KindLost           = "lost"
	KindCommitted      = "committed"
	KindCommitFailed   = "commit_failed"
	KindFetchFailed    = "fetch_failed"
	KindLag            = "lag"
	KindStopped        = "stopped"
	KindDeadLettered   = "dead_lettered"
	KindLogChanged     = "log_changed"
	KindBlocked        = "blocked"
	KindTopicMissing   = "topic_missing"
	KindTopicFound     = "topic_found"
	KindTopicRecreated = "topic_recreated"
	KindDiscarded      = "discarded"
	KindDuplicate      = "duplicate_skipped"
	KindRedriveSkipped = "redrive_skipped"
	KindStarted        = "started"
	KindLanesBusy      = "lanes_busy"
	KindGapSpans       = "gap_spans"
	KindPaused         = "paused"
	KindResumed        = "resumed"
)

// Assigned: the group assigned a partition to this member and the Worker
// captured the tenure's token (docs/design.md#token). Nothing has been
// claimed yet. Counted in Stats.Assigned.
type Assigned struct {
	Token epochs.Token
}

// Claimed: the sink accepted the tenure's claim; fetching starts at
// NextOffset, the sink's checkpoint (docs/design.md#claim). TookOver is
// not nil when the claim was a proven takeover from a holder of an
// earlier incarnation of the group (docs/design.md#expired-groups): the
// regression it claimed past, which the sink audited as a reset of that
// holder. Counted in Stats.Claims (and Stats.Takeovers when TookOver is
// set).
type Claimed struct {
	Token      epochs.Token
	NextOffset int64
	TookOver   *EpochRegressedError
}

// Applied: one batch was applied in one fenced sink Apply (an Apply with IDs
// when the sink is a sink.Features.DedupeWindow; docs/design.md#apply). Records is
// the batch's size, split into Applied (records whose handlers ran),
// Skipped (replays the sink skipped as below its checkpoint), Duplicates
// (commands whose ID the sink had applied already: see DuplicateSkipped)
// and OtherGroup (redrives for another group: see RedriveSkipped), so
// Applied + Skipped + Duplicates + OtherGroup = Records. WithoutID counts
// the Applied records that carry no command ID (envelope.IDHeader): they
// are applied once per offset, but a second copy of one in the log would
// be applied again. FirstOffset is the batch's first offset and
// NextOffset the checkpoint after it. Duration is the successful Apply
// attempt's. With Config.KeyConcurrency > 1 it is one lane's batch
// (a lane's sink.Sink.Apply, docs/operating.md#key-concurrency): its
// records are of the keys bound to the lane, not contiguous, Skipped counts the
// records the sink found done (anywhere in the batch), and NextOffset is
// the partition's watermark after it (the tenure's checkpoint with gaps:
// below it every offset is done). Counted in Stats.Batches, and its
// counts summed into Stats.Records (Applied), Stats.Skipped,
// Stats.Duplicates, Stats.RedrivesSkipped (OtherGroup) and
// Stats.WithoutID.
type Applied struct {
	Token       epochs.Token
	FirstOffset int64
	NextOffset  int64
	Records     int
	Applied     int
	Skipped     int
	Duplicates  int
	OtherGroup  int
	WithoutID   int
	Duration    time.Duration
	// Lane is the lane that applied the batch (Config.KeyConcurrency >
	// 1), 0 on the serial path.
	Lane int
}

// DuplicateSkipped: the sink did not run a record's handler because its
// command ID was applied in the partition's scope already, within the
// sink's dedupe window, or earlier in the same batch
// (sink.Features.DedupeWindow, docs/design.md#command-ids): the same command
// entered the log twice (a retried send, a producer's retry, a redrive
// of a command this group applied). The checkpoint moved past it in the
// batch's fenced unit. Offset is the skipped record's, ID its command ID.
// The batch's Applied event counts it (Applied.Duplicates, which feeds
// Stats.Duplicates and workrouter_consumer_duplicates_skipped_total):
// there is one DuplicateSkipped event for each record it counts.
type DuplicateSkipped struct {
	Token  epochs.Token
	Offset int64
	ID     string
}

// RedriveSkipped: a record re-produced from a dead letter for another
// consumer group (envelope.RedriveForHeader names For, not this Worker's
// group) was not handed to a handler: the checkpoint moved past it in the
// batch's fenced unit, and its ID was not recorded as applied, so that a
// redrive of this group's own dead letter of the command is still
// applied. It is skipped whatever the sink's dedupe window. Offset is the
// record's, ID its command ID. The batch's Applied event counts it
// (Applied.OtherGroup, which feeds Stats.RedrivesSkipped and
// workrouter_consumer_redrives_skipped_total): there is one
// RedriveSkipped event for each record it counts.
type RedriveSkipped struct {
	Token  epochs.Token
	Offset int64
	ID     string
	For    string
}

// Fenced: the sink refused a Claim (Op sink.OpClaim) or an Apply (Op
// sink.OpApply) because a newer tenure holds the partition, and the
// partition stopped (docs/design.md#fenced-outcomes). Err matches
// sink.ErrFenced, and ErrEpochRegressed when the group's epochs went
// backwards. FirstOffset and Records describe the refused batch (zero for
// a claim). Counted in Stats.FencedClaims (Op sink.OpClaim) or
// Stats.FencedApplies (the other Ops).
type Fenced struct {
	Token       epochs.Token
	Op          sink.Op
	FirstOffset int64
	Records     int
	Err         error
}

// Stall causes, in Stalled.Cause.
const (
	// CauseEffect: a handler returned an error (or a record could not be
	// handled: no handler for its type, not a workrouter command).
	CauseEffect = "effect"
	// CauseSink: the sink itself failed (unreachable, busy, a lost
	// connection, an unknown commit outcome).
	CauseSink = "sink"
)

// Stalled: an attempt to Claim (Op sink.OpClaim), Apply (Op
// sink.OpApply) or dead-letter (Op sink.OpDeadLetter) failed for a reason
// other than fencing, and the Worker will retry it after Backoff. Attempt
// counts the failed attempts since the partition last made progress (1
// for the first) and Since is when the first of them failed. FirstOffset
// is the first offset of the batch, or the offset of the failing record
// when Cause is CauseEffect (the claim's scope has none: 0). Cause is
// CauseEffect (a handler's error, which counts against the record's
// budget) or CauseSink (a failure of the sink, which never does).
// Duration is the failed attempt's. Counted in Stats.Retries.
//
// A batch whose handler failed on a record behind a good prefix is
// retried at once, in two parts: Prefix is then the number of records
// before the failing one (at FirstOffset), which are applied first, and
// Backoff is 0; Attempt and Since are the failing record's attempts
// against its budget (Config.Poison) and when the first of them failed.
// The record itself is retried after the prefix, alone.
type Stalled struct {
	Token       epochs.Token
	Op          sink.Op
	FirstOffset int64
	Attempt     int
	Since       time.Time
	Backoff     time.Duration
	Cause       string
	Err         error
	Duration    time.Duration
	Prefix      int
}

// Revoked: the group took the partition back in a rebalance; the tenure
// finished (or, if TimedOut, was cancelled in) its in-flight batch. It is
// emitted then, right before the last applied offset is committed (a
// Committed or CommitFailed event follows). Counted in Stats.Revoked.
type Revoked struct {
	Token epochs.Token
	// NextOffset is the sink's checkpoint the tenure left: after its last
	// applied batch, or where its claim started it if it applied nothing;
	// -1 if it was revoked before its claim succeeded.
	NextOffset int64
	TimedOut   bool
}

// Lost: the member lost the partition without a clean revoke (its session
// expired, or the coordinator fenced it); nothing more is committed for
// it. TimedOut as for Revoked; it is emitted as Revoked is, once the
// tenure's in-flight batch finished or was cancelled. Counted in
// Stats.Lost.
type Lost struct {
	Token    epochs.Token
	TimedOut bool
}

// Committed: Kafka accepted an offset commit of the given partitions'
// next offsets (docs/design.md#checkpoint-and-kafka-commits).
type Committed struct {
	Group   string
	Topic   string
	Offsets map[int32]int64
}

// CommitFailed: Kafka did not accept an offset commit (a rebalance in
// progress, a stale generation, a coordinator move). It is not an error of
// the work: the sink holds the checkpoint, and the commit is retried for
// partitions still owned.
type CommitFailed struct {
	Group   string
	Topic   string
	Offsets map[int32]int64
	Err     error
}

// FetchFailed: fetching a partition (Partition -1: the client or group
// as a whole) returned an error.
type FetchFailed struct {
	Topic     string
	Partition int32
	Err       error
}

// Lag: the Worker measured, every Config.LagInterval, how many records of
// each partition it processes are not yet applied: the partition's end
// offset (high watermark) minus the next offset to apply.
type Lag struct {
	Topic string
	Lag   map[int32]int64
}

// TopicMissing: the Worker's topic does not exist on the brokers it asked
// (the brokers' metadata answered UNKNOWN_TOPIC_OR_PARTITION). The Worker
// stays in its group and waits: nothing is consumed until the topic is
// created. It is reported by the first check, right after New, and again
// at every later check (every Config.LagInterval, but never twice within
// 5 s) while the topic is missing. Brokers are the seed
// brokers (Config.Brokers), Since is when the first check of this streak
// found it missing, and Attempts counts the checks that did. The logging
// observer logs it at WARN, and at ERROR once it has been missing for a
// minute.
type TopicMissing struct {
	Topic    string
	Brokers  []string
	Since    time.Time
	Attempts int
}

// TopicFound: the Worker's topic, reported missing before, exists now.
// MissingSince and Attempts are those of the last TopicMissing.
type TopicFound struct {
	Topic        string
	MissingSince time.Time
	Attempts     int
}

// TopicRecreated: the Worker's topic was deleted and created again while
// it processed partitions of it (its topic ID changed from OldID to NewID:
// a new log, whose offsets restart). The Worker stops those partitions,
// forgets the old topic and rejoins the group; each partition's claim then
// finds the changed log and waits (LogChanged, Blocked) for an operator's
// reset (docs/design.md#log-identity). Nothing of the new log is applied
// before that.
type TopicRecreated struct {
	Topic        string
	OldID, NewID string
	Partitions   []int32 // the partitions this member held on the old log
}

// Started: New built the Worker of Group on Topic, over a sink with
// Features, applying each partition in KeyConcurrency lanes. It is the
// first event of a Worker, emitted before it joins the group.
type Started struct {
	Group, Topic   string
	Features       sink.Features
	KeyConcurrency int
}

// LanesBusy: the number of the partition's lanes applying a batch changed
// to Busy (Config.KeyConcurrency > 1 only). A lane reports it as it starts
// and as it ends a batch.
type LanesBusy struct {
	Token epochs.Token
	Busy  int
}

// GapSpans: the partition's checkpoint with gaps has Spans done spans
// above its watermark (Config.KeyConcurrency > 1 only): runs of records
// lanes applied ahead of a slower lane. Reported after the claim and after
// each batch of a lane.
type GapSpans struct {
	Token epochs.Token
	Spans int
}

// Paused: the Worker paused fetching the partition because its queue
// is full (Config.QueueSize records: the tenure's handlers or its sink
// are slower than the fetches; with lanes, one lane's full queue holds up
// the partition's). A
// Resumed event follows once the queue drained to half, unless the
// tenure ends first (Revoked, Lost, Fenced or Blocked say so). Counted
// in Stats.Pauses.
type Paused struct {
	Token  epochs.Token
	Queued int // records queued when it paused
}

// Resumed: the Worker resumed fetching the partition it paused (see
// Paused), its queue drained to half.
type Resumed struct {
	Token  epochs.Token
	Queued int // records queued when it resumed
}

// Stopped: the Worker stopped for good; Err is what Worker.Err returns
// (ErrClosed after Close).
type Stopped struct {
	Err error
}

// DeadLettered: the sink stored a record that cannot be applied as a dead
// letter and moved the partition's checkpoint past it, in one fenced unit
// (docs/design.md#dead-letters). Reason is one of the Reason* constants,
// Err the error that decided it, Attempts how many times it was tried, ID
// the dead letter's ID in the sink. Counted in Stats.DeadLettered.
type DeadLettered struct {
	Token    epochs.Token
	Offset   int64
	Key      []byte
	Type     string
	Reason   string
	Err      error
	Attempts int
	ID       int64
}

// LogChanged: a claim was refused because the log under the partition's
// checkpoint is not the one it was taken on (docs/design.md#log-identity):
// the topic was recreated, the log truncated, or records deleted before
// they were applied (Err.Lost of them). The partition is not processed; the
// Worker claims it again every Config.ReclaimInterval, so that it resumes
// once an operator's reset makes the claim valid. Counted in
// Stats.LogChanged, NewlyLost summed into Stats.LostToRetention. A
// Blocked event (cause BlockLogChanged) follows.
type LogChanged struct {
	Token epochs.Token
	Err   *sink.LogChangedError
	// NewlyLost is how many of Err.Lost() records no earlier refusal
	// reported by this Worker counted: a blocked partition's re-claims
	// find the same loss again and count 0 (or only what retention
	// deleted since).
	NewlyLost int64
}

// Blocked: a claim was refused for a reason an operator must resolve —
// the log changed (see LogChanged) or the group's epochs went backwards
// (ErrEpochRegressed) — and the partition waits. Since is when it was
// first refused; the Worker claims again every Config.ReclaimInterval.
// An operator's reset of the fence under a live tenure (ErrFenceReset)
// also blocks the partition, briefly: the Worker claims it again at once;
// so does a position the broker no longer serves. A resource the handler
// called that refused the tenure's token (ErrResourceFenced) blocks it
// until the next ReclaimInterval. Cause names which (one of the Block*
// constants). Counted in Stats.FenceResets (cause BlockFenceReset) and
// Stats.ResourceRefusals (cause BlockResourceFenced).
type Blocked struct {
	Token epochs.Token
	Since time.Time
	Err   error
	Cause string
}

// Causes of a Blocked event, in Blocked.Cause.
const (
	// BlockLogChanged: the log under the checkpoint changed (a
	// LogChanged event precedes it).
	BlockLogChanged = "log_changed"
	// BlockEpochRegressed: the group's epochs went backwards and no
	// proven takeover was made (Err matches ErrEpochRegressed).
	BlockEpochRegressed = "epoch_regressed"
	// BlockFenceReset: an operator reset the fence under the tenure; a
	// write was refused for it (Err matches ErrFenceReset).
	BlockFenceReset = "fence_reset"
	// BlockResourceFenced: a resource the handler called refused the
	// tenure's token (Err matches ErrResourceFenced).
	BlockResourceFenced = "resource_fenced"
	// BlockPositionLost: the broker no longer serves the partition at
	// its fetch position; the Worker claims it again to check the log.
	BlockPositionLost = "position_lost"
	// BlockMemberChanged: the tenure's token names a member ID this
	// client left (it rejoined the group under a new one and kept the
	// partition) and the sink refused it; the Worker claims the partition
	// again with its current token (Err matches ErrMemberRejoined).
	BlockMemberChanged = "member_changed"
)

// Discarded: the sink answered a Claim (Op sink.OpClaim), or refused a
// batch (Op sink.OpApply) as written under a reset fence, of a tenure
// that was no longer its partition's by then: it was revoked, lost or
// replaced while the sink decided. A tenure that is gone never acts, so
// the Worker dropped the answer: no Claimed, Blocked or Fenced event, no
// fetching started or paused, nothing committed; the partition's
// successor tenure, if any, claims for itself. Err is the sink's answer
// (nil: the claim was accepted, and the successor's claim supersedes
// it). Counted in Stats.Discarded.
type Discarded struct {
	Token epochs.Token
	Op    sink.Op
	Err   error
}

// Kind returns KindAssigned.
func (Assigned) Kind() string { return KindAssigned }

// Kind returns KindClaimed.
func (Claimed) Kind() string { return KindClaimed }

// Kind returns KindApplied.
func (Applied) Kind() string { return KindApplied }

// Kind returns KindFenced.
func (Fenced) Kind() string { return KindFenced }

// Kind returns KindStalled.
func (Stalled) Kind() string { return KindStalled }

// Kind returns KindRevoked.
func (Revoked) Kind() string { return KindRevoked }

// Kind returns KindLost.
func (Lost) Kind() string { return KindLost }

// Kind returns KindCommitted.
func (Committed) Kind() string { return KindCommitted }

// Kind returns KindCommitFailed.
func (CommitFailed) Kind() string { return KindCommitFailed }

// Kind returns KindFetchFailed.
func (FetchFailed) Kind() string { return KindFetchFailed }

// Kind returns KindLag.
func (Lag) Kind() string { return KindLag }

// Kind returns KindStopped.
func (Stopped) Kind() string { return KindStopped }

// Kind returns KindDeadLettered.
func (DeadLettered) Kind() string { return KindDeadLettered }

// Kind returns KindLogChanged.
func (LogChanged) Kind() string { return KindLogChanged }

// Kind returns KindBlocked.
func (Blocked) Kind() string { return KindBlocked }

// Kind returns KindTopicMissing.
func (TopicMissing) Kind() string { return KindTopicMissing }

// Kind returns KindTopicFound.
func (TopicFound) Kind() string { return KindTopicFound }

// Kind returns KindTopicRecreated.
func (TopicRecreated) Kind() string { return KindTopicRecreated }

// Kind returns KindDiscarded.
func (Discarded) Kind() string { return KindDiscarded }

// Kind returns KindStarted.
func (Started) Kind() string { return KindStarted }

// Kind returns KindLanesBusy.
func (LanesBusy) Kind() string { return KindLanesBusy }

// Kind returns KindGapSpans.
func (GapSpans) Kind() string { return KindGapSpans }

// Kind returns KindPaused.
func (Paused) Kind() string { return KindPaused }

// Kind returns KindResumed.
func (Resumed) Kind() string { return KindResumed }

// Kind returns KindDuplicate.
func (DuplicateSkipped) Kind() string { return KindDuplicate }

// Kind returns KindRedriveSkipped.
func (RedriveSkipped) Kind() string { return KindRedriveSkipped }

func (Assigned) isEvent()         {}
func (Claimed) isEvent()          {}
func (Applied) isEvent()          {}
func (Fenced) isEvent()           {}
func (Stalled) isEvent()          {}
func (Revoked) isEvent()          {}
func (Lost) isEvent()             {}
func (Committed) isEvent()        {}
func (CommitFailed) isEvent()     {}
func (FetchFailed) isEvent()      {}
func (Lag) isEvent()              {}
func (Stopped) isEvent()          {}
func (DeadLettered) isEvent()     {}
func (LogChanged) isEvent()       {}
func (Blocked) isEvent()          {}
func (TopicMissing) isEvent()     {}
func (TopicFound) isEvent()       {}
func (TopicRecreated) isEvent()   {}
func (Discarded) isEvent()        {}
func (DuplicateSkipped) isEvent() {}
func (RedriveSkipped) isEvent()   {}
func (Started) isEvent()          {}
func (LanesBusy) isEvent()        {}
func (GapSpans) isEvent()         {}
func (Paused) isEvent()           {}
func (Resumed) isEvent()          {}

// observers is the Worker's fan-out to its Observers.
type observers struct {
	all      []Observer
	handlers []HandlerObserver
}

func newObservers(all []Observer) observers {
	o := observers{all: all}
	for _, ob := range all {
		if h, ok := ob.(HandlerObserver); ok {
			o.handlers = append(o.handlers, h)
		}
	}
	return o
}

// emit delivers e to every Observer, in order.
func (o *observers) emit(e Event) {
	for _, ob := range o.all {
		ob.Observe(e)
	}
}

// timeHandlers reports whether handler calls are timed.
func (o *observers) timeHandlers() bool { return len(o.handlers) > 0 }

func (o *observers) handlerDone(tok epochs.Token, typ string, d time.Duration, err error) {
	for _, h := range o.handlers {
		h.ObserveHandler(tok, typ, d, err)
	}
}
