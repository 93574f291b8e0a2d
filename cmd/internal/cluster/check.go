package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/internal/invariants"
	"github.com/workrouter/workrouter/sink/fenceadmin"
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
	// Poison are the poison records the broker acknowledged
	// (PoisonProducer.Acked): each must have exactly one dead letter, and
	// no other record may have one (D).
	Poison []PoisonRecord
	// Unconfirmed are poison records sent without an acknowledgement
	// (PoisonProducer.Unconfirmed). A dead letter that carries one's
	// PoisonHeader proves that it landed: it then counts as a poison
	// record at the dead letter's position. Any other dead letter is not
	// poison.
	Unconfirmed []PoisonRecord
	// Aborted are the records written in transactions that were aborted
	// (PoisonProducer.Aborted): none may be applied or dead-lettered (D).
	Aborted []PoisonRecord
	// Samples are the observations of committed offsets and NextOffsets
	// taken while the run went on (SampleCommitted), for V.
	Samples []invariants.Sample
}

// Check reads the ledger sink's own records — its postings (each with the
// token it was applied under), its history of claims and resets, its fence
// rows, its dead letters and its balances — and Kafka's end and committed
// offsets, and checks every invariant over them with internal/invariants:
// the one checker the demo, the chaos harness and the process tests share.
// Kafka's offsets (and the topic's ID) are read before the sink's fence
// rows, so that a committed offset ahead of NextOffset is never an artefact
// of the order of the reads (invariants.Sample).
func (s *Store) Check(ctx context.Context, cfg CheckConfig) (invariants.Report, error) {
	var in invariants.Input
	postings, err := s.Postings(ctx)
	if err != nil {
		return invariants.Report{}, fmt.Errorf("cluster: reading postings: %w", err)
	}
	// X is per command ID: the harnesses' commands carry their ledger ID
	// as the command ID (envelope.IDHeader), so a posting's ID is the
	// command's, and a command that entered the log twice (a retried
	// send, a producer's retry, a batch the broker wrote twice) must be
	// posted once: its other copies are skipped duplicates.
	// O is checked in application order: a posting's Order is its row's
	// insert order, which per account is the order its commands were
	// applied in, also with lanes (consumer.Config.KeyConcurrency) that
	// apply a partition's accounts out of offset order. F stays in offset
	// mode (Input.Temporal false): posting row IDs and history sequence
	// numbers are different sequences.
	for _, p := range postings {
		in.Writes = append(in.Writes, invariants.Write{Log: p.TopicID, Partition: p.Partition, Offset: p.Offset, Epoch: p.Epoch, Member: p.Member,
			ID: p.ID, Key: p.Account, Seq: int64(p.Seq), Order: p.Order})
	}
	in.History = map[int32][]fenceadmin.Entry{}
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
	for _, p := range cfg.Poison {
		in.Acked = append(in.Acked, invariants.Acked{ID: p.Position(), Partition: p.Partition, Offset: p.Offset, Poison: true})
	}
	if err := s.addDeadLetters(ctx, cfg, &in); err != nil {
		return invariants.Report{}, err
	}
	rep, err := s.Verify(ctx)
	if err != nil {
		return invariants.Report{}, fmt.Errorf("cluster: reading balances: %w", err)
	}
	if n := len(rep.Mismatches); n > 0 {
		in.ExtraX, in.ExtraXNote = n, fmt.Sprintf("%d account balances do not match their postings: %v", n, rep.Mismatches)
	}
	if len(cfg.Brokers) > 0 {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.ClientOpts...)...)
		if err != nil {
			return invariants.Report{}, err
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		ends, err := adm.ListEndOffsets(ctx, cfg.Topic)
		if err != nil {
			return invariants.Report{}, fmt.Errorf("cluster: listing end offsets: %w", err)
		}
		log, committed, err := readCommitted(ctx, cl, cfg.Group, cfg.Topic)
		for try := 1; errors.Is(err, ErrLogChanged) && try < 3; try++ {
			log, committed, err = readCommitted(ctx, cl, cfg.Group, cfg.Topic)
		}
		if err != nil {
			return invariants.Report{}, err
		}
		in.CommittedLog = log
		in.Ends, in.Committed = map[int32]int64{}, map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err != nil || o.Offset == 0 {
				return
			}
			in.Ends[o.Partition] = o.Offset
			in.Committed[o.Partition] = 0
			if c, ok := committed[o.Partition]; ok {
				in.Committed[o.Partition] = c
			}
		})
	}
	fences, err := s.Fences(ctx)
	if err != nil {
		return invariants.Report{}, fmt.Errorf("cluster: reading fences: %w", err)
	}
	in.Checkpoints, in.CheckpointLogs = map[int32]int64{}, map[int32]string{}
	for _, f := range fences {
		if f.Scope.Group == cfg.Group && f.Scope.Topic == cfg.Topic {
			in.Checkpoints[f.Scope.Partition] = f.NextOffset
			in.CheckpointLogs[f.Scope.Partition] = f.TopicID
		}
	}
	for p := range in.Ends {
		if _, ok := in.Checkpoints[p]; !ok {
			in.Checkpoints[p] = 0
		}
	}
	for _, a := range cfg.Aborted {
		in.Aborted = append(in.Aborted, invariants.Position{Partition: a.Partition, Offset: a.Offset})
	}
	in.Samples = cfg.Samples
	in.NotConverged = cfg.NotConverged
	return invariants.Check(in), nil
}

// addDeadLetters reads the sink's dead letters into in (for D), by
// position, and adds the unconfirmed poison records whose dead letter
// proves they landed. A sink without dead letters has none to check,
// unless poison records were written.
func (s *Store) addDeadLetters(ctx context.Context, cfg CheckConfig, in *invariants.Input) error {
	dls, err := s.DeadLetters(ctx, cfg.Group, cfg.Topic)
	if errors.Is(err, ErrNoDeadLetters) && len(cfg.Poison) == 0 && len(cfg.Unconfirmed) == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: reading dead letters: %w", err)
	}
	unconfirmed := map[string]bool{}
	for _, p := range cfg.Unconfirmed {
		unconfirmed[p.ID] = true
	}
	in.DeadLetters = []invariants.DeadLetter{}
	for _, d := range dls {
		part, off := d.Scope.Partition, d.Record.Offset
		in.DeadLetters = append(in.DeadLetters, invariants.DeadLetter{ID: PositionID(part, off), Log: d.Record.TopicID, Partition: part, Offset: off})
		for _, h := range d.Record.Headers {
			if h.Key == PoisonHeader && unconfirmed[string(h.Value)] {
				delete(unconfirmed, string(h.Value))
				in.Acked = append(in.Acked, invariants.Acked{ID: PositionID(part, off), Partition: part, Offset: off, Poison: true})
			}
		}
	}
	return nil
}
