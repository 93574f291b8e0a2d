package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/examples/ledger"
)

// PoisonKind is a kind of record that a ledger worker cannot apply, as a
// foreign producer (not the router) writes them.
type PoisonKind string

// The poison kinds PoisonProducer writes.
const (
	// PoisonNotEnvelope is not a workrouter command: a key and bytes, no
	// type header (what a plain client such as kcat writes by default).
	PoisonNotEnvelope PoisonKind = "not-envelope"
	// PoisonNullKey is a valid ledger deposit with a null key.
	PoisonNullKey PoisonKind = "null-key"
	// PoisonDuplicateType is a ledger command with two type headers.
	PoisonDuplicateType PoisonKind = "duplicate-type"
	// PoisonUnknownType is a well-formed command of a type the ledger
	// has no handler for.
	PoisonUnknownType PoisonKind = "unknown-type"
	// PoisonMalformed is a deposit whose payload the ledger's handler
	// refuses (not JSON, no id, or an amount that is not positive).
	PoisonMalformed PoisonKind = "malformed"
)

// PoisonKinds returns every poison kind.
func PoisonKinds() []PoisonKind {
	return []PoisonKind{PoisonNotEnvelope, PoisonNullKey, PoisonDuplicateType, PoisonUnknownType, PoisonMalformed}
}

// PoisonHeader is a header every poison record carries, with the record's
// harness ID (PoisonRecord.ID), so that a dead letter can be traced back
// to the record the harness wrote even when its acknowledgement was lost.
const PoisonHeader = "chaos-poison"

// PoisonRecord is a poison record the harness wrote: its harness ID, its
// kind, and where it landed (Offset -1 if the broker never acknowledged
// it). In PoisonProducer.Aborted it is any record of an aborted
// transaction: a good command (Kind empty, ID the command's) or a poison
// record.
type PoisonRecord struct {
	ID        string
	Kind      PoisonKind
	Partition int32
	Offset    int64
	// Transactional reports that it was written in a transaction (and,
	// in PoisonProducer.Acked, that the transaction committed).
	Transactional bool
}

// Position is the record's position as the checker names records that
// carry no command ID: "partition/offset".
func (p PoisonRecord) Position() string { return PositionID(p.Partition, p.Offset) }

// PositionID is "partition/offset", the checker's ID of a record without a
// command ID (internal/invariants).
func PositionID(partition int32, offset int64) string {
	return strconv.Itoa(int(partition)) + "/" + strconv.FormatInt(offset, 10)
}

// PoisonProducer writes poison records to chosen partitions with a plain
// kgo client (explicit partitions, no router), and, with a transactional
// kgo client, transactions that mix poison records and good commands, some
// of them aborted (Transactions). It remembers what the broker
// acknowledged. Send and the read methods may be called from any
// goroutine, Transactions from one goroutine at a time; Close once, at the
// end.
type PoisonProducer struct {
	cl         *kgo.Client
	tx         *kgo.Client // transactional
	topic      string
	partitions int32

	txMu sync.Mutex // one transaction at a time

	mu          sync.Mutex
	rng         *rand.Rand
	n           int
	acked       []PoisonRecord
	unconfirmed []PoisonRecord
	aborted     []PoisonRecord
	commands    map[string]Acked
}

// txnTimeout is the transactional client's transaction timeout: a
// transaction it could not end (the broker restarted under it) is aborted
// by the broker after it, so that read_committed readers are not held
// back for long.
const txnTimeout = 10 * time.Second

// NewPoisonProducer returns a PoisonProducer writing to topic, of
// partitions partitions, on brokers, with payloads drawn from seed.
func NewPoisonProducer(brokers []string, topic string, partitions int32, seed uint64) (*PoisonProducer, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: poison producer: %w", err)
	}
	tx, err := kgo.NewClient(append(opts, kgo.TransactionalID(fmt.Sprintf("workrouter-chaos-poison-%d-%d", seed, time.Now().UnixNano())),
		kgo.TransactionTimeout(txnTimeout))...)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("cluster: transactional poison producer: %w", err)
	}
	return &PoisonProducer{cl: cl, tx: tx, topic: topic, partitions: partitions, rng: rand.New(rand.NewPCG(seed, seed^0xbad)),
		commands: map[string]Acked{}}, nil
}

