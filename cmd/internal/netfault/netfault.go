// Package netfault is the fault harness's network fault layer: a TCP proxy
// per link (a worker and a broker address, a worker and its sink), run in
// process with Shopify's toxiproxy as a library (its toxics and the
// chains that carry each connection's bytes through them; the listener
// and the connections are this package's, see Link.accept), whose traffic can be cut
// both ways, cut one way, slowed, or reset. A worker reaches its broker
// and its sink only through its links' addresses (the harness gives it a
// dial mapping and a sink address of the proxies), so that a cut is a cut
// for every connection it opens.
//
// A cut black-holes the link: connections stay open, and every byte sent
// either way is read by the proxy and dropped, as a network partition
// drops packets; a new connection is accepted by the proxy and then hears
// nothing. (Disabling a toxiproxy proxy instead closes its listener and
// every connection: the client sees a reset at once, which is what the
// chaos harness's broker-conn fault already does.) Heal removes every
// toxic; the connections a cut or a one-way cut black-holed are closed
// then (their byte streams lost data: they cannot carry on), so the
// client reconnects through the healed link.
//
// It is internal: the chaos harness and the demo (--fault partition) are
// its users.
package netfault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
)

// ErrClosed is matched by the error a Link's method returns after Close.
var ErrClosed = errors.New("netfault: link closed")

// The toxics of this package, registered with toxiproxy: dropping and
// delaying toxics that count what they dropped or delayed, so that a fault
// can show it happened.
const (
	dropType  = "netfault_drop"
	delayType = "netfault_delay"
	resetType = "netfault_reset"
)

// counters are the byte counters of every link, by link ID: toxiproxy
// makes a toxic from its JSON attributes, which can carry an ID but not a
// pointer.
var counters sync.Map // string → *linkCounters

type linkCounters struct {
	dropped atomic.Int64
	delayed atomic.Int64
}

func countersOf(id string) *linkCounters {
	c, _ := counters.LoadOrStore(id, new(linkCounters))
	return c.(*linkCounters)
}

// dropToxic reads every chunk and drops it, counting its bytes; when it is
// removed (Cleanup) or its input ends, it closes its stub, which closes
// the link's connection.
type dropToxic struct {
	Link string `json:"link"`
}

func (t *dropToxic) Pipe(stub *toxics.ToxicStub) {
	c := countersOf(t.Link)
	for {
		select {
		case <-stub.Interrupt:
			return
		case chunk := <-stub.Input:
			if chunk == nil {
				stub.Close()
				return
			}
			c.dropped.Add(int64(len(chunk.Data)))
		}
	}
}

// Cleanup closes the stub, then drops what still reaches it until the
// connection ends: toxiproxy (v2.5.0, link.go's RemoveToxic) does not
// rewire the stub before a toxic whose Cleanup closed its stub, so that
// stub goes on passing the client's bytes to this one's input, and with
// nobody reading them its goroutine would wait forever. The drain ends
// when the stub before closes that input, once the link's source ends:
// closing this stub closes the connection.
func (t *dropToxic) Cleanup(stub *toxics.ToxicStub) {
	stub.Close()
	go dropUntilEnd(stub, countersOf(t.Link))
}

// dropUntilEnd drops and counts every chunk that reaches a closed stub
// until its input ends (the stub before closes it once the link's source
// ends).
func dropUntilEnd(stub *toxics.ToxicStub, c *linkCounters) {
	for chunk := range stub.Input {
		if chunk == nil {
			return
		}
		c.dropped.Add(int64(len(chunk.Data)))
	}
}

// resetToxic closes its stub, which closes the link's connection, on the
// first chunk, then drops every chunk that still comes until its input
// ends: toxiproxy does not rewire the stub before a closed one, which
// goes on passing the client's bytes here until the link's source ends.
type resetToxic struct {
	Link string `json:"link"`
}

func (t *resetToxic) Pipe(stub *toxics.ToxicStub) {
	c := countersOf(t.Link)
	select {
	case <-stub.Interrupt:
		return
	case chunk := <-stub.Input:
		stub.Close()
		if chunk == nil {
			return
		}
		c.dropped.Add(int64(len(chunk.Data)))
	}
	dropUntilEnd(stub, c)
}

