// Package lostreply loses the one reply a test picks: a wrapper of the
// connections a database client dials that, once armed, lets the client's
// next request reach the server but never lets the client read the
// server's answer, as a link that drops replies and not requests does
// (the ambiguous commit: the write lands, the writer never learns it).
// The client's read fails as that of a reset connection does. For tests
// only: the sinks' lost-reply tests wrap their clients' dialers with it.
package lostreply

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrLost is matched by the read error a client gets on a connection
// whose reply a [Link] dropped. It wraps syscall.ECONNRESET.
var ErrLost = fmt.Errorf("lostreply: the reply was lost: %w", syscall.ECONNRESET)

// errNotHeld is returned by Release when no request is held.
var errNotHeld = errors.New("lostreply: no request is held")

// Arming modes.
const (
	off     = iota
	deliver // the request reaches the server at once
	hold    // the request waits for Release
)

// Link wraps the connections of one client (Wrap) and cuts, once armed,
// the reply of the next request written on any of them. Its methods may
// be called from any goroutine.
type Link struct {
	complete func(reply []byte) bool
	timeout  time.Duration
	armed    atomic.Int32

	mu    sync.Mutex
	cuts  int
	held  *conn  // the connection whose request waits for Release
	req   []byte // that request
	reply []byte // what the server answered to the last cut request
	err   error  // why reading that answer failed, if it did
}

// New returns a Link. complete reports whether reply, the bytes the
// server has sent so far in answer to a cut request, is the whole
// answer; the Link reads (and drops) that much before it closes the
// connection. timeout bounds that read.
func New(complete func(reply []byte) bool, timeout time.Duration) *Link {
	return &Link{complete: complete, timeout: timeout}
}

// Wrap returns c, wrapped: pass it what the client's dialer dialled.
func (l *Link) Wrap(c net.Conn) net.Conn { return &conn{Conn: c, l: l} }

// Arm makes the next request written on any wrapped connection reach the
// server at once; the Link reads the server's whole answer and drops it,
// closes the connection, and the client's read fails with [ErrLost]. The
// client's write returns only once the answer was read, so when the
// client's call returns its error the request has run on the server.
func (l *Link) Arm() { l.armed.Store(deliver) }

// ArmHeld makes the next request written on any wrapped connection wait,
// while the client's read fails at once with [ErrLost]: the server keeps
// the connection (and an open transaction on it) until [Link.Release]
// sends the request. This is a request that reaches the server late, after
// the client gave up on it.
func (l *Link) ArmHeld() { l.armed.Store(hold) }

// Cuts returns how many replies the Link dropped (or holds).
func (l *Link) Cuts() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cuts
}

// Reply returns what the server answered to the last cut request, and
// the error that ended reading it (nil if complete said it was whole).
func (l *Link) Reply() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reply, l.err
}

// Release sends the held request to the server, reads the server's whole
// answer (dropped: the client has gone), closes the connection and
// returns the answer.
func (l *Link) Release() ([]byte, error) {
	l.mu.Lock()
	c, req := l.held, l.req
	l.held, l.req = nil, nil
	l.mu.Unlock()
	if c == nil {
		return nil, errNotHeld
	}
	reply, err := c.deliver(req)
	l.mu.Lock()
	l.reply, l.err = reply, err
	l.mu.Unlock()
	return reply, err
}

// Close closes the connection of a request still held (the server then
// rolls back what it had open there).
func (l *Link) Close() {
	l.mu.Lock()
	c := l.held
	l.held, l.req = nil, nil
	l.mu.Unlock()
	if c != nil {
		_ = c.Conn.Close()
	}
}

// conn is a wrapped connection.
type conn struct {
	net.Conn
	l      *Link
	cut    atomic.Bool // its reply is lost: the client reads nothing more
	readMu sync.Mutex  // held by a client's read while it waits on Conn
}

func (c *conn) Read(b []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.cut.Load() {
		return 0, ErrLost
	}
	n, err := c.Conn.Read(b)
	if c.cut.Load() {
		return 0, ErrLost // what came after the cut is the lost reply's
	}
	return n, err
}

func (c *conn) Write(b []byte) (int, error) {
	if c.cut.Load() {
		return 0, ErrLost
	}
	mode := c.l.armed.Swap(off)
	if mode == off {
		return c.Conn.Write(b)
	}
	c.cut.Store(true)
	// A client may read while it writes (pgx does, against deadlocks):
	// end that read, and wait for it, before this request is sent, so
	// that no byte of the answer reaches the client.
	_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
	c.readMu.Lock()
	c.readMu.Unlock()
	_ = c.Conn.SetReadDeadline(time.Time{})
	c.l.mu.Lock()
	c.l.cuts++
	if mode == hold {
		c.l.held, c.l.req = c, append([]byte(nil), b...)
		c.l.mu.Unlock()
		return len(b), nil
	}
	c.l.mu.Unlock()
	reply, err := c.deliver(b)
	c.l.mu.Lock()
	c.l.reply, c.l.err = reply, err
	c.l.mu.Unlock()
	return len(b), nil
}

// deliver sends req on c's connection, reads the answer until the Link's
// complete says it is whole, and closes the connection.
func (c *conn) deliver(req []byte) ([]byte, error) {
	defer c.Conn.Close()
	_ = c.Conn.SetDeadline(time.Now().Add(c.l.timeout))
	if _, err := c.Conn.Write(req); err != nil {
		return nil, err
	}
	var reply []byte
	buf := make([]byte, 64<<10)
	for !c.l.complete(reply) {
		n, err := c.Conn.Read(buf)
		reply = append(reply, buf[:n]...)
		if err != nil {
			return reply, fmt.Errorf("lostreply: reading the answer to the cut request: %w", err)
		}
	}
	return reply, nil
}

// Close closes the connection, unless its request is held: the server
// keeps it until Release or the Link's Close.
func (c *conn) Close() error {
	if c.cut.Load() {
		c.l.mu.Lock()
		held := c.l.held == c
		c.l.mu.Unlock()
		if held {
			return nil
		}
	}
	return c.Conn.Close()
}

// The deadlines are the client's until the cut, the Link's after it.

func (c *conn) SetDeadline(t time.Time) error {
	if c.cut.Load() {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	if c.cut.Load() {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	if c.cut.Load() {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}
