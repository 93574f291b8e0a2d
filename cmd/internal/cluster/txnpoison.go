package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/examples/ledger"
)

// txnRecord is one record of a transaction Transactions writes: a poison
// record (kind set) or a good command (acct set).
type txnRecord struct {
	rec  *kgo.Record
	id   string
	kind PoisonKind
	acct string
}

// command returns a good ledger deposit to partition, for an account of its
// own (sequence number 0) whose key the router's partitioner maps to
// partition, so that the record is not misrouted.
func (p *PoisonProducer) command(partition int32) (txnRecord, error) {
	id := p.nextID("txn-cmd-")
	acct := id
	for i := 0; envelope.Partition([]byte(acct), p.partitions) != partition; i++ {
		acct = id + "-" + strconv.Itoa(i)
	}
	cmd := ledger.Deposit(acct, id, 0, 100)
	cmd.ID = id
	rec, err := envelope.Encode(p.topic, partition, cmd)
	if err != nil {
		return txnRecord{}, fmt.Errorf("cluster: transactional command %s: %w", id, err)
	}
	return txnRecord{rec: rec, id: id, acct: acct}, nil
}

// poisonRecord returns a poison record (not an envelope) to partition.
func (p *PoisonProducer) poisonRecord(partition int32) txnRecord {
	id := p.nextID("poison-")
	return txnRecord{rec: p.record(partition, PoisonNotEnvelope, id), id: id, kind: PoisonNotEnvelope}
}

// Transactions writes four transactions to partition with the
// transactional client, and then one good command with the plain client:
//
//  1. a good command, committed;
//  2. a poison record (not an envelope) and a good command, committed: the
//     poison record comes right after the first transaction's commit
//     marker, an offset without a record, so a read_committed worker
//     dead-letters it above its checkpoint (docs/design.md#dead-letters);
//  3. a good command and a poison record, aborted: neither may be applied
//     or dead-lettered (Aborted);
//  4. a poison record, committed: right after the aborted records and
//     their abort marker;
//  5. a good command outside any transaction, so that the partition's log
//     does not end with a transaction marker.
//
// The router's producer may write to the partition between them (a gap is
// then not right before the poison record; cluster.ScanLog tells). Good
// commands of committed transactions are remembered for L (Commands),
// poison records for D (Acked), records of aborted transactions in Aborted,
// and the records of a transaction whose outcome is unknown (an error
// while ending it) as Unconfirmed poison records; their commands are not
// required. It returns what landed, for the timeline, and the first error;
// the other transactions are written all the same.
func (p *PoisonProducer) Transactions(ctx context.Context, partition int32) (string, error) {
	p.txMu.Lock()
	defer p.txMu.Unlock()
	var steps [][]txnRecord
	for _, kinds := range [][]bool{{false}, {true, false}, {false, true}, {true}} {
		var recs []txnRecord
		for _, poison := range kinds {
			if poison {
				recs = append(recs, p.poisonRecord(partition))
				continue
			}
			c, err := p.command(partition)
			if err != nil {
				return "", err
			}
			recs = append(recs, c)
		}
		steps = append(steps, recs)
	}
	var notes []string
	var errs []error
	for i, recs := range steps {
		note, err := p.txn(ctx, recs, i != 2)
		notes = append(notes, note)
		if err != nil {
			errs = append(errs, err)
		}
	}
	after, err := p.command(partition)
	if err != nil {
		return strings.Join(notes, " "), errors.Join(append(errs, err)...)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if rec, err := p.cl.ProduceSync(pctx, after.rec).First(); err != nil {
		errs = append(errs, fmt.Errorf("cluster: good command %s after the transactions: %w", after.id, err))
	} else {
		p.mu.Lock()
		p.commands[after.id] = Acked{Account: after.acct, Partition: rec.Partition, Offset: rec.Offset}
		p.mu.Unlock()
		notes = append(notes, "then "+after.id+"@"+strconv.FormatInt(rec.Offset, 10))
	}
	return strings.Join(notes, " "), errors.Join(errs...)
}

// txn writes recs in one transaction, commits it (or aborts it if
// !commit, or if a record failed), and records the outcome. It returns
// "commit [id@offset …]", "abort […]" or "unknown […]".
func (p *PoisonProducer) txn(ctx context.Context, recs []txnRecord, commit bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.tx.BeginTransaction(); err != nil {
		return "not begun", fmt.Errorf("cluster: beginning a transaction: %w", err)
	}
	krecs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krecs[i] = r.rec
	}
	results := p.tx.ProduceSync(ctx, krecs...)
	produceErr := results.FirstErr()
	how := kgo.TryCommit
	if !commit || produceErr != nil {
		how = kgo.TryAbort
	}
	endErr := p.tx.EndTransaction(ctx, how)
	outcome := "commit"
	switch {
	case endErr == nil && how == kgo.TryAbort:
		outcome = "abort"
	case endErr != nil:
		// The outcome is unknown; kgo's advice is to end it with an
		// abort, which fences anything still open at the broker.
		outcome = "unknown"
		if how == kgo.TryCommit {
			if err := p.tx.EndTransaction(ctx, kgo.TryAbort); err != nil {
				endErr = errors.Join(endErr, fmt.Errorf("aborting it then: %w", err))
			}
		}
	}
	var landed []string
	p.mu.Lock()
	for i, r := range recs {
		res := results[i]
		at := int64(-1)
		if res.Err == nil {
			at = res.Record.Offset
			landed = append(landed, r.id+"@"+strconv.FormatInt(at, 10))
		} else {
			landed = append(landed, r.id+"@?")
		}
		pr := PoisonRecord{ID: r.id, Kind: r.kind, Partition: r.rec.Partition, Offset: at, Transactional: true}
		switch {
		case outcome == "commit" && r.kind != "":
			p.acked = append(p.acked, pr)
		case outcome == "commit":
			p.commands[r.id] = Acked{Account: r.acct, Partition: pr.Partition, Offset: at}
		case outcome == "abort" && res.Err == nil:
			p.aborted = append(p.aborted, pr)
		case r.kind != "":
			// Unknown outcome, or not acknowledged in an aborted
			// transaction: a dead letter with its header would say it
			// landed.
			pr.Offset = -1
			p.unconfirmed = append(p.unconfirmed, pr)
		}
	}
	p.mu.Unlock()
	note := outcome + " [" + strings.Join(landed, " ") + "]"
	if produceErr != nil || endErr != nil {
		return note, fmt.Errorf("cluster: transaction %s: %w", note, errors.Join(produceErr, endErr))
	}
	return note, nil
}
