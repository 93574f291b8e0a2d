package faults

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestInterrupterCutsOneTransaction: an armed Interrupter cancels the
// next Apply after its first effect; nothing of that batch is applied, and
// the retried batch applies normally.
func TestInterrupterCutsOneTransaction(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	var firedErr error
	in := NewInterrupter(s, func(_ epochs.Token, err error) { firedErr = err })
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := in.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	effect := func(context.Context, *memory.Tx, int) error { calls++; return nil }
	in.Arm()
	if _, err := in.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1, 2}}, effect); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted apply: %v, want context.Canceled", err)
	}
	if calls != 1 || firedErr == nil {
		t.Fatalf("effects run %d (want 1 before the cut), fired with %v", calls, firedErr)
	}
	res, err := in.Apply(ctx, tok, sink.Batch{Offsets: []int64{0, 1, 2}}, effect)
	if err != nil || res.Applied != 3 || res.Skipped != 0 {
		t.Fatalf("retried apply: %+v %v, want all 3 applied (nothing of the cut batch kept)", res, err)
	}
}

func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func TestDialerCutAndStall(t *testing.T) {
	addr := echoServer(t)
	d := NewDialer()
	defer d.Close()
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 2)
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("echo %q %v", buf, err)
	}

	if n := d.Stall(300 * time.Millisecond); n != 1 {
		t.Fatalf("stall saw %d connections, want 1", n)
	}
	start := time.Now()
	if _, err := c.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("write during a stall returned after %s", waited)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("echo after the stall %q %v", buf, err)
	}

	if n := d.Cut(); n != 1 {
		t.Fatalf("cut %d connections, want 1", n)
	}
	if _, err := c.Read(buf); err == nil {
		t.Fatal("read on a cut connection succeeded")
	}
	if n := d.Cut(); n != 0 {
		t.Fatalf("second cut closed %d connections, want 0", n)
	}
}
