package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/topicid"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// openKafka opens the ledger on a sink/kafka sink: topics of the run's own
// on cfg.KafkaBrokers (SchemaPrefix-<nanos>.events, .checkpoints and
// .dead-letters), created here and left on the cluster (an embedded
// broker goes away with the run). The store reads what the sink and the
// ledger wrote with read_committed: the events are the postings, and the
// checkpoint topic (kept uncompacted here, so that every transaction's
// record stays) gives the fences and the history.
func openKafka(ctx context.Context, cfg StoreConfig) (*Store, error) {
	base := cfg.SchemaPrefix
	if base == "" {
		base = "workrouter"
	}
	name := strings.ReplaceAll(fmt.Sprintf("%s-%d", base, time.Now().UnixNano()), "_", "-")
	events, checkpoints, dead := name+".events", name+".checkpoints", name+".dead-letters"
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...)}, cfg.KafkaClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: Kafka sink: %w", err)
	}
	adm := kadm.NewClient(cl)
	parts := cfg.KafkaPartitions
	if parts <= 0 {
		parts = 1
	}
	for _, t := range []struct {
		name  string
		parts int32
	}{{events, parts}, {checkpoints, 1}, {dead, 1}} {
		if _, err := adm.CreateTopic(ctx, t.parts, -1, nil, t.name); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			cl.Close()
			return nil, fmt.Errorf("cluster: Kafka sink: creating topic %s: %w", t.name, err)
		}
	}
	read := func(ctx context.Context) ([]ledger.Event, error) {
		return ledger.KafkaEvents(ctx, cfg.KafkaBrokers, events, cfg.KafkaClientOpts...)
	}
	postings := func(ctx context.Context) ([]Posting, error) {
		evs, err := read(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]Posting, len(evs))
		for i, e := range evs {
			// An account's events are in one partition of the events
			// topic, in commit order: their offsets are its order.
			out[i] = Posting{TopicID: e.TopicID, Partition: e.Part, Offset: e.Off, Account: e.Account, ID: e.ID, Seq: e.Seq,
				Epoch: e.Epoch, Member: e.Member, Order: e.EventOffset + 1}
		}
		return out, nil
	}
	cps := func(ctx context.Context) ([]checkpointRecord, error) {
		return readCheckpoints(ctx, cfg.KafkaBrokers, checkpoints, cfg.KafkaClientOpts...)
	}
	spec := "kafka://?" + url.Values{"events-topic": {events}, "checkpoint-topic": {checkpoints}, "dead-letter-topic": {dead}}.Encode()
	return &Store{
		spec:  spec,
		desc:  "Kafka sink: events " + events + ", checkpoints " + checkpoints + ", dead letters " + dead + " (read with read_committed)",
		kafka: true,
		count: func(ctx context.Context, q string, args ...any) (int, error) {
			ps, err := postings(ctx)
			if err != nil {
				return 0, err
			}
			return countPostings(ps, q, args...)
		},
		verify: func(ctx context.Context) (ledger.Report, error) {
			evs, err := read(ctx)
			if err != nil {
				return ledger.Report{}, err
			}
			return ledger.VerifyKafka(evs), nil
		},
		history: func(ctx context.Context, scope epochs.Scope) ([]fenceadmin.Entry, error) {
			rs, err := cps(ctx)
			if err != nil {
				return nil, err
			}
			return checkpointHistory(rs, scope), nil
		},
		fences: func(ctx context.Context) ([]sink.Fence, error) {
			rs, err := cps(ctx)
			if err != nil {
				return nil, err
			}
			return checkpointFences(ctx, cl, rs)
		},
		postings:    postings,
		deadLetters: kafkaDeadLetters{brokers: cfg.KafkaBrokers, topic: dead, opts: cfg.KafkaClientOpts},
		close:       cl.Close,
	}, nil
}

// checkpointRecord is one record of the Kafka sink's checkpoint topic:
// the token of a transaction that committed and the offset it committed.
type checkpointRecord struct {
	scope epochs.Scope
	tok   epochs.Token
	next  int64
}

// readCheckpoints reads the sink's checkpoint topic with read_committed:
// one record per committed transaction, in commit order (one partition).
func readCheckpoints(ctx context.Context, brokers []string, topic string, opts ...kgo.Opt) ([]checkpointRecord, error) {
	// ledger.KafkaEvents reads the records' keys and values too: only
	// JSON values become events, so read the topic here.
	var out []checkpointRecord
	err := readOnePartition(ctx, brokers, topic, opts, func(r *kgo.Record) {
		if c, ok := parseCheckpoint(string(r.Key), string(r.Value)); ok {
			out = append(out, c)
		}
	})
	return out, err
}

