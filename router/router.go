package router

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/internal/cmdheaders"
)

// Router produces keyed [Command]s to one topic, placing each on the
// partition Config.Partitioner picks for its key ([envelope.Partition] by
// default), and guards against partition count changes (see the package
// documentation). All methods are safe for concurrent use by any number of
// goroutines.
type Router struct {
	cfg        Config
	cl         *kgo.Client
	ownsClient bool

	mu    sync.Mutex                // serializes changes of state
	state atomic.Pointer[sendState] // read by every send without a lock

	checkMu sync.Mutex // serializes partition checks (and OnAlarm calls)

	promise func(*kgo.Record, error) // r.onProduced, made once: every send shares it
	hooked  bool                     // the client has hooks: each send gets a promise of its own
	epoch   time.Time                // when New ran: a pending's clock (see pending.sentAt)
	// lingers is set if the client lingers (kgo.ProducerLinger > 0): a
	// Send then flushes while it waits (see sendSync).
	lingers bool
	// maxBatch is the client's ProducerBatchMaxBytes: a command whose
	// record cannot fit one batch is refused (see recordBound).
	maxBatch int64

	idPrefix string        // the generated IDs' prefix: random, made by New (see newIDPrefix)
	idSeq    atomic.Uint64 // the number of the last generated ID

	stop      context.CancelFunc // stops the checker goroutine
	done      chan struct{}      // closed when the checker goroutine returns
	closeOnce sync.Once
	closeErr  error

	observed bool // Config.Observers is not empty: sends are timed and reported
}

// sendState is what a send reads: replaced as a whole (under Router.mu),
// never modified, so that sends read it with one atomic load.
type sendState struct {
	closed  bool
	count   int32                       // partition count keys are partitioned by
	refused *PartitionCountChangedError // set, under Refuse, once a change is seen
}

// setState replaces the send state with change applied to a copy of it.
// The caller holds r.mu.
func (r *Router) setState(change func(*sendState)) {
	st := *r.state.Load()
	change(&st)
	r.state.Store(&st)
}

// Result is the outcome of a send.
type Result struct {
	// Partition is the partition the command was written to.
	Partition int32
	// Offset is the command's offset in that partition.
	Offset int64
	// ID is the command's ID ([envelope.Command].ID): the caller's, or
	// the one the router generated for a command sent without one. It is
	// set on an error too once the command was handed to the client,
	// which may have written it: a caller that retries after such an
	// error sets cmd.ID = res.ID, so that workers that deduplicate apply
	// the command once. It is "" when nothing was sent (an invalid
	// command, a command too large for a record batch, a closed router,
	// a refused partition count change).
	ID string
}

// New validates cfg, connects, reads the topic's partition count and
// returns a Router that partitions keys by that count (the expected count).
// ctx bounds only this setup.
//
// New fails with an error matching [ErrConfig] for a bad cfg,
// [ErrTopicNotFound] if the topic does not exist, or [ErrMetadata] if the
// metadata cannot be read (for instance, brokers unreachable before ctx is
// done).
//
// The Router owns one goroutine, started here and stopped by
// [Router.Close], that re-reads the topic's partition count every
// Config.PartitionCheckInterval. Callers must call Close.
func New(ctx context.Context, cfg Config) (*Router, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, cl: cfg.Client, done: make(chan struct{})}
	r.state.Store(&sendState{})
	r.observed = len(cfg.Observers) > 0
	if r.cl == nil {
		opts := make([]kgo.Opt, 0, len(cfg.ClientOpts)+3)
		opts = append(opts, kgo.SeedBrokers(cfg.Brokers...), cfg.Compression.Opt())
		opts = append(opts, cfg.ClientOpts...)
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		r.cl, err = kgo.NewClient(opts...)
		if err != nil {
			return nil, fmt.Errorf("%w: building client: %w", ErrConfig, err)
		}
		r.ownsClient = true
	} else if err := checkClient(r.cl, cfg.Topic); err != nil {
		return nil, err
	}

	n, err := r.readPartitionCount(ctx)
	if err != nil {
		if r.ownsClient {
			r.cl.Close()
		}
		return nil, err
	}
	r.state.Store(&sendState{count: n})
	r.maxBatch = 1_000_012 // kgo's default ProducerBatchMaxBytes
	if mb, ok := r.cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok && mb > 0 {
		r.maxBatch = int64(mb)
	}
	r.promise = r.onProduced
	linger, _ := r.cl.OptValue(kgo.ProducerLinger).(time.Duration)
	r.lingers = linger > 0
	r.epoch = time.Now()
	r.idPrefix = newIDPrefix()
	hooks, _ := r.cl.OptValue(kgo.WithHooks).([]kgo.Hook)
	r.hooked = len(hooks) > 0
	if r.observed {
		r.emit(Started{Topic: cfg.Topic, Partitions: n, Policy: cfg.OnPartitionCountChange})
	}
	cfg.Logger.Info("router started", "topic", cfg.Topic, "partitions", n, "partitioner", cfg.Partitioner, "compression", cfg.Compression,
		"on_partition_count_change", cfg.OnPartitionCountChange)

	checkCtx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go r.checkLoop(checkCtx)
	return r, nil
}

