package cluster

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/internal/invariants"
	"github.com/workrouter/workrouter/sink"
)

// CheckConfig says what Check reads.
type CheckConfig struct {
	Brokers []string
	// ClientOpts are more options of the client that reads Kafka's
	// offsets (TLS, SASL).
	ClientOpts []kgo.Opt
	Group      string
	Topic      string
	Partitions int32
	// Acked are the commands the broker acknowledged (Producer.Acked).
	Acked map[string]Acked
	// NotConverged reports that the run's wait for lag zero timed out.
	NotConverged bool
}

// Check reads the ledger sink's own records — its postings (each with the
// token it was applied under), its history of claims and resets, its fence
// rows and its balances — and Kafka's end and committed offsets, and checks
// every invariant over them with internal/invariants: the one checker the
// demo, the chaos harness and the process tests share.
func (s *Store) Check(ctx context.Context, cfg CheckConfig) (invariants.Report, error) {
	var in invariants.Input
	postings, err := s.Postings(ctx)
	if err != nil {
		return invariants.Report{}, fmt.Errorf("cluster: reading postings: %w", err)
	}
	for _, p := range postings {
		in.Writes = append(in.Writes, invariants.Write{Log: p.TopicID, Partition: p.Partition, Offset: p.Offset, Epoch: p.Epoch, Member: p.Member,
			ID: p.ID, Key: p.Account, Seq: int64(p.Seq)})
	}
	in.History = map[int32][]sink.HistoryEntry{}
	for p := int32(0); p < cfg.Partitions; p++ {
		hs, err := s.History(ctx, Scope(cfg.Group, cfg.Topic, p))
		if err != nil {
			return invariants.Report{}, fmt.Errorf("cluster: reading history: %w", err)
		}
		in.History[p] = hs
	}
	in.Acked = []invariants.Acked{}
	for id, a := range cfg.Acked {
		in.Acked = append(in.Acked, invariants.Acked{ID: id, Partition: a.Partition, Offset: a.Offset})
	}
	rep, err := s.Verify(ctx)
	if err != nil {
		return invariants.Report{}, fmt.Errorf("cluster: reading balances: %w", err)
	}
	if n := len(rep.Mismatches); n > 0 {
		in.ExtraX, in.ExtraXNote = n, fmt.Sprintf("%d account balances do not match their postings: %v", n, rep.Mismatches)
	}
	fences, err := s.Fences(ctx)
	if err != nil {
		return invariants.Report{}, fmt.Errorf("cluster: reading fences: %w", err)
	}
	in.Checkpoints = map[int32]int64{}
	for _, f := range fences {
		if f.Scope.Group == cfg.Group && f.Scope.Topic == cfg.Topic {
			in.Checkpoints[f.Scope.Partition] = f.NextOffset
		}
	}
	if len(cfg.Brokers) > 0 {
		adm, err := kadm.NewOptClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.ClientOpts...)...)
		if err != nil {
			return invariants.Report{}, err
		}
		defer adm.Close()
		ends, err := adm.ListEndOffsets(ctx, cfg.Topic)
		if err != nil {
			return invariants.Report{}, fmt.Errorf("cluster: listing end offsets: %w", err)
		}
		committed, err := adm.FetchOffsets(ctx, cfg.Group)
		if err != nil {
			return invariants.Report{}, fmt.Errorf("cluster: fetching committed offsets: %w", err)
		}
		in.Ends, in.Committed = map[int32]int64{}, map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err != nil || o.Offset == 0 {
				return
			}
			in.Ends[o.Partition] = o.Offset
			in.Committed[o.Partition] = 0
			if c, ok := committed.Lookup(cfg.Topic, o.Partition); ok {
				in.Committed[o.Partition] = c.At
			}
			if _, ok := in.Checkpoints[o.Partition]; !ok {
				in.Checkpoints[o.Partition] = 0
			}
		})
	}
	in.NotConverged = cfg.NotConverged
	return invariants.Check(in), nil
}
