package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink/kafka"
)

// EventsTopic is the default topic of the ledger's events on a sink/kafka
// sink ([Kafka]): one record per command, its accept/reject decision.
const EventsTopic = "ledger.events"

// Event is the value (JSON) of one record of the events topic: the
// decision on one command, keyed by its account. Kind is [KindDeposit] or
// [KindWithdraw] for an accepted command, [KindRefused] for a withdrawal
// the overdraft rule refused; Balance is the account's balance after it.
// Topic, TopicID, Part and Off are the command's position in its log,
// Group, Epoch and Member the tenure that decided it.
type Event struct {
	Group   string `json:"group"`
	TopicID string `json:"topic_id"`
	Topic   string `json:"topic"`
	Part    int32  `json:"part"`
	Off     int64  `json:"off"`
	Account string `json:"account"`
	ID      string `json:"id"`
	Seq     int    `json:"seq"`
	Kind    string `json:"kind"`
	Amount  int64  `json:"amount"`
	Balance int64  `json:"balance"`
	Epoch   int32  `json:"epoch"`
	Member  string `json:"member"`
	// EventPartition and EventOffset are where a reader found the
	// event (KafkaEvents sets them); not in the record.
	EventPartition int32 `json:"-"`
	EventOffset    int64 `json:"-"`
}

// KafkaConfig configures [NewKafka].
type KafkaConfig struct {
	// Brokers are the seed brokers of the cluster the sink writes to.
	// Required.
	Brokers []string
	// EventsTopic is where the decisions go; default [EventsTopic]. It
	// must exist.
	EventsTopic string
	// ClientOpts are more options of the clients that read the events
	// back (TLS, SASL).
	ClientOpts []kgo.Opt
}

// Kafka is the ledger on a sink/kafka sink: its handlers publish each
// command's decision as an [Event] to the events topic through the
// *kafka.Tx, in the transaction that commits the command's offset, and
// write nothing else. The events topic is the ledger: there is no table.
//
// The overdraft rule needs the account's balance, which lives in the
// events. The handlers keep each partition's balances (and the command IDs
// decided there) in memory, for one tenure: at a tenure's first command,
// and whenever a command comes again at or below an offset already
// decided in memory (the batch is retried: its transaction did not
// commit), they read them back from the events topic with read_committed,
// up to its end, so that only committed decisions count. An account's
// events are all in one partition of the events topic (the key), in
// commit order. The read waits while a transaction that wrote to the
// events topic is open (at most the sink's transaction timeout), and costs
// a scan of the topic per tenure: an example's choice, not a store's (a
// compacted topic of balances, written in the same transaction, would
// bound it).
//
// Command IDs: a command whose ID already has an event from the same
// group, topic and partition is decided once: its second copy publishes
// nothing (the sink declares no dedupe window; the events topic is the
// window here, whole).
//
// Its methods may be called from any goroutine; Close it after the
// workers that use its handlers.
type Kafka struct {
	cfg KafkaConfig

	mu    sync.Mutex
	parts map[epochs.Scope]*kafkaPart
}

// kafkaPart is the in-memory state of one partition's ledger.
type kafkaPart struct {
	mu       sync.Mutex
	valid    bool
	tok      epochs.Token
	next     int64 // the offset after the last command decided in memory
	balances map[string]int64
	ids      map[string]bool
}

// NewKafka returns the ledger for a sink/kafka sink writing to
// cfg.Brokers.
func NewKafka(cfg KafkaConfig) (*Kafka, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("ledger: kafka: no brokers")
	}
	if cfg.EventsTopic == "" {
		cfg.EventsTopic = EventsTopic
	}
	return &Kafka{cfg: cfg, parts: map[epochs.Scope]*kafkaPart{}}, nil
}

// Topic returns the events topic.
func (l *Kafka) Topic() string { return l.cfg.EventsTopic }

// Close releases nothing yet: the reads of the events topic close their
// clients when they end. It is there so that callers need not change when
// the ledger keeps a client.
func (l *Kafka) Close() {}

