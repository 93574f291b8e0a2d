package faults

import (
	"context"
	"net"
	"sync"
	"time"
)

// Dialer dials TCP connections that can be cut (closed under the client's
// feet) or stalled (every read and write blocks for a while), for
// broker-connection faults: pass its DialContext to kgo.Dialer. Its methods
// may be called from any goroutine.
type Dialer struct {
	d net.Dialer

	mu     sync.Mutex
	conns  map[*conn]struct{}
	until  time.Time     // stalled until then
	wakeup chan struct{} // closed when a stall is lifted early (Close)
	closed bool
}

// NewDialer returns a Dialer.
func NewDialer() *Dialer {
	return &Dialer{conns: map[*conn]struct{}{}, wakeup: make(chan struct{})}
}

// DialContext dials like net.Dialer.DialContext and tracks the connection.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := d.wait(ctx.Done()); err != nil {
		return nil, err
	}
	c, err := d.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &conn{Conn: c, d: d}
	d.mu.Lock()
	d.conns[tc] = struct{}{}
	d.mu.Unlock()
	return tc, nil
}

// Cut closes every open connection and returns how many it closed.
func (d *Dialer) Cut() int {
	d.mu.Lock()
	conns := make([]*conn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return len(conns)
}

// Stall makes every read, write and dial block for dur from now, and
// returns how many connections were open.
func (d *Dialer) Stall(dur time.Duration) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.until = time.Now().Add(dur)
	return len(d.conns)
}

// Close lifts any stall. The connections themselves belong to their
// users.
func (d *Dialer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.wakeup)
	}
}

// wait blocks while a stall lasts, or until done is closed.
func (d *Dialer) wait(done <-chan struct{}) error {
	for {
		d.mu.Lock()
		left := time.Until(d.until)
		wake := d.wakeup
		d.mu.Unlock()
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
		case <-wake:
			t.Stop()
			return nil
		case <-done:
			t.Stop()
			return context.Canceled
		}
	}
}

type conn struct {
	net.Conn
	d    *Dialer
	once sync.Once
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	_ = c.d.wait(nil) // data that arrived during a stall is delivered after it
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	_ = c.d.wait(nil)
	return c.Conn.Write(p)
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.d.mu.Lock()
		delete(c.d.conns, c)
		c.d.mu.Unlock()
	})
	return c.Conn.Close()
}