// checkClient verifies that a caller-given client lets the router choose
// partitions and is not transactional.
func checkClient(cl *kgo.Client, topic string) error {
	if id, _ := cl.OptValue(kgo.TransactionalID).(string); id != "" {
		return fmt.Errorf("%w: Client is transactional (id %q); the router needs a non-transactional producer", ErrConfig, id)
	}
	p, _ := cl.OptValue(kgo.RecordPartitioner).(kgo.Partitioner)
	if p == nil || !honoursRecordPartition(p, topic) {
		return fmt.Errorf("%w: Client must produce with kgo.RecordPartitioner(kgo.ManualPartitioner()): the router chooses each record's partition itself", ErrConfig)
	}
	return nil
}

// honoursRecordPartition probes p: a manual partitioner returns each
// record's own partition whatever its key, while a key-hashing one returns
// one partition for one key.
func honoursRecordPartition(p kgo.Partitioner, topic string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false // a partitioner that cannot be probed is not the manual one
		}
	}()
	tp := p.ForTopic(topic)
	if _, backup := tp.(kgo.TopicBackupPartitioner); backup {
		return false
	}
	const probes = 8
	for i := range int32(probes) {
		rec := &kgo.Record{Topic: topic, Key: []byte("workrouter-probe"), Partition: i}
		if !tp.RequiresConsistency(rec) || tp.Partition(rec, probes) != int(i) {
			return false
		}
	}
	return true
}

// Send sends cmd and waits until Kafka has acknowledged it (acks=all by
// default) or it has failed. cmd is validated first ([Command.Validate]).
// A cmd without an ID is given one (see the package documentation,
// "Command IDs"), which the Result carries, on an error too: to retry a
// send that failed ambiguously (a timeout, a cancelled ctx, a broken
// connection: the command may have been written), send the same command
// with cmd.ID = res.ID, and workers that deduplicate apply it once; a
// retry without it is a new command.
// Send fails with a [*PartitionCountChangedError] if the router refuses to
// send because the partition count changed, with an error matching
// [ErrRecordTooLarge] for a command that cannot fit one record batch, and
// with an error matching [ErrClosed] after [Router.Close]. ctx can cancel the send while it is
// buffered; once a request carrying it is in flight, Send waits for its
// outcome (so that an idempotent producer keeps its ordering guarantees).
//
// Send does not wait for the client's linger: while it waits, the client
// flushes (see the package documentation, "Latency and batching").
//
// Cancelling ctx is not private to this send: the client (kgo) cancels a
// whole batch, judged by the context of the batch's first record, and then
// fails every command buffered for the same partition, including other
// goroutines' sends; and a cancelled command that is not first in its
// batch may still be written. Give Send a context that lives as long as
// the command is wanted, not a per-request deadline shared by unrelated
// work. Safe to call from any goroutine, but not from a SendAsync callback.
func (r *Router) Send(ctx context.Context, cmd Command) (Result, error) {
	return r.sendSync(ctx, cmd, nil)
}