// Handlers returns the ledger's handlers for a sink/kafka sink, by command
// type ([TypeDeposit], [TypeWithdraw]). Each call returns a new map.
func (l *Kafka) Handlers() map[string]consumer.Handler[*kafka.Tx] {
	return map[string]consumer.Handler[*kafka.Tx]{
		TypeDeposit: func(ctx context.Context, tx *kafka.Tx, cmd consumer.Command) error {
			return l.decide(ctx, tx, cmd, false)
		},
		TypeWithdraw: func(ctx context.Context, tx *kafka.Tx, cmd consumer.Command) error {
			return l.decide(ctx, tx, cmd, true)
		},
	}
}

func (l *Kafka) part(scope epochs.Scope) *kafkaPart {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.parts[scope]
	if !ok {
		p = &kafkaPart{}
		l.parts[scope] = p
	}
	return p
}

// decide publishes cmd's decision.
func (l *Kafka) decide(ctx context.Context, tx *kafka.Tx, cmd consumer.Command, withdraw bool) error {
	pl, err := decode(cmd)
	if err != nil {
		return consumer.Permanent(err)
	}
	st := l.part(cmd.Token.Scope())
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.valid || st.tok != cmd.Token || cmd.Offset < st.next {
		st.valid = false
		bal, ids, err := l.rebuild(ctx, cmd.Token)
		if err != nil {
			return err
		}
		st.valid, st.tok, st.next, st.balances, st.ids = true, cmd.Token, cmd.Offset, bal, ids
	}
	st.next = cmd.Offset + 1
	if st.ids[pl.ID] {
		return nil // decided already: its event is in the topic
	}
	account := string(cmd.Key)
	bal := st.balances[account]
	kind := KindDeposit
	switch {
	case !withdraw:
		bal += pl.Amount
	case bal >= pl.Amount:
		kind = KindWithdraw
		bal -= pl.Amount
	default:
		kind = KindRefused
	}
	ev := Event{Group: cmd.Token.Group, TopicID: cmd.TopicID, Topic: cmd.Token.Topic, Part: cmd.Token.Partition, Off: cmd.Offset,
		Account: account, ID: pl.ID, Seq: pl.Seq, Kind: kind, Amount: pl.Amount, Balance: bal,
		Epoch: cmd.Token.Epoch, Member: cmd.Token.Member}
	v, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("ledger: event %s %q: %w", kind, pl.ID, err)
	}
	if err := tx.Produce(ctx, kafka.Record{Topic: l.cfg.EventsTopic, Key: cmd.Key, Value: v,
		Headers: []kafka.Header{{Key: envelope.IDHeader, Value: []byte(pl.ID)}}}); err != nil {
		return fmt.Errorf("ledger: event %s %q: %w", kind, pl.ID, err)
	}
	st.balances[account] = bal
	st.ids[pl.ID] = true
	return nil
}