// delayToxic passes every chunk on after Latency ± Jitter milliseconds,
// counting the bytes it delayed.
type delayToxic struct {
	Link    string `json:"link"`
	Latency int64  `json:"latency"`
	Jitter  int64  `json:"jitter"`
}

func (t *delayToxic) GetBufferSize() int { return 1024 }

func (t *delayToxic) Pipe(stub *toxics.ToxicStub) {
	c := countersOf(t.Link)
	for {
		select {
		case <-stub.Interrupt:
			return
		case chunk := <-stub.Input:
			if chunk == nil {
				stub.Close()
				return
			}
			d := t.Latency
			if t.Jitter > 0 {
				d += rand.Int64N(2*t.Jitter) - t.Jitter
			}
			wait := time.Duration(d)*time.Millisecond - time.Since(chunk.Timestamp)
			if wait > 0 {
				tm := time.NewTimer(wait)
				select {
				case <-tm.C:
				case <-stub.Interrupt:
					tm.Stop()
					// Interrupted: pass the chunk on at once, so no
					// data is lost when the toxic is removed.
					if err := stub.WriteOutput(chunk, 5*time.Second); err == nil {
						c.delayed.Add(int64(len(chunk.Data)))
					}
					return
				}
			}
			c.delayed.Add(int64(len(chunk.Data)))
			stub.Output <- chunk
		}
	}
}

func init() {
	toxics.Register(dropType, new(dropToxic))
	toxics.Register(delayType, new(delayToxic))
	toxics.Register(resetType, new(resetToxic))
}

// Net is a set of links sharing one toxiproxy server (no API listener:
// the links are driven from Go). Its methods may be called from any
// goroutine.
type Net struct {
	srv *toxiproxy.ApiServer

	mu     sync.Mutex
	links  []*Link
	seq    int
	closed bool
}