// sendSync is send, waiting for the outcome.
func (r *Router) sendSync(ctx context.Context, cmd Command, extra []kgo.RecordHeader) (Result, error) {
	var (
		res  Result
		err  error
		done = make(chan struct{})
	)
	if !r.lingers {
		r.send(ctx, cmd, extra, func(rs Result, e error) {
			res, err = rs, e
			close(done)
		})
		<-done
		return res, err
	}
	// The client lingers: flush while this send waits (see the package
	// documentation, "Latency and batching"). kgo's Flush stops every
	// partition's linger and starts none while it runs, which covers this
	// record even if it reaches its partition's buffer only later (the
	// first sends of a client wait for its metadata and producer ID); it
	// returns once nothing is buffered, or at once when this send's
	// outcome cancels fctx.
	fctx, stop := context.WithCancel(context.Background())
	r.send(ctx, cmd, extra, func(rs Result, e error) {
		res, err = rs, e
		stop()
		close(done)
	})
	_ = r.cl.Flush(fctx) // its error is fctx's: this send completed
	stop()
	<-done
	return res, err
}

// SendAsync sends cmd without waiting and calls fn exactly once with the
// outcome, which carries the same errors and the same command ID
// (Result.ID, on an error too) as [Router.Send]'s. If the send
// fails before being buffered (validation, [ErrRecordTooLarge], [ErrClosed], a refused partition
// count change), fn is called on the calling goroutine before SendAsync
// returns; otherwise it is called later from the client's promise
// goroutine, serially with other callbacks, so fn must return quickly and
// must not call Send, Flush or Close. Commands sent by one goroutine with the
// same key are written in call order. SendAsync may block while the client
// buffer is full (until ctx is done). Cancelling ctx after SendAsync
// returned acts as it does for [Router.Send]: it may fail every command
// buffered for the same partition. fn must not be nil. Safe to call from
// any goroutine.
func (r *Router) SendAsync(ctx context.Context, cmd Command, fn func(Result, error)) {
	r.send(ctx, cmd, nil, fn)
}

// send implements SendAsync; extra are more (reserved) headers on the
// record.
func (r *Router) send(ctx context.Context, cmd Command, extra []kgo.RecordHeader, fn func(Result, error)) {
	p, err := r.pending(cmd)
	if err != nil {
		if r.observed {
			r.emit(NotSent{Topic: r.cfg.Topic, Err: err})
		}
		fn(Result{}, err)
		return
	}
	if len(extra) > 0 {
		p.rec.Headers = append(p.rec.Headers, extra...)
	}
	p.fn = fn
	if r.observed {
		p.sentAt = int64(time.Since(r.epoch))
	}
	if r.hooked {
		r.cl.Produce(ctx, &p.rec, func(rec *kgo.Record, err error) { r.finish(p, rec, err) })
		return
	}
	p.Context = ctx
	p.rec.Context = p
	r.cl.Produce(ctx, &p.rec, r.promise)
}

// pending is one send in flight: the record handed to the client, its type
// and ID headers and the callback, in one allocation (raw kgo pays one for
// the record and one for its headers; see BenchmarkSendAsync). Unless the
// client has hooks, the record's Context is the pending itself, which
// embeds the caller's ctx (so the client sees the caller's context), and
// the one promise every send shares ([Router.onProduced]) finds its
// callback from the record. kgo lets hooks replace a record's Context, so
// with hooks each send has a promise of its own.
type pending struct {
	context.Context // the caller's ctx
	rec             kgo.Record
	hdr             [2]kgo.RecordHeader // the type and ID headers of a command without user headers
	typ             [pendingTypeLen]byte
	idBuf           [pendingIDLen]byte // the ID header's value, if it fits: a generated ID, or a caller's
	id              string             // the command's ID, for Result.ID
	fn              func(Result, error)
	sentAt          int64 // with metrics only: when produce was called, in ns since Router.epoch
}

// pendingTypeLen is the longest command Type a pending carries inline;
// a longer one is copied to a slice of its own.
const pendingTypeLen = 16

// pendingIDLen is the longest command ID a pending carries inline: every
// generated ID (idLen) and a caller's UUID (36 bytes); a longer one is
// copied to a slice of its own.
const pendingIDLen = 48

// idLen is the longest ID the router generates: its prefix (see
// newIDPrefix) and a sequence number of at most 16 hex digits.
const idLen = idPrefixLen + 16

// idPrefixLen is the length of newIDPrefix's prefix: 128 bits in RFC 4648
// base32 without padding (26 characters), and a dash.
const idPrefixLen = 26 + 1

