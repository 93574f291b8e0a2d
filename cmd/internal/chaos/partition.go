package chaos

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/cmd/internal/faults"
	"github.com/workrouter/workrouter/cmd/internal/netfault"
	"github.com/workrouter/workrouter/consumer"
)

// The network fault kinds (package netfault): each worker of the run (w1…wN,
// not the churn members) reaches every broker address and its sink through
// a proxy of its own. On the Kafka sink (Config.Kafka) the sink is the
// brokers: the sink's clients (its transactional producers, its admin
// client, the ledger's events reader) reach every broker address through
// links of their own, the worker's sink links, apart from its consumer's
// broker links, so that the kinds below mean on the Kafka sink what they
// mean on a database.
const (
	// PartitionBroker cuts one worker's links to every broker (both ways,
	// black-holed) past its session timeout while its sink link works and
	// it holds a batch in hand, then heals them. On the Kafka sink the
	// brokers are its sink too: every link of the worker is cut, the
	// producer's with the consumer's, and the held transaction's offset
	// commit must be refused by the group coordinator once the links
	// heal (a stale write refused).
	PartitionBroker Kind = "partition-broker"
	// PartitionSink cuts one worker's link to its sink (PostgreSQL or
	// Redis) for 1.5× the session timeout, then heals it. On the Kafka
	// sink it cuts the sink's links (its producers' connections) while
	// the consumer's stay up: the worker keeps its partitions, its
	// transactions fail and are tried again after the heal.
	PartitionSink Kind = "partition-sink"
	// OneWay drops the replies on one worker's sink link (requests still
	// reach the sink) for 1.5× the session timeout, then heals: a write
	// lands and its writer never hears so. On the Kafka sink, the
	// replies on the sink's links: a produce, an offset commit or an
	// EndTxn reaches the broker and its outcome never comes back, so the
	// worker retries a transaction that may have committed; X (no
	// command applied twice) shows that it did not apply twice.
	OneWay Kind = "one-way"
	// SlowLink delays one worker's broker links by more than its
	// heartbeat interval (300 ms ± 100 ms each way) for 1.5× the session
	// timeout, then heals. On the Kafka sink, its sink links too.
	SlowLink Kind = "slow-link"
)

// NetKinds returns the network fault kinds. They run only when asked for
// by name (Config.Kinds): the default, every kind that applies, does not
// include them.
func NetKinds() []Kind { return []Kind{PartitionBroker, PartitionSink, OneWay, SlowLink} }

// usesNet reports whether kinds need the network fault layer.
func usesNet(kinds []Kind) bool {
	return slices.ContainsFunc(kinds, func(k Kind) bool { return slices.Contains(NetKinds(), k) })
}

// links are one worker's proxied links: one per broker address, and one
// to the sink (nil for SQLite and Kafka), or, on the Kafka sink, one per
// broker address for the sink's clients (sinkBrokers).
type links struct {
	brokers     netfault.Links
	sink        *netfault.Link
	sinkBrokers netfault.Links
}

// sinkLinks are the links that carry the worker's sink connections:
// its sink link, or its Kafka sink's links to every broker; none on
// SQLite.
func (ls *links) sinkLinks() netfault.Links {
	if ls.sink != nil {
		return netfault.Links{ls.sink}
	}
	return ls.sinkBrokers
}

// brokerLinks are the links that carry the worker's connections to the
// brokers: its consumer's, and on the Kafka sink its sink's too.
func (ls *links) brokerLinks() netfault.Links {
	return append(slices.Clone(ls.brokers), ls.sinkBrokers...)
}