// record builds the record of kind with harness ID id.
func (p *PoisonProducer) record(partition int32, kind PoisonKind, id string) *kgo.Record {
	p.mu.Lock()
	acct := "acct-" + strconv.Itoa(p.rng.IntN(1000))
	variant := p.rng.IntN(3)
	p.mu.Unlock()
	mark := kgo.RecordHeader{Key: PoisonHeader, Value: []byte(id)}
	typ := func(t string) kgo.RecordHeader { return kgo.RecordHeader{Key: envelope.TypeHeader, Value: []byte(t)} }
	good := ledger.Deposit(acct, id, 0, 100).Payload
	rec := &kgo.Record{Topic: p.topic, Partition: partition, Key: []byte(acct), Value: good}
	switch kind {
	case PoisonNotEnvelope:
		rec.Value = []byte("\x00\xff not a workrouter command " + id)
		rec.Headers = []kgo.RecordHeader{mark}
	case PoisonNullKey:
		rec.Key = nil
		rec.Headers = []kgo.RecordHeader{typ(ledger.TypeDeposit), mark}
	case PoisonDuplicateType:
		rec.Headers = []kgo.RecordHeader{typ(ledger.TypeDeposit), typ(ledger.TypeWithdraw), mark}
	case PoisonUnknownType:
		rec.Headers = []kgo.RecordHeader{typ("transfer"), mark}
	case PoisonMalformed:
		rec.Headers = []kgo.RecordHeader{typ(ledger.TypeDeposit), mark}
		rec.Value = [][]byte{
			[]byte("not json " + id),
			[]byte(`{"seq":0,"amount":100}`),
			[]byte(`{"id":"` + id + `","seq":0,"amount":0}`),
		}[variant]
	}
	return rec
}

// nextID returns a new harness ID with prefix.
func (p *PoisonProducer) nextID(prefix string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	return prefix + strconv.Itoa(p.n)
}

// Send writes one poison record of kind to partition and waits for the
// broker's answer. The record is remembered as acknowledged, or, if the
// broker did not acknowledge it, as unconfirmed (it may have landed).
func (p *PoisonProducer) Send(ctx context.Context, partition int32, kind PoisonKind) (PoisonRecord, error) {
	id := p.nextID("poison-")
	pr := PoisonRecord{ID: id, Kind: kind, Partition: partition, Offset: -1}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res := p.cl.ProduceSync(ctx, p.record(partition, kind, id))
	rec, err := res.First()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.unconfirmed = append(p.unconfirmed, pr)
		return pr, fmt.Errorf("cluster: poison record %s (%s) to partition %d: %w", id, kind, partition, err)
	}
	pr.Offset = rec.Offset
	p.acked = append(p.acked, pr)
	return pr, nil
}

// Acked returns the poison records the broker acknowledged (those of a
// transaction only if it committed), in order.
func (p *PoisonProducer) Acked() []PoisonRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PoisonRecord(nil), p.acked...)
}

// Unconfirmed returns the poison records sent without an
// acknowledgement, or in a transaction whose outcome is unknown.
func (p *PoisonProducer) Unconfirmed() []PoisonRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PoisonRecord(nil), p.unconfirmed...)
}

// Aborted returns the records of the transactions that were aborted, in
// order: they are in the log, but a read_committed reader never sees them,
// so none may be applied or dead-lettered.
func (p *PoisonProducer) Aborted() []PoisonRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PoisonRecord(nil), p.aborted...)
}

// Commands returns the good commands the producer wrote that must be
// applied — those of committed transactions, and the good command after
// them — by command ID.
func (p *PoisonProducer) Commands() map[string]Acked {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Acked, len(p.commands))
	for id, a := range p.commands {
		out[id] = a
	}
	return out
}

// Close closes the clients.
func (p *PoisonProducer) Close() {
	p.tx.Close()
	p.cl.Close()
}