// Every generated ID fits in a pending's idBuf (a compile-time check).
var _ [pendingIDLen - idLen]struct{}

// idEncoding encodes the random part of the generated IDs.
var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newIDPrefix returns the prefix of the IDs a Router generates: 128 random
// bits from crypto/rand, in base32, and a dash. A Router numbers its IDs
// after it from 1, so they are unique within the Router, and the random
// prefix makes them unique across Routers and processes: n Routers share a
// prefix with a chance below n²/2^129.
func newIDPrefix() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (it crashes the program instead)
	return idEncoding.EncodeToString(b[:]) + "-"
}

// setID gives p the ID of cmd: cmd.ID if set, else a new one. It is the
// only writer of p.idBuf, before the record is handed to the client.
func (r *Router) setID(p *pending, cmd Command) []byte {
	if cmd.ID != "" {
		p.id = cmd.ID
		if len(cmd.ID) <= pendingIDLen {
			return p.idBuf[:copy(p.idBuf[:], cmd.ID)]
		}
		return []byte(cmd.ID)
	}
	b := append(p.idBuf[:0], r.idPrefix...)
	b = strconv.AppendUint(b, r.idSeq.Add(1), 16)
	// No allocation: p.id views p.idBuf, which nothing writes again (the
	// record's ID header views it too, and the client only reads header
	// values), and which lives as long as p.id does, p being
	// allocated for this send alone.
	p.id = unsafe.String(&p.idBuf[0], len(b))
	return b
}

// pending validates cmd and encodes it, for the partition its key maps to
// under the current partition count, into a new pending send.
func (r *Router) pending(cmd Command) (*pending, error) {
	if err := cmd.Validate(); err != nil {
		return nil, err
	}
	st := r.state.Load()
	if st.closed {
		return nil, fmt.Errorf("%w: cannot send to topic %q", ErrClosed, r.cfg.Topic)
	}
	if st.refused != nil {
		e := *st.refused
		return nil, &e
	}
	p := &pending{}
	var typ []byte
	if len(cmd.Type) <= pendingTypeLen {
		typ = p.typ[:copy(p.typ[:], cmd.Type)]
	} else {
		typ = []byte(cmd.Type)
	}
	id := r.setID(p, cmd)
	headers := p.hdr[:0]
	if len(cmd.Headers) > 0 {
		headers = make([]kgo.RecordHeader, 0, len(cmd.Headers)+2)
	}
	p.rec = kgo.Record{
		Topic:     r.cfg.Topic,
		Partition: r.cfg.Partitioner.Partition(cmd.Key, st.count),
		Key:       cmd.Key,
		Value:     cmd.Payload,
		Headers:   cmdheaders.AppendUpstream(cmdheaders.Append(headers, typ, id, cmd.Headers), cmd.Upstream),
	}
	if n := recordBound(&p.rec); n > r.maxBatch {
		return nil, fmt.Errorf("%w: command of %d bytes (key, payload and headers) to %q: the producer's record batches hold at most %d bytes: %w",
			ErrRecordTooLarge, n-recordOverhead, r.cfg.Topic, r.maxBatch, kerr.MessageTooLarge)
	}
	return p, nil
}

// recordOverhead bounds from above what a record batch holding one record
// adds to the record's key, value and headers: the batch header (65 bytes
// in kgo's count), the record's varints and attributes, 10 bytes of
// varints per header, with room to spare.
const recordOverhead = 128

// recordBound is an upper bound of the wire size of a batch holding rec
// alone. kgo fails a record larger than one batch on its own, after it
// was buffered, while later records of its partition go on being written;
// the router refuses it before it is buffered instead (ErrRecordTooLarge),
// so that a refused command never leaves a gap behind which later
// commands of its key are written.
func recordBound(rec *kgo.Record) int64 {
	n := int64(len(rec.Key) + len(rec.Value) + recordOverhead)
	for _, h := range rec.Headers {
		n += int64(len(h.Key) + len(h.Value) + 10)
	}
	return n
}

// onProduced is the promise of every send: it finds the send's pending
// from the record and calls its callback with the outcome.
func (r *Router) onProduced(rec *kgo.Record, err error) {
	p, ok := rec.Context.(*pending)
	if !ok {
		// Unreachable: without hooks nothing but produce sets a record's
		// Context. Losing a callback silently would be worse than this.
		panic(fmt.Sprintf("router: the Context of a record sent to %s/%d is not the router's; SendAsync cannot find its callback", rec.Topic, rec.Partition))
	}
	r.finish(p, rec, err)
}