// setupNet starts the network fault layer: a link per broker address the
// metadata names (and every seed) and one to the sink, for each of the
// run's workers.
func (r *run) setupNet(dir string) error {
	r.net = netfault.New()
	r.links = map[string]*links{}
	r.gateDir = dir
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	addrs, err := cluster.BrokerAddrs(ctx, r.brokers)
	cancel()
	if err != nil {
		return fmt.Errorf("chaos: the brokers to proxy: %w", err)
	}
	sinkAddr := ""
	if r.store.Postgres() || r.store.Redis() {
		u, err := url.Parse(r.store.Spec())
		if err != nil || u.Host == "" {
			return fmt.Errorf("%w: the network faults need the sink as a URL with a host (postgres://host:port/… or redis://host:port/…)", ErrConfig)
		}
		sinkAddr = u.Host
	} else if !r.cfg.Kafka && (slices.Contains(r.cfg.Kinds, PartitionSink) || slices.Contains(r.cfg.Kinds, OneWay)) {
		return fmt.Errorf("%w: partition-sink and one-way need a sink reached over the network: --sink postgres://…, redis://… or kafka", ErrConfig)
	}
	for i := 1; i <= r.cfg.Workers; i++ {
		name := "w" + strconv.Itoa(i)
		bls, err := r.net.Links(name+"-broker-", addrs)
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		ls := &links{brokers: bls}
		if r.cfg.Kafka {
			if ls.sinkBrokers, err = r.net.Links(name+"-sink-", addrs); err != nil {
				return fmt.Errorf("chaos: %w", err)
			}
		}
		if sinkAddr != "" {
			l, err := r.net.Link(name+"-sink", sinkAddr)
			if err != nil {
				return fmt.Errorf("chaos: %w", err)
			}
			ls.sink = l
		}
		r.links[name] = ls
	}
	sinkWhat := cmpOr(sinkAddr, "(SQLite: no link)")
	if r.cfg.Kafka {
		sinkWhat = "(Kafka: its clients reach the same brokers through links of their own)"
	}
	r.logf("network fault layer: each of %d workers reaches the brokers %v and the sink %s through proxies of its own", r.cfg.Workers, addrs, sinkWhat)
	return nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// netArgs returns the worker's flags that route it through its links, and
// its --sink value rewritten to its sink link; spec unchanged and no flag
// for a worker without links.
func (r *run) netArgs(name, spec string) (string, []string) {
	ls := r.links[name]
	if ls == nil {
		return spec, nil
	}
	if ls.sink != nil {
		if u, err := url.Parse(spec); err == nil {
			u.Host = ls.sink.Addr()
			spec = u.String()
		}
	}
	args := []string{"--dial-map", ls.brokers.DialMap(), "--chaos-hold-gate", r.holdGate(name)}
	if len(ls.sinkBrokers) > 0 {
		args = append(args, "--sink-dial-map", ls.sinkBrokers.DialMap())
	}
	return spec, args
}

// holdGate is the file that releases the batch worker name holds.
func (r *run) holdGate(name string) string { return filepath.Join(r.gateDir, "hold-"+name) }

// pickLinked returns a random current member with links (kind's) that
// holds at least one partition, or nil.
func (r *run) pickLinked(needSink bool) *cluster.Worker {
	var cands []*cluster.Worker
	for _, w := range r.members() {
		ls := r.links[w.Name()]
		if ls != nil && (!needSink || len(ls.sinkLinks()) > 0) && len(w.Owned()) > 0 && !w.Exited() {
			cands = append(cands, w)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[r.rng.IntN(len(cands))]
}

// partitionBroker cuts a worker's broker links while it holds a batch,
// waits until another member claimed that batch's partition, releases
// the batch (its write must be refused by the sink: a stale write), keeps
// the cut for at least 1.5× the session, and heals. It happened when the
// partition was taken over while bytes were dropped on the cut links.
func (r *run) partitionBroker() (bool, error) {
	w := r.pickLinked(false)
	if w == nil {
		r.logf("partition-broker: no worker with links holds a partition; skipped")
		return false, nil
	}
	r.supersede(w.Name())
	ls := r.links[w.Name()].brokerLinks()
	gate := r.holdGate(w.Name())
	_ = os.Remove(gate)
	release := func() { _ = os.WriteFile(gate, nil, 0o644) }
	before := len(w.Holds())
	if err := w.Signal(syscall.SIGALRM); err != nil {
		release()
		return false, nil
	}
	if r.waitUntil(10*time.Second, w.Name()+" to hold a batch", func() bool { return len(w.Holds()) > before || w.Exited() }) != nil || w.Exited() {
		release()
		r.logf("partition-broker: %s took no batch in hand; skipped", w.Name())
		return false, nil
	}
	hb := w.Holds()[len(w.Holds())-1]
	start, held, d0 := time.Now(), w.Owned(), ls.Dropped()
	heal := ls.Heal
	if err := ls.Cut(); err != nil {
		release()
		return false, fmt.Errorf("chaos: partition-broker: %w", err)
	}
	r.watchTakeover(w.Name(), start, held)
	sinkState := "its sink link working"
	if r.cfg.Kafka {
		sinkState = "the Kafka sink's producer links among them"
	}
	r.logf("PARTITION-BROKER %s: its %d broker links cut both ways (black-holed), %s; it holds a batch of partition %d at epoch %d (offsets %d–%d) and %s",
		w.Name(), len(ls), sinkState, hb.Partition, hb.Epoch, hb.First, hb.Last, cluster.Describe(held))
	var takenBy *cluster.Worker
	var claim cluster.Claim
	err := r.waitUntil(6*r.cfg.SessionTimeout+10*time.Second, "partition "+strconv.Itoa(int(hb.Partition))+" to be taken over", func() bool {
		takenBy, claim = cluster.OwnerOf(r.members(), hb.Partition)
		return takenBy != nil && takenBy != w && claim.Epoch > hb.Epoch
	})
	fencedBefore := w.Count(consumer.KindFenced)
	release()
	refused := false
	wasRefused := func() bool { return w.Count(consumer.KindFenced) > fencedBefore }
	if err == nil {
		r.logf("  partition %d taken over by %s at epoch %d; %s's held batch released, its broker links still cut", hb.Partition, takenBy.Name(), claim.Epoch, w.Name())
		// On the Kafka sink the held transaction cannot reach the
		// coordinator before the heal: its refusal is awaited after it.
		if !r.cfg.Kafka {
			refused = r.waitUntil(10*time.Second, w.Name()+"'s held write refused", wasRefused) == nil
		}
	} else {
		r.logf("  partition %d not taken over (%v); released", hb.Partition, err)
	}
	if rest := r.stallFor() - time.Since(start); rest > 0 {
		if err := r.sleep(rest); err != nil {
			_ = heal()
			return false, err
		}
	}
	lost := ls.Dropped() - d0
	if err := heal(); err != nil {
		return false, fmt.Errorf("chaos: partition-broker: healing: %w", err)
	}
	cut := time.Since(start).Round(time.Millisecond)
	if err == nil && r.cfg.Kafka {
		refused = r.waitUntil(20*time.Second, w.Name()+"'s held transaction refused by the coordinator", wasRefused) == nil
	}
	r.logf("  HEAL %s's broker links after %s: %d bytes dropped; its write after the takeover refused by the sink: %v", w.Name(), cut, lost, refused)
	r.setDetail(fmt.Sprintf("broker links cut for %s while it held a batch of partition %d (epoch %d); taken over: %v; its later write refused: %v; %d bytes dropped",
		cut, hb.Partition, hb.Epoch, err == nil, refused, lost))
	return err == nil && lost > 0, r.ctx.Err()
}

// partitionSink cuts a worker's sink link for 1.5× the session and heals
// it. It happened when bytes were dropped on the cut link (the worker
// tried to reach its sink). L and X (nothing lost, nothing applied twice)
// are the run's own checks. On the Kafka sink a cut shorter than the
// client's request timeout fails no sink operation: the producer's
// request waits unanswered, and the client sends it again after the
// heal; the worker applying again after the heal shows it recovered.
func (r *run) partitionSink() (bool, error) {
	f, err := r.sinkLinkFault("partition-sink", netfault.Links.Cut,
		"PARTITION-SINK %s: its sink links cut both ways (black-holed) for %s, its consumer's broker links working; it holds %s")
	if f.w == nil || err != nil {
		return false, err
	}
	w := f.w
	again := r.appliedAgain(w)
	retried := w.Count(consumer.KindStalled) - f.stalled
	r.logf("  HEAL %s's sink link: %d bytes dropped while cut; %d sink operations failed and retried; applied a batch again after the heal: %v; %d batches applied while cut",
		w.Name(), f.lost, retried, again, f.appliedDuring)
	r.setDetail(fmt.Sprintf("sink link cut for %s; %d bytes dropped; %d sink operations retried; applied again after the heal: %v", r.stallFor(), f.lost, retried, again))
	return f.lost > 0, r.ctx.Err()
}

// appliedAgain waits up to 20 s for w to apply a batch, and reports
// whether it did (false if it lost its partitions or exited first).
func (r *run) appliedAgain(w *cluster.Worker) bool {
	applied := w.Count(consumer.KindApplied)
	return r.waitUntil(20*time.Second, w.Name()+" to apply a batch after the heal", func() bool {
		return w.Count(consumer.KindApplied) > applied || len(w.Owned()) == 0 || w.Exited()
	}) == nil && w.Count(consumer.KindApplied) > applied
}

// oneWay drops the replies on a worker's sink link for 1.5× the session
// and heals it. It happened when reply bytes were dropped and the worker
// then saw a sink operation fail and retried it (consumer.KindStalled):
// the write whose reply was lost is retried; L and X show that the retry
// neither lost the batch nor applied it twice.
//
// On the Kafka sink the unanswered request (a produce, the offset commit
// or EndTxn of the worker's transaction in flight) is sent again by the
// sink's client itself once its request timeout passes: the idempotent
// producer's sequence numbers and the transaction coordinator's state
// make the second copy land once, and no sink operation fails. There it
// happened when reply bytes were dropped and the worker applied a batch
// again after the heal (its transaction, whose outcome it had not heard,
// was settled); X shows that nothing was applied twice.
func (r *run) oneWay() (bool, error) {
	f, err := r.sinkLinkFault("one-way", oneWay,
		"ONE-WAY %s: replies on its sink links dropped for %s (its requests still reach the sink); it holds %s")
	if f.w == nil || err != nil {
		return false, err
	}
	w := f.w
	if r.cfg.Kafka {
		again := r.appliedAgain(w)
		retried := w.Count(consumer.KindStalled) - f.stalled
		r.logf("  HEAL %s's sink link: %d reply bytes dropped; %d sink operations failed and retried; applied a batch again after the heal: %v; %d batches applied while the replies were dropped",
			w.Name(), f.lost, retried, again, f.appliedDuring)
		r.setDetail(fmt.Sprintf("sink replies dropped for %s; %d bytes dropped; %d sink operations retried; applied again after the heal: %v", r.stallFor(), f.lost, retried, again))
		return f.lost > 0 && again, r.ctx.Err()
	}
	_ = r.waitUntil(20*time.Second, w.Name()+" to retry a sink operation", func() bool {
		return w.Count(consumer.KindStalled) > f.stalled || w.Exited()
	})
	retried := w.Count(consumer.KindStalled) - f.stalled
	r.logf("  HEAL %s's sink link: %d reply bytes dropped; %d sink operations failed and retried", w.Name(), f.lost, retried)
	r.setDetail(fmt.Sprintf("sink replies dropped for %s; %d bytes dropped; %d sink operations retried", r.stallFor(), f.lost, retried))
	return f.lost > 0 && retried > 0, r.ctx.Err()
}

// oneWay drops the replies on every link of ls.
func oneWay(ls netfault.Links) error {
	for _, l := range ls {
		if err := l.OneWay(); err != nil {
			return err
		}
	}
	return nil
}

// sinkFault is what sinkLinkFault did: the worker (nil when none
// qualified), the bytes its sink links dropped, its stall count before
// the fault, and the batches it applied while the fault lasted.
type sinkFault struct {
	w             *cluster.Worker
	lost          int64
	stalled       int
	appliedDuring int
}

// sinkLinkFault picks a worker with a sink link that holds a partition,
// applies fault to its sink links for 1.5× the session (logging banner,
// which takes the worker, the duration and what it holds) and heals
// them.
func (r *run) sinkLinkFault(kind string, fault func(netfault.Links) error, banner string) (sinkFault, error) {
	w := r.pickLinked(true)
	if w == nil {
		r.logf("%s: no worker with a sink link holds a partition; skipped", kind)
		return sinkFault{}, nil
	}
	r.supersede(w.Name())
	l := r.links[w.Name()].sinkLinks()
	d0, stalled, applied := l.Dropped(), w.Count(consumer.KindStalled), w.Count(consumer.KindApplied)
	if err := fault(l); err != nil {
		_ = l.Heal()
		return sinkFault{}, fmt.Errorf("chaos: %s: %w", kind, err)
	}
	r.logf(banner, w.Name(), r.stallFor(), cluster.Describe(w.Owned()))
	err := r.sleep(r.stallFor())
	lost, during := l.Dropped()-d0, w.Count(consumer.KindApplied)-applied
	if herr := l.Heal(); herr != nil {
		return sinkFault{}, fmt.Errorf("chaos: %s: healing: %w", kind, herr)
	}
	if err != nil {
		return sinkFault{}, err
	}
	return sinkFault{w: w, lost: lost, stalled: stalled, appliedDuring: during}, nil
}

// slowLink delays a worker's broker links by 300 ms ± 100 ms each way
// (above the workers' 200 ms heartbeat interval) for 1.5× the session,
// and heals them. It happened when bytes were delayed.
func (r *run) slowLink() (bool, error) {
	w := r.pickLinked(false)
	if w == nil {
		r.logf("slow-link: no worker with links holds a partition; skipped")
		return false, nil
	}
	r.supersede(w.Name())
	ls := r.links[w.Name()].brokerLinks()
	d0 := ls.Delayed()
	if err := ls.Latency(300*time.Millisecond, 100*time.Millisecond); err != nil {
		return false, fmt.Errorf("chaos: slow-link: %w", err)
	}
	r.logf("SLOW-LINK %s: its %d broker links delayed 300ms ± 100ms each way for %s; it holds %s", w.Name(), len(ls), r.stallFor(), cluster.Describe(w.Owned()))
	err := r.sleep(r.stallFor())
	delayed := ls.Delayed() - d0
	if herr := ls.Heal(); herr != nil {
		return false, fmt.Errorf("chaos: slow-link: healing: %w", herr)
	}
	r.logf("  HEAL %s's broker links: %d bytes delayed", w.Name(), delayed)
	r.setDetail(fmt.Sprintf("broker links delayed 300ms ± 100ms for %s; %d bytes delayed", r.stallFor(), delayed))
	return delayed > 0, err
}

// unmappedDials counts the broker addresses the workers dialled outside
// their links (faults.KindDialUnmapped): each a connection no network
// fault reached.
func unmappedDials(ws []*cluster.Worker) int {
	n := 0
	for _, w := range ws {
		n += w.Count(faults.KindDialUnmapped)
	}
	return n
}