// rebuild reads the committed events of tok's partition back, retrying
// until it succeeds or ctx ends (a broker that restarts is not the
// command's fault).
func (l *Kafka) rebuild(ctx context.Context, tok epochs.Token) (map[string]int64, map[string]bool, error) {
	backoff := 100 * time.Millisecond
	for {
		evs, err := KafkaEvents(ctx, l.cfg.Brokers, l.cfg.EventsTopic, l.cfg.ClientOpts...)
		if err == nil {
			bal, ids := map[string]int64{}, map[string]bool{}
			for _, e := range evs {
				if e.Group == tok.Group && e.Topic == tok.Topic && e.Part == tok.Partition {
					bal[e.Account] = e.Balance
					ids[e.ID] = true
				}
			}
			return bal, ids, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("ledger: reading the events of %s back: %w", tok.Scope(), errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// KafkaEvents reads every event of topic that a read_committed consumer
// sees, from the start up to the end each partition had when it was
// called (ListOffsets' high watermark), by partition and offset. It waits
// while a transaction that wrote to the topic before the call is open:
// a read_committed fetch stops at the partition's last stable offset, the
// first offset of the oldest open transaction, so committed events above
// it (another tenure's, of other accounts) come only once that
// transaction ends; reading only up to the last stable offset at the call
// would leave them out, and a ledger that decided from such a read would
// miss committed decisions. If no record of a partition it still reads
// arrives for [KafkaEventsIdle] (a transaction open that long, or one the
// broker lost without a marker), it fails with ErrEventsStalled instead of
// waiting on; Kafka's handlers retry the read.
func KafkaEvents(ctx context.Context, brokers []string, topic string, opts ...kgo.Opt) ([]Event, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("ledger: events: %w", err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("ledger: events: end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("ledger: events: end offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{} // partition -> the last offset below the end
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset - 1
		}
	})
	if len(want) == 0 {
		return nil, nil
	}
	parts := map[int32]kgo.Offset{}
	for p := range want {
		parts[p] = kgo.NewOffset().AtStart()
	}
	rd, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// The transaction markers come too: the last offset below the
		// end may be one, and an aborted transaction's records never
		// come, only its marker.
		kgo.KeepControlRecords()}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("ledger: events: %w", err)
	}
	defer rd.Close()
	var out []Event
	progress := time.Now()
	for len(want) > 0 {
		pctx, cancel := context.WithDeadline(ctx, progress.Add(KafkaEventsIdle))
		fs := rd.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("ledger: events: reading %s: %w", topic, err)
		}
		if time.Since(progress) >= KafkaEventsIdle {
			return nil, fmt.Errorf("%w: %s: no record for %s, still to read up to (partition: offset) %v", ErrEventsStalled, topic, KafkaEventsIdle, want)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("ledger: events: %s/%d: %w", t, p, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			last, ok := want[r.Partition]
			if !ok {
				return
			}
			if !r.Attrs.IsControl() && r.Offset <= last {
				var e Event
				if json.Unmarshal(r.Value, &e) == nil {
					e.EventPartition, e.EventOffset = r.Partition, r.Offset
					out = append(out, e)
				}
			}
			if r.Offset >= last {
				delete(want, r.Partition)
			}
			progress = time.Now()
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].EventPartition != out[j].EventPartition {
			return out[i].EventPartition < out[j].EventPartition
		}
		return out[i].EventOffset < out[j].EventOffset
	})
	return out, nil
}

// KafkaEventsIdle is how long KafkaEvents waits for the next record of a
// partition it has not read to its end yet before it fails with
// ErrEventsStalled: a transaction that stays open (a paused writer's, until
// its transaction timeout) or one a broker lost without writing its
// marker must not hang it.
var KafkaEventsIdle = 15 * time.Second

// ErrEventsStalled is matched by the error of KafkaEvents when no record
// of a partition it still reads arrived for KafkaEventsIdle.
var ErrEventsStalled = errors.New("ledger: events: the read of the events stalled")

// VerifyKafka reports the invariants of events (as [KafkaEvents] returns
// them) as [VerifySQLite] does for the tables: an account's balance is
// the Balance of its last event, which must be the sum of its accepted
// deposits minus its accepted withdrawals, never negative.
func VerifyKafka(events []Event) Report {
	r := Report{Seqs: map[string][]int{}}
	seen := map[string]int{}
	last := map[string]int{}
	sum, bal := map[string]int64{}, map[string]int64{}
	for _, e := range events {
		r.Postings++
		seen[e.ID]++
		if seen[e.ID] == 2 {
			r.Duplicates++
		}
		if s, ok := last[e.Account]; ok && e.Seq <= s {
			r.OrderViolations++
		}
		last[e.Account] = e.Seq
		r.Seqs[e.Account] = append(r.Seqs[e.Account], e.Seq)
		switch e.Kind {
		case KindDeposit:
			sum[e.Account] += e.Amount
		case KindWithdraw:
			sum[e.Account] -= e.Amount
		case KindRefused:
			r.Refused++
		}
		bal[e.Account] = e.Balance
	}
	r.Accounts = len(bal)
	for a, b := range bal {
		if b != sum[a] || b < 0 {
			r.Mismatches = append(r.Mismatches, a)
		}
	}
	sort.Strings(r.Mismatches)
	return r
}