// New returns an empty Net. The caller must Close it.
func New() *Net {
	return &Net{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// Link starts a proxy named name on a free port of 127.0.0.1 that
// forwards every connection to upstream (host:port).
func (n *Net) Link(name, upstream string) (*Link, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	n.seq++
	id := "l" + strconv.Itoa(n.seq)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netfault: proxy %s to %s: %w", name, upstream, err)
	}
	l := &Link{name: name, upstream: upstream, id: id, c: countersOf(id),
		p: toxiproxy.NewProxy(n.srv, name, ln.Addr().String(), upstream), srv: n.srv,
		ln: ln, conns: map[*destination]struct{}{}}
	l.accepting.Go(l.accept)
	n.links = append(n.links, l)
	return l, nil
}

// Refused is how many client connections the links closed so far
// because dialing their upstream failed, and the last such dial's error
// (nil if none): what the client saw as its peer refusing it.
func (n *Net) Refused() (int64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var (
		total int64
		last  error
		at    time.Time
	)
	for _, l := range n.links {
		k, err, when := l.refusal()
		total += k
		if err != nil && when.After(at) {
			last, at = err, when
		}
	}
	return total, last
}

// Close closes every link.
func (n *Net) Close() {
	n.mu.Lock()
	links := n.links // kept: Refused still counts them
	n.closed = true
	n.mu.Unlock()
	for _, l := range links {
		l.Close()
	}
}

// Links starts a link to each of upstreams (host:port each), named prefix
// and the upstream: one client's links to every broker address, faulted,
// healed and counted together. On an error it closes the links it
// started.
func (n *Net) Links(prefix string, upstreams []string) (Links, error) {
	ls := make(Links, 0, len(upstreams))
	for _, u := range upstreams {
		l, err := n.Link(prefix+u, u)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// Links are one client's links (a worker's links to every broker
// address), faulted, healed and counted together. Its methods may be
// called from any goroutine.
type Links []*Link

// DialMap is the links' mapping "upstream=proxy,…", the harness worker's
// --dial-map: every address the client dials is looked up in it.
func (ls Links) DialMap() string {
	pairs := make([]string, 0, len(ls))
	for _, l := range ls {
		pairs = append(pairs, l.Upstream()+"="+l.Addr())
	}
	return strings.Join(pairs, ",")
}

// Cut cuts every link both ways (Link.Cut). On an error it heals them all
// and returns the error.
func (ls Links) Cut() error { return ls.each((*Link).Cut) }

// Latency delays every link both ways (Link.Latency). On an error it heals
// them all and returns the error.
func (ls Links) Latency(latency, jitter time.Duration) error {
	return ls.each(func(l *Link) error { return l.Latency(latency, jitter) })
}

// Heal heals every link, and returns the first error.
func (ls Links) Heal() error {
	var first error
	for _, l := range ls {
		if err := l.Heal(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Dropped is how many bytes the links' cuts dropped so far, both ways.
func (ls Links) Dropped() int64 {
	var n int64
	for _, l := range ls {
		n += l.Dropped()
	}
	return n
}

// Delayed is how many bytes the links' latency delayed so far, both ways.
func (ls Links) Delayed() int64 {
	var n int64
	for _, l := range ls {
		n += l.Delayed()
	}
	return n
}

// each applies fault to every link; on an error it heals them all.
func (ls Links) each(fault func(*Link) error) error {
	for _, l := range ls {
		if err := fault(l); err != nil {
			_ = ls.Heal()
			return err
		}
	}
	return nil
}

// Link is one proxied TCP link. Each fault method returns once its toxic
// is in place on every open connection of the link and on every
// connection opened after; faults add up until Heal. Its methods may be
// called from any goroutine.
type Link struct {
	name, upstream, id string
	// p holds the link's toxics; its connections are the link's own (see
	// accept), so p is never started.
	p   *toxiproxy.Proxy
	srv *toxiproxy.ApiServer
	c   *linkCounters

	ln        net.Listener
	accepting sync.WaitGroup // accept
	connMu    sync.Mutex
	conns     map[*destination]struct{} // both ends of each open connection
	connsDone bool                      // Close began: no more tracking

	mu     sync.Mutex
	faults []string // the toxics in place, for String
	closed bool

	refusedMu sync.Mutex
	refused   int64     // connections closed because the upstream dial failed
	lastDial  error     // the last failed dial of the upstream
	lastAt    time.Time // when
}

// Name is the link's name.
func (l *Link) Name() string { return l.name }

// Upstream is the address the link forwards to.
func (l *Link) Upstream() string { return l.upstream }

// Addr is the proxy's address: what the client dials instead of Upstream.
func (l *Link) Addr() string { return l.p.Listen }

// Dropped is how many bytes the link's cuts dropped so far, both ways.
func (l *Link) Dropped() int64 { return l.c.dropped.Load() }

// Delayed is how many bytes the link's latency delayed so far, both ways.
func (l *Link) Delayed() int64 { return l.c.delayed.Load() }

// Refused is how many client connections the link closed so far because
// dialing its upstream failed.
func (l *Link) Refused() int64 {
	k, _, _ := l.refusal()
	return k
}

// refusal is Refused, with the last failed dial's error and its time.
func (l *Link) refusal() (int64, error, time.Time) {
	l.refusedMu.Lock()
	defer l.refusedMu.Unlock()
	return l.refused, l.lastDial, l.lastAt
}

// Cut black-holes the link both ways: every byte sent either way on an
// open or a new connection is dropped, and no connection is closed, until
// Heal.
func (l *Link) Cut() error {
	if err := l.add("cut_up", "upstream", dropType, nil); err != nil {
		return err
	}
	return l.add("cut_down", "downstream", dropType, nil)
}

// OneWay drops the replies only: requests reach the upstream, and every
// byte it sends back is dropped, until Heal.
func (l *Link) OneWay() error { return l.add("oneway_down", "downstream", dropType, nil) }

// Latency delays every chunk of bytes both ways by latency ± jitter (at
// millisecond resolution), until Heal.
func (l *Link) Latency(latency, jitter time.Duration) error {
	attrs := map[string]any{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()}
	if err := l.add("latency_up", "upstream", delayType, attrs); err != nil {
		return err
	}
	return l.add("latency_down", "downstream", delayType, attrs)
}

// ResetPeer closes every connection of the link on the next bytes its
// client sends, new connections included, until Heal; those bytes and any
// that follow are dropped. (A close, not an RST: toxiproxy's reset_peer
// toxic sends an RST on connections opened while it is in place, but
// leaves the goroutine of a connection that sends again after its reset
// waiting forever.)
func (l *Link) ResetPeer() error {
	return l.add("reset_up", "upstream", resetType, nil)
}

// Heal removes every fault; the connections a cut black-holed are closed.
func (l *Link) Heal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.p.Toxics.ResetToxics(context.Background())
	l.faults = nil
	return nil
}

// Faults names the faults in place ("" when healthy).
func (l *Link) Faults() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.faults, ",")
}

// Close stops the proxy and closes every connection of the link.
func (l *Link) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.p.Toxics.ResetToxics(context.Background())
	l.ln.Close()
	l.accepting.Wait()
	l.connMu.Lock()
	conns := l.conns
	l.conns, l.connsDone = nil, true
	l.connMu.Unlock()
	for d := range conns {
		d.Conn.Close()
	}
	counters.Delete(l.id)
}

// accept is the link's proxy, until Close closes its listener: each
// client connection gets a connection to the upstream and a toxiproxy
// link each way, which writes to a destination. (toxiproxy's own proxy
// writes to the bare connections: once a write fails, nothing reads that
// way's chain any more, and a toxic with bytes to pass on waits forever.)
// A failed dial of the upstream closes the client's connection at once,
// which the client sees as the upstream refusing it; it is counted, with
// its error (Refused).
func (l *Link) accept() {
	for {
		client, err := l.ln.Accept()
		if err != nil {
			return // Close
		}
		upstream, err := net.DialTimeout("tcp", l.upstream, 10*time.Second)
		if err != nil {
			l.refusedMu.Lock()
			l.refused++
			l.lastDial, l.lastAt = fmt.Errorf("netfault: link %s: %w", l.name, err), time.Now()
			l.refusedMu.Unlock()
			client.Close()
			continue
		}
		up, down := &destination{Conn: upstream, l: l}, &destination{Conn: client, l: l}
		l.connMu.Lock()
		if l.connsDone {
			l.connMu.Unlock()
			client.Close()
			upstream.Close()
			return
		}
		l.conns[up], l.conns[down] = struct{}{}, struct{}{}
		l.connMu.Unlock()
		name := client.RemoteAddr().String()
		l.p.Toxics.StartLink(l.srv, name+"upstream", client, up, stream.Upstream)
		l.p.Toxics.StartLink(l.srv, name+"downstream", upstream, down, stream.Downstream)
	}
}

// destination is where one way of a connection writes: its first failed
// write closes the connection, which ends the other way's reads and so
// both ways' chains, and every later write succeeds without sending, so
// that the chain drains until it ends instead of waiting for a reader
// that is gone. Only the way's writer calls Write.
type destination struct {
	net.Conn
	l      *Link
	failed bool
}

func (d *destination) Write(p []byte) (int, error) {
	if d.failed {
		return len(p), nil
	}
	if _, err := d.Conn.Write(p); err != nil {
		d.failed = true
		d.Conn.Close()
	}
	return len(p), nil
}

// Close closes the connection and forgets it: the way's writer calls it
// when its chain ends.
func (d *destination) Close() error {
	d.l.connMu.Lock()
	delete(d.l.conns, d)
	d.l.connMu.Unlock()
	return d.Conn.Close()
}

// add puts a toxic of type typ on the stream ("upstream": client to
// upstream; "downstream": back) with attrs and the link's ID.
func (l *Link) add(name, stream, typ string, attrs map[string]any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	a := map[string]any{"link": l.id}
	for k, v := range attrs {
		a[k] = v
	}
	b, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": a})
	if err != nil {
		return fmt.Errorf("netfault: %w", err)
	}
	if _, err := l.p.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
		return fmt.Errorf("netfault: %s on link %s: %w", name, l.name, err)
	}
	l.faults = append(l.faults, name)
	return nil
}