// readOnePartition calls each with every record of topic's partition 0 (the
// sink's checkpoint and dead-letter topics have one) that a read_committed
// consumer sees, from the start up to the end the partition had when it
// was called, in order. It keeps the transaction markers so that a log
// that ends with one is read to its end.
func readOnePartition(ctx context.Context, brokers []string, topic string, opts []kgo.Opt, each func(*kgo.Record)) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("cluster: end offsets of %s: %w", topic, err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Offset == 0 {
		return nil
	}
	rd, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}, opts...)...)
	if err != nil {
		return err
	}
	defer rd.Close()
	for done := false; !done; {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cluster: reading %s: %w", topic, err)
		}
		if err := fs.Err(); err != nil {
			return fmt.Errorf("cluster: reading %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end.Offset-1 {
				done = true
			}
			if r.Attrs.IsControl() || r.Offset >= end.Offset {
				return
			}
			each(r)
		})
	}
	return nil
}

// parseCheckpoint parses a checkpoint record: the key group/topic/partition,
// the value "<token> next=<offset>" (sink/kafka), the token as
// epochs.Token.String writes it: group/topic/partition@epoch(member).
func parseCheckpoint(key, value string) (checkpointRecord, bool) {
	tokText, nextText, ok := cutLast(value, " next=")
	if !ok {
		return checkpointRecord{}, false
	}
	next, err := strconv.ParseInt(nextText, 10, 64)
	if err != nil {
		return checkpointRecord{}, false
	}
	scopeText, rest, ok := cutLast(tokText, "@")
	if !ok || scopeText != key {
		return checkpointRecord{}, false
	}
	epochText, member, ok := strings.Cut(rest, "(")
	if !ok || !strings.HasSuffix(member, ")") {
		return checkpointRecord{}, false
	}
	epoch, err := strconv.ParseInt(epochText, 10, 32)
	if err != nil {
		return checkpointRecord{}, false
	}
	groupTopic, partText, ok := cutLast(key, "/")
	if !ok {
		return checkpointRecord{}, false
	}
	group, topic, ok := strings.Cut(groupTopic, "/")
	part, err := strconv.ParseInt(partText, 10, 32)
	if !ok || err != nil {
		return checkpointRecord{}, false
	}
	scope := epochs.Scope{Group: group, Topic: topic, Partition: int32(part)}
	tok := epochs.Token{Group: group, Topic: topic, Partition: int32(part), Epoch: int32(epoch), Member: strings.TrimSuffix(member, ")")}
	return checkpointRecord{scope: scope, tok: tok, next: next}, true
}

func cutLast(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// checkpointHistory derives scope's claims from its committed
// transactions: the sink writes no claim, so each tenure's claim is its
// first committed transaction, at the offset the one before it committed
// (0 for the first). A tenure that committed nothing has no entry; a
// stale tenure whose transaction committed after a newer one's would show
// as a claim going backwards, which F reports.
func checkpointHistory(rs []checkpointRecord, scope epochs.Scope) []fenceadmin.Entry {
	var out []fenceadmin.Entry
	var prev int64
	var last epochs.Token
	for i, r := range rs {
		if r.scope != scope {
			continue
		}
		if r.tok != last {
			out = append(out, fenceadmin.Entry{Seq: int64(i + 1), Kind: fenceadmin.KindClaim, Token: r.tok, NextOffset: prev})
			last = r.tok
		}
		prev = r.next
	}
	return out
}

// checkpointFences returns one fence per scope of rs: the last committed
// token and offset, on the topic's current log.
func checkpointFences(ctx context.Context, cl *kgo.Client, rs []checkpointRecord) ([]sink.Fence, error) {
	last := map[epochs.Scope]checkpointRecord{}
	var order []epochs.Scope
	for _, r := range rs {
		if _, ok := last[r.scope]; !ok {
			order = append(order, r.scope)
		}
		last[r.scope] = r
	}
	ids := map[string]string{}
	var out []sink.Fence
	for _, sc := range order {
		id, ok := ids[sc.Topic]
		if !ok {
			raw, err := topicid.Read(ctx, cl, sc.Topic)
			if err != nil {
				return nil, fmt.Errorf("cluster: %w", err)
			}
			if raw != ([16]byte{}) {
				id = topicid.Format(raw)
			}
			ids[sc.Topic] = id
		}
		r := last[sc]
		out = append(out, sink.Fence{Scope: sc, Holder: r.tok, NextOffset: r.next, TopicID: id})
	}
	return out, nil
}

// Kafka reports whether the sink is sink/kafka.
func (s *Store) Kafka() bool { return s.kafka }
