package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/router"
)

// Acked is a command the broker acknowledged: its account, the account's
// sequence number for it, and where it landed.
type Acked struct {
	Account   string
	Seq       int
	Partition int32
	Offset    int64
}

// Producer produces seeded ledger commands (deposits and withdrawals over
// a fixed set of accounts, each account's commands numbered 0, 1, 2, …),
// each with its ledger ID as its command ID (router.Command.ID), and
// remembers which the broker acknowledged. Send and Use must be called from
// one goroutine at a time; the other methods (Resend too, beside Send) from
// any goroutine.
type Producer struct {
	rt       *router.Router
	rng      *rand.Rand
	accounts int
	seqs     map[string]int
	n        int

	mu    sync.Mutex
	acked map[string]Acked
	// recent are the last recentCap acknowledged commands, oldest first,
	// for Resend; resendRng picks among them.
	recent    []router.Command
	resendRng *rand.Rand
	resent    int
}

// recentCap is how many of the latest acknowledged commands Resend picks
// from: a few seconds of a harness's load, far inside any sink's dedupe
// window (100,000 offsets per partition by default).
const recentCap = 1000

// NewProducer returns a Producer sending through rt over accounts accounts,
// with commands drawn from seed.
func NewProducer(rt *router.Router, seed uint64, accounts int) *Producer {
	return &Producer{rt: rt, rng: rand.New(rand.NewPCG(seed, seed+7)), accounts: accounts,
		seqs: map[string]int{}, acked: map[string]Acked{}, resendRng: rand.New(rand.NewPCG(seed, seed^0x2e5e))}
}

// Send produces count commands and waits until the broker answered all of
// them. It returns the first send error; the commands acknowledged before
// and after it are recorded all the same.
func (p *Producer) Send(ctx context.Context, count int) error {
	var first error
	for i := 0; i < count; i++ {
		acct := "acct-" + strconv.Itoa(p.rng.IntN(p.accounts))
		seq := p.seqs[acct]
		p.seqs[acct]++
		p.n++
		id := "cmd-" + strconv.Itoa(p.n)
		amount := int64(1 + p.rng.IntN(10000))
		cmd := ledger.Deposit(acct, id, seq, amount)
		if p.rng.IntN(3) == 0 {
			cmd = ledger.Withdraw(acct, id, seq, amount)
		}
		cmd.ID = id // the posting's ID is the command ID (envelope.IDHeader)
		p.rt.SendAsync(ctx, cmd, func(res router.Result, err error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			p.acked[id] = Acked{Account: acct, Seq: seq, Partition: res.Partition, Offset: res.Offset}
			if len(p.recent) == recentCap {
				p.recent = append(p.recent[:0], p.recent[1:]...)
			}
			p.recent = append(p.recent, cmd)
		})
	}
	if err := p.rt.Flush(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return first
}

// Resend sends n commands again that the broker acknowledged already, with
// their command IDs, picked at random (seeded) among the latest
// acknowledged ones: what an application does that retries Send after an
// ambiguous error (a timeout, a cancelled ctx, a broken connection) while
// its first attempt had landed, reusing Result.ID as the command's ID.
// Each copy enters the log as a record of its own, which the workers must
// skip as a duplicate. It waits for the broker's answers and returns how
// many copies were acknowledged (counted in Resent) and the IDs sent, and
// the first send error. It may run beside Send, from another goroutine.
func (p *Producer) Resend(ctx context.Context, n int) (int, []string, error) {
	p.mu.Lock()
	var cmds []router.Command
	for i := 0; i < n && len(p.recent) > 0; i++ {
		cmds = append(cmds, p.recent[p.resendRng.IntN(len(p.recent))])
	}
	rt := p.rt
	p.mu.Unlock()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked int
		first error
		ids   []string
	)
	for _, cmd := range cmds {
		ids = append(ids, cmd.ID)
		wg.Add(1)
		rt.SendAsync(ctx, cmd, func(res router.Result, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			acked++
		})
	}
	wg.Wait()
	p.mu.Lock()
	p.resent += acked
	p.mu.Unlock()
	return acked, ids, first
}

// Resent is how many copies of acknowledged commands Resend had
// acknowledged.
func (p *Producer) Resent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resent
}

// Use makes p send through rt from now on (a new router after the topic
// was recreated: a router keeps refusing a topic whose ID changed). It must
// not be called while Send or Resend runs.
func (p *Producer) Use(rt *router.Router) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rt = rt
}

// Sent is how many commands Send produced (acknowledged or not).
func (p *Producer) Sent() int { return p.n }

// Acked returns a copy of the acknowledged commands by command ID.
func (p *Producer) Acked() map[string]Acked {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Acked, len(p.acked))
	for id, a := range p.acked {
		out[id] = a
	}
	return out
}

// AckedCount is how many commands the broker acknowledged.
func (p *Producer) AckedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// LagZero reports whether group has committed every partition of topic up
// to its end offset. Any error reads as "not zero". opts are more client
// options (TLS, SASL).
func LagZero(ctx context.Context, brokers []string, topic, group string, opts ...kgo.Opt) bool {
	adm, err := kadm.NewOptClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return false
	}
	defer adm.Close()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return false
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false
	}
	ok := true
	ends.Each(func(o kadm.ListedOffset) {
		c, found := committed.Lookup(topic, o.Partition)
		if o.Offset > 0 && (!found || c.At != o.Offset) {
			ok = false
		}
	})
	return ok
}

// BrokerAddrs returns every address a client of the cluster at seeds
// dials: the seeds, then each broker the metadata names (host:port, as
// advertised) that is not a seed. opts are more client options (TLS,
// SASL).
func BrokerAddrs(ctx context.Context, seeds []string, opts ...kgo.Opt) ([]string, error) {
	adm, err := kadm.NewOptClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	bs, err := adm.ListBrokers(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the brokers: %w", err)
	}
	addrs := slices.Clone(seeds)
	for _, b := range bs {
		if a := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))); !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}
