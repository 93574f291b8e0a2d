package netfault

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is an upstream that echoes every line and records what it received.
type echo struct {
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	received []string
	conns    []net.Conn
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	e.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					e.mu.Lock()
					e.received = append(e.received, line)
					e.mu.Unlock()
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

// linkToEcho starts an echo server and a Net with one link to it, named
// name; both are closed when the test ends.
func linkToEcho(t *testing.T, name string) (*echo, *Link) {
	t.Helper()
	e := startEcho(t)
	n := New()
	t.Cleanup(func() { n.Close() })
	l, err := n.Link(name, e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return e, l
}

func (e *echo) got(line string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.received {
		if l == line {
			return true
		}
	}
	return false
}

// roundTrip writes line on c and reads a line back within wait.
func roundTrip(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(line)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	return r.ReadString('\n')
}

func dial(t *testing.T, l *Link) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

// TestCutAndHeal: a cut link passes no byte either way, on an open
// connection or a new one, and closes neither; after Heal the
// black-holed connection is closed and a new one carries bytes again.
func TestCutAndHeal(t *testing.T) {
	e, l := linkToEcho(t, "w1-sink")
	c, r := dial(t, l)
	if got, err := roundTrip(c, r, "before\n", 5*time.Second); err != nil || got != "before\n" {
		t.Fatalf("healthy link: %q, %v", got, err)
	}
	if err := l.Cut(); err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(c, r, "during\n", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("cut link, open connection: read %q, %v; want a timeout (nothing passes, nothing closes)", got, err)
	}
	c2, r2 := dial(t, l)
	if got, err := roundTrip(c2, r2, "new-during\n", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("cut link, new connection: read %q, %v; want a timeout", got, err)
	}
	if e.got("during\n") || e.got("new-during\n") {
		t.Fatalf("the upstream received bytes sent while the link was cut")
	}
	if l.Dropped() == 0 {
		t.Fatalf("Dropped() = 0 after bytes were sent on a cut link")
	}
	if err := l.Heal(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("the connection black-holed by the cut: read error %v after Heal, want it closed", err)
	}
	c3, r3 := dial(t, l)
	if got, err := roundTrip(c3, r3, "after\n", 5*time.Second); err != nil || got != "after\n" {
		t.Fatalf("healed link: %q, %v", got, err)
	}
}

// TestOneWay: with the replies dropped, the request reaches the upstream
// and its reply never comes back.
func TestOneWay(t *testing.T) {
	e, l := linkToEcho(t, "w1-sink")
	c, r := dial(t, l)
	if err := l.OneWay(); err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(c, r, "request\n", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("one-way link: read %q, %v; want a timeout", got, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !e.got("request\n") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !e.got("request\n") {
		t.Fatalf("the request did not reach the upstream")
	}
	if l.Dropped() == 0 {
		t.Fatalf("Dropped() = 0: the reply was not dropped by the link")
	}
}

// TestLatency: a slowed link still carries every byte, and counts what
// it delayed.
func TestLatency(t *testing.T) {
	_, l := linkToEcho(t, "w1-broker")
	if err := l.Latency(20*time.Millisecond, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, l)
	if got, err := roundTrip(c, r, "slow\n", 5*time.Second); err != nil || got != "slow\n" {
		t.Fatalf("slow link: %q, %v", got, err)
	}
	if l.Delayed() < int64(2*len("slow\n")) {
		t.Fatalf("Delayed() = %d, want both ways counted", l.Delayed())
	}
	if err := l.Heal(); err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(c, r, "fast\n", 5*time.Second); err != nil || got != "fast\n" {
		t.Fatalf("after removing the latency, the open connection: %q, %v", got, err)
	}
}

// TestResetPeer: the next bytes a client sends reset its connection.
func TestResetPeer(t *testing.T) {
	_, l := linkToEcho(t, "w1-broker")
	c, r := dial(t, l)
	if err := l.ResetPeer(); err != nil {
		t.Fatal(err)
	}
	got, err := roundTrip(c, r, "x\n", 5*time.Second)
	if err == nil || isTimeout(err) {
		t.Fatalf("reset link: read %q, %v; want the connection reset", got, err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		t.Logf("reset seen as %v", err)
	}
	if err := l.Heal(); err != nil {
		t.Fatal(err)
	}
	c2, r2 := dial(t, l)
	if got, err := roundTrip(c2, r2, "y\n", 5*time.Second); err != nil || got != "y\n" {
		t.Fatalf("healed link: %q, %v", got, err)
	}
}

// TestClosed: a closed link refuses faults.
func TestClosed(t *testing.T) {
	e := startEcho(t)
	n := New()
	l, err := n.Link("w1", e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	if err := l.Cut(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Cut after Close: %v, want ErrClosed", err)
	}
	if _, err := n.Link("w2", e.ln.Addr().String()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Link after Close: %v, want ErrClosed", err)
	}
}

// TestRefusedCounted: a connection whose upstream cannot be dialled is
// closed at once, and counted with the dial's error, also after Close.
func TestRefusedCounted(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := gone.Addr().String()
	gone.Close() // nothing listens there now
	n := New()
	t.Cleanup(func() { n.Close() })
	l, err := n.Link("w1", addr)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		c, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if k, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("connection %d through a link whose upstream refuses: read %d bytes, %v; want EOF", i, k, err)
		}
		c.Close()
	}
	n.Close()
	k, last := n.Refused()
	if k != 2 || l.Refused() != 2 {
		t.Fatalf("refused %d (link %d), want 2", k, l.Refused())
	}
	if last == nil || !strings.Contains(last.Error(), "w1") || !strings.Contains(last.Error(), "refused") {
		t.Fatalf("last refusal %v, want the link's name and the dial's error", last)
	}
}

// TestLinks: one client's links to two upstreams are mapped, cut, counted
// and healed together.
func TestLinks(t *testing.T) {
	e1, e2 := startEcho(t), startEcho(t)
	n := New()
	t.Cleanup(func() { n.Close() })
	a1, a2 := e1.ln.Addr().String(), e2.ln.Addr().String()
	ls, err := n.Links("w1-broker-", []string{a1, a2})
	if err != nil {
		t.Fatal(err)
	}
	if want := a1 + "=" + ls[0].Addr() + "," + a2 + "=" + ls[1].Addr(); ls.DialMap() != want || ls[1].Name() != "w1-broker-"+a2 {
		t.Fatalf("DialMap() = %q, names %q %q; want %q", ls.DialMap(), ls[0].Name(), ls[1].Name(), want)
	}
	c1, r1 := dial(t, ls[0])
	c2, r2 := dial(t, ls[1])
	if err := ls.Cut(); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{c1, r1}, {c2, r2}} {
		if got, err := roundTrip(c.c, c.r, "during\n", 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("link %d of a cut set: read %q, %v; want a timeout", i, got, err)
		}
	}
	if ls.Dropped() != ls[0].Dropped()+ls[1].Dropped() || ls[0].Dropped() == 0 || ls[1].Dropped() == 0 {
		t.Fatalf("Dropped() = %d, the links' %d and %d: want both cut and summed", ls.Dropped(), ls[0].Dropped(), ls[1].Dropped())
	}
	if err := ls.Heal(); err != nil {
		t.Fatal(err)
	}
	if ls[0].Faults() != "" || ls[1].Faults() != "" {
		t.Fatalf("faults after Heal: %q, %q", ls[0].Faults(), ls[1].Faults())
	}
	c3, r3 := dial(t, ls[1])
	if got, err := roundTrip(c3, r3, "after\n", 5*time.Second); err != nil || got != "after\n" {
		t.Fatalf("healed link: %q, %v", got, err)
	}
}

// TestHealWhileSending heals a cut link while its client keeps sending:
// toxiproxy removes a toxic whose Cleanup closes its stub without
// rewiring the stub before it, so the bytes that arrive meanwhile have
// nowhere to go. Once the connection is gone, no goroutine of the link
// may be left waiting to pass them on (found by goleak after a demo
// with --fault partition).
func TestHealWhileSending(t *testing.T) {
	before := goleak.IgnoreCurrent()
	for i := range 5 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			_, l := linkToEcho(t, "w1-broker")
			c, _ := dial(t, l)
			if err := l.Cut(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					if _, err := c.Write([]byte("x\n")); err != nil {
						return
					}
				}
			}()
			testwait.For(t, 5*time.Second, "bytes dropped by the cut", func() bool { return l.Dropped() > 0 })
			if err := l.Heal(); err != nil {
				t.Fatal(err)
			}
			<-done // the heal closed the connection the client wrote on
		})
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutines left after healing cut links under traffic and closing them: %v", err)
	}
}