// finish reports a send's outcome to its callback (and its observers).
func (r *Router) finish(p *pending, rec *kgo.Record, err error) {
	if r.observed {
		r.emit(Sent{Topic: r.cfg.Topic, Took: time.Since(r.epoch) - time.Duration(p.sentAt), Err: err})
	}
	p.fn(r.result(rec, p.id, err))
}

// result converts a produce promise's arguments into a send outcome for
// the command with ID id.
func (r *Router) result(rec *kgo.Record, id string, err error) (Result, error) {
	if err != nil {
		if errors.Is(err, kgo.ErrClientClosed) && r.isClosed() {
			return Result{ID: id}, fmt.Errorf("%w: send to %s/%d of command %s not completed: %w", ErrClosed, rec.Topic, rec.Partition, id, err)
		}
		return Result{ID: id}, fmt.Errorf("router: send to %s/%d of command %s failed: %w", rec.Topic, rec.Partition, id, err)
	}
	return Result{Partition: rec.Partition, Offset: rec.Offset, ID: id}, nil
}

func (r *Router) isClosed() bool {
	return r.state.Load().closed
}

// Flush waits until every send buffered so far has completed (its callback
// has been called), or ctx is done, whose error it then returns. With a
// caller-given Config.Client it also waits for records others buffered in
// that client. It fails with [ErrClosed] after Close. Safe to call from any
// goroutine, but not from a SendAsync callback.
func (r *Router) Flush(ctx context.Context) error {
	if r.isClosed() {
		return fmt.Errorf("%w: cannot flush", ErrClosed)
	}
	if err := r.cl.Flush(ctx); err != nil {
		return fmt.Errorf("router: flushing sends to %q: %w", r.cfg.Topic, err)
	}
	return nil
}

// Close stops the router: later sends fail with [ErrClosed]. It waits, for
// at most Config.CloseTimeout, for outstanding sends to complete (returning
// an error matching context.DeadlineExceeded if they did not), stops the
// router's checker goroutine and waits for it, closes the client if the
// router built it (failing still-outstanding sends with ErrClosed), and
// reports Closed to its observers. A send
// that races with Close either completes or fails with ErrClosed; its
// callback is called exactly once either way. Close is idempotent: later
// calls return the first call's result. Safe to call from any goroutine,
// but not from a SendAsync callback or Config.OnAlarm.
func (r *Router) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.setState(func(st *sendState) { st.closed = true })
		r.mu.Unlock()

		r.stop()
		<-r.done

		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.CloseTimeout)
		defer cancel()
		if err := r.cl.Flush(ctx); err != nil {
			r.closeErr = fmt.Errorf("router: closing: outstanding sends to %q not flushed within %v: %w",
				r.cfg.Topic, r.cfg.CloseTimeout, err)
		}
		if r.ownsClient {
			r.cl.Close()
		}
		r.cfg.Logger.Info("router closed", "topic", r.cfg.Topic)
		r.emit(Closed{Topic: r.cfg.Topic})
	})
	return r.closeErr
}

// CheckPartitions re-reads the topic's partition count now, as the
// router's goroutine does every Config.PartitionCheckInterval, and applies
// Config.OnPartitionCountChange if it differs from the expected count.
//
// Under Refuse it returns a [*PartitionCountChangedError] once a change has
// been seen (and keeps returning it: a refusing router never resumes).
// Under Alarm it returns nil after switching to the new count; by then
// Config.OnAlarm has been called and the client's producer knows the new
// partitions, so later sends use them. It returns an error matching
// [ErrMetadata] or [ErrTopicNotFound] if the count cannot be read, and
// [ErrClosed] after Close. Checks are serialized. Safe to call from any
// goroutine, except from Config.OnAlarm.
func (r *Router) CheckPartitions(ctx context.Context) error {
	if r.isClosed() {
		return fmt.Errorf("%w: cannot check partitions", ErrClosed)
	}
	return r.check(ctx)
}

