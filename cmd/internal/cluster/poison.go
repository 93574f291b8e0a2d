package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/router"
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
// it).
type PoisonRecord struct {
	ID        string
	Kind      PoisonKind
	Partition int32
	Offset    int64
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
// kgo client (explicit partitions, no router), and remembers which the
// broker acknowledged. Its methods may be called from any goroutine; Close
// once, at the end.
type PoisonProducer struct {
	cl    *kgo.Client
	topic string

	mu          sync.Mutex
	rng         *rand.Rand
	n           int
	acked       []PoisonRecord
	unconfirmed []PoisonRecord
}

// NewPoisonProducer returns a PoisonProducer writing to topic on brokers,
// with payloads drawn from seed.
func NewPoisonProducer(brokers []string, topic string, seed uint64) (*PoisonProducer, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, fmt.Errorf("cluster: poison producer: %w", err)
	}
	return &PoisonProducer{cl: cl, topic: topic, rng: rand.New(rand.NewPCG(seed, seed^0xbad))}, nil
}

// record builds the record of kind with harness ID id.
func (p *PoisonProducer) record(partition int32, kind PoisonKind, id string) *kgo.Record {
	p.mu.Lock()
	acct := "acct-" + strconv.Itoa(p.rng.IntN(1000))
	variant := p.rng.IntN(3)
	p.mu.Unlock()
	mark := kgo.RecordHeader{Key: PoisonHeader, Value: []byte(id)}
	typ := func(t string) kgo.RecordHeader { return kgo.RecordHeader{Key: router.TypeHeader, Value: []byte(t)} }
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

// Send writes one poison record of kind to partition and waits for the
// broker's answer. The record is remembered as acknowledged, or, if the
// broker did not acknowledge it, as unconfirmed (it may have landed).
func (p *PoisonProducer) Send(ctx context.Context, partition int32, kind PoisonKind) (PoisonRecord, error) {
	p.mu.Lock()
	p.n++
	id := "poison-" + strconv.Itoa(p.n)
	p.mu.Unlock()
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

// Acked returns the poison records the broker acknowledged, in order.
func (p *PoisonProducer) Acked() []PoisonRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PoisonRecord(nil), p.acked...)
}

// Unconfirmed returns the poison records sent without an
// acknowledgement.
func (p *PoisonProducer) Unconfirmed() []PoisonRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PoisonRecord(nil), p.unconfirmed...)
}

// Close closes the client.
func (p *PoisonProducer) Close() { p.cl.Close() }