// TestResetWhileSending: a client that goes on sending after ResetPeer
// closed its connection leaves no goroutine of the link behind.
func TestResetWhileSending(t *testing.T) {
	before := goleak.IgnoreCurrent()
	for i := range 5 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			_, l := linkToEcho(t, "w1-broker")
			c, _ := dial(t, l)
			if err := l.ResetPeer(); err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := c.Write([]byte("x\n")); err != nil {
					break // the reset closed the connection
				}
			}
			if l.Dropped() == 0 {
				t.Fatal("Dropped() = 0: the reset dropped nothing")
			}
		})
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutines left after resetting links under traffic and closing them: %v", err)
	}
}

// TestClientGoneWhileStreaming: the upstream streams to a client that
// resets its connection. The link's write to the client fails with bytes
// still coming; they must drain (toxiproxy's own proxy stops reading that
// way's chain at its first failed write, and the toxic holding the next
// bytes waits forever), the upstream's connection must end, and no
// goroutine of the link may be left.
func TestClientGoneWhileStreaming(t *testing.T) {
	before := goleak.IgnoreCurrent()
	for i := range 5 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				buf := make([]byte, 32<<10)
				for {
					if _, err := c.Write(buf); err != nil {
						return // the link closed the connection
					}
				}
			}()
			n := New()
			defer n.Close()
			l, err := n.Link("w1-broker", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", l.Addr())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 64<<10)); err != nil {
				t.Fatal(err)
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close() // a reset, the upstream still streaming
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("the upstream's connection still open 10 s after its client reset the link's")
			}
		})
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutines left after clients reset their connections while the upstream streamed: %v", err)
	}
}