// checkLoop is the router's goroutine: it runs check every
// PartitionCheckInterval until ctx is canceled.
func (r *Router) checkLoop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.cfg.PartitionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.PartitionCheckInterval)
		err := r.check(cctx)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, ErrPartitionCountChanged) {
			r.cfg.Logger.Warn("router: partition count check failed", "topic", r.cfg.Topic, "err", err)
		}
	}
}

// check implements CheckPartitions.
func (r *Router) check(ctx context.Context) error {
	r.checkMu.Lock()
	defer r.checkMu.Unlock()

	current, err := r.readPartitionCount(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	st := r.state.Load()
	expected, refused := st.count, st.refused
	if refused != nil && refused.Current != current {
		refused = &PartitionCountChangedError{Topic: r.cfg.Topic, Expected: expected, Current: current}
		r.setState(func(st *sendState) { st.refused = refused })
		r.emit(CountChanged{Topic: r.cfg.Topic, Expected: expected, Current: current, Policy: Refuse})
	}
	r.mu.Unlock()
	if refused != nil {
		e := *refused
		return &e
	}
	if current == expected {
		return nil
	}
	change := PartitionCountChangedError{Topic: r.cfg.Topic, Expected: expected, Current: current}

	r.emit(CountChanged{Topic: r.cfg.Topic, Expected: expected, Current: current, Policy: r.cfg.OnPartitionCountChange})
	if r.cfg.OnPartitionCountChange == Refuse {
		r.mu.Lock()
		r.setState(func(st *sendState) { st.refused = &change })
		r.mu.Unlock()
		r.cfg.Logger.Error("router: partition count changed; refusing all sends",
			"topic", r.cfg.Topic, "expected", expected, "current", current, "err", &change)
		e := change
		return &e
	}

	// Alarm: switch to the new count, but only once the client's producer
	// knows the new partitions, or it would fail records sent to them.
	if err := r.awaitProducerPartitions(ctx, expected, current); err != nil {
		return err
	}
	r.mu.Lock()
	r.setState(func(st *sendState) { st.count = current })
	r.mu.Unlock()
	r.cfg.Logger.Error("router: partition count changed; producing with the new count (policy alarm)",
		"topic", r.cfg.Topic, "expected", expected, "current", current, "err", &change)
	if r.cfg.OnAlarm != nil {
		r.cfg.OnAlarm(change)
	}
	return nil
}

// awaitProducerPartitions waits until the client's producer metadata
// covers current partitions, forcing metadata refreshes meanwhile.
func (r *Router) awaitProducerPartitions(ctx context.Context, expected, current int32) error {
	if current <= expected {
		return nil // every partition the router will pick is already known
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		if r.producerKnows(current) {
			return nil
		}
		if i%20 == 0 {
			r.cl.ForceMetadataRefresh()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for the producer to learn that %q has %d partitions: %w",
				ErrMetadata, r.cfg.Topic, current, ctx.Err())
		case <-t.C:
		}
	}
}

// producerKnows reports whether producing to partition n-1 of the topic
// would not fail for an unknown partition: either the producer's metadata
// has it, or the producer has not loaded the topic yet (its first load will
// be fresh).
func (r *Router) producerKnows(n int32) bool {
	if leader, _, err := r.cl.PartitionLeader(r.cfg.Topic, n-1); leader >= 0 || err != nil {
		return true
	}
	leader, _, err := r.cl.PartitionLeader(r.cfg.Topic, 0)
	return leader < 0 && err == nil
}

// readPartitionCount reads the topic's partition count with a metadata
// request.
func (r *Router) readPartitionCount(ctx context.Context) (int32, error) {
	topic := r.cfg.Topic
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, r.cl)
	if err != nil {
		return 0, fmt.Errorf("%w: topic %q: %w", ErrMetadata, topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return 0, fmt.Errorf("%w: %q: %w", ErrTopicNotFound, topic, err)
			}
			return 0, fmt.Errorf("%w: topic %q: %w", ErrMetadata, topic, err)
		}
		if len(t.Partitions) == 0 {
			return 0, fmt.Errorf("%w: topic %q has no partitions", ErrMetadata, topic)
		}
		return int32(len(t.Partitions)), nil
	}
	return 0, fmt.Errorf("%w: %q: not in the metadata response", ErrTopicNotFound, topic)
}
