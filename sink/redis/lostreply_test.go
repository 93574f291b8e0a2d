package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/lostreply"
	"github.com/workrouter/workrouter/internal/testredis"
	"github.com/workrouter/workrouter/sink"
)

// respEnd returns the index just past the RESP value (RESP2 or RESP3)
// that starts at b[i], or -1 if b holds only part of it.
func respEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	line := bytes.Index(b[i:], []byte("\r\n"))
	if line < 0 {
		return -1
	}
	head, next := b[i+1:i+line], i+line+2
	switch b[i] {
	case '$', '=', '!': // a bulk string, a verbatim string, a bulk error
		n, err := strconv.Atoi(string(head))
		if err != nil || n < 0 {
			return next
		}
		if next+n+2 > len(b) {
			return -1
		}
		return next + n + 2
	case '*', '~', '>', '%', '|': // an aggregate
		n, err := strconv.Atoi(string(head))
		if err != nil || n < 0 {
			return next
		}
		if b[i] == '%' || b[i] == '|' {
			n *= 2
		}
		if b[i] == '|' {
			n++ // an attribute precedes a value
		}
		for range n {
			if next = respEnd(b, next); next < 0 {
				return -1
			}
		}
		return next
	default: // a one-line value
		return next
	}
}

// The ambiguous commit on Redis (issue 44): the apply script's EVALSHA
// reaches the server and runs, but its reply never reaches the sink,
// which returns an error matching ErrUnavailable; the worker retries the
// same batch, with the same token, records and command IDs. The retry
// must apply nothing twice and lose nothing. The link is cut by the
// Dialer of the sink's go-redis client (internal/lostreply; MaxRetries
// -1, as Config.Client asks, so that go-redis does not send the script
// again by itself). The handlers increment a counter per record (INCRBY:
// the script path, not WATCH/MULTI/EXEC), so applying twice leaves 2.
// Two timings:
//
//   - landed=first: the script runs before the retry begins. The retry
//     reads the fence (its tenure's cached checkpoint was forgotten with
//     the error), finds NextOffset past the batch and skips every record.
//     Red without that skip (apply's skip of the records the checkpoint
//     read contains) for a batch without IDs;
//     with IDs the IDs, reloaded, find both records applied, and only
//     both removed make it red.
//   - landed=late: the EVALSHA reaches the server only while the retry
//     runs, after the retry read the fence and the IDs. Only the script's
//     checks stop the retry's script: for a batch without IDs, NextOffset
//     equal to the one the sink read (red without it); with IDs, that and
//     the IDs version, each enough alone (red with both removed). The
//     redone batch then skips every record (red without the skip too, for
//     a batch without IDs).
//
// In every case the first script is shown to have run although its
// Apply failed: the fence's NextOffset read by the test (landed=first) or
// the script's "ok" in the reply the dialer dropped (landed=late).
func TestScriptReplyLost(t *testing.T) {
	t.Parallel()
	for _, late := range []bool{false, true} {
		for _, withIDs := range []bool{false, true} {
			landed := "first"
			if late {
				landed = "late"
			}
			t.Run("landed="+landed+"/ids="+strconv.FormatBool(withIDs), func(t *testing.T) {
				t.Parallel()
				testScriptReplyLost(t, late, withIDs)
			})
		}
	}
}

func testScriptReplyLost(t *testing.T, late, withIDs bool) {
	link := lostreply.New(func(reply []byte) bool { return respEnd(reply, 0) == len(reply) }, 30*time.Second)
	t.Cleanup(link.Close)
	opt, err := goredis.ParseURL(testredis.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	opt.DisableIdentity = true
	opt.PoolSize = 4
	var d net.Dialer
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return link.Wrap(c), nil
	}
	if opt.TLSConfig != nil {
		t.Skip("the test server is reached over TLS: the lost reply test needs plain TCP to see the replies")
	}
	client := goredis.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	prefix := testredis.Prefix()
	s, err := Open(t.Context(), Config{Client: client, Prefix: prefix, HeldWatches: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Drop(ctx); err != nil {
			t.Errorf("drop %s: %v", prefix, err)
		}
		s.Close()
	})

	scope := epochs.Scope{Group: "g-lost-reply", Topic: "orders", Partition: 1}
	tok := epochs.Token{Group: scope.Group, Topic: scope.Topic, Partition: scope.Partition, Epoch: 1, Member: "m"}
	claimed(t, s, tok)
	batchOf := func(offs []int64, ids ...string) sink.Batch {
		if withIDs {
			return sink.Batch{Offsets: offs, IDs: ids}
		}
		return sink.Batch{Offsets: offs}
	}
	// The warm-up loads the script, so that the cut one goes by EVALSHA
	// alone.
	warm := func(_ context.Context, tx *Tx, _ int) error { tx.IncrBy("warm-up", 1); return nil }
	if res, err := s.Apply(t.Context(), tok, batchOf([]int64{0}, "cmd-0"), warm); err != nil || res.NextOffset != 1 {
		t.Fatalf("warm-up Apply = %+v, %v", res, err)
	}

	offs := []int64{1, 2}
	batch := batchOf(offs, "cmd-1", "cmd-2")
	var (
		released []byte // the server's reply to the late request
		sent     bool   // the late request was sent
	)
	effect := func(arm, release bool) sink.Effect[*Tx] {
		return func(_ context.Context, tx *Tx, i int) error {
			if release && !sent {
				// The retry has read the fence (and the IDs): the
				// first Apply's script runs now.
				sent = true
				reply, err := link.Release()
				if err != nil {
					return fmt.Errorf("releasing the held EVALSHA: %w", err)
				}
				released = reply
			}
			tx.IncrBy(fmt.Sprint("k", offs[i]), 1)
			if arm && i == len(offs)-1 {
				// The effects only buffer: the next request on the
				// client is the apply script.
				if late {
					link.ArmHeld()
				} else {
					link.Arm()
				}
			}
			return nil
		}
	}
	_, err = s.Apply(t.Context(), tok, batch, effect(true, false))
	if link.Cuts() != 1 {
		t.Fatalf("the dialer cut %d replies, want 1 (the fault did not happen)", link.Cuts())
	}
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Apply whose script's reply was lost: %v, want ErrUnavailable and not sink.ErrFenced", err)
	}
	t.Logf("the first Apply: %v", err)
	fenceNext := func() string {
		n, err := s.Client().HGet(t.Context(), s.fenceKey(scope), "n").Result()
		if err != nil {
			t.Fatalf("read the fence: %v", err)
		}
		return n
	}
	if !late {
		if reply, rerr := link.Reply(); rerr != nil || !bytes.Contains(reply, []byte("ok\r\n")) {
			t.Fatalf("the server's dropped reply %q (%v) is not the script's ok", reply, rerr)
		}
		if n := fenceNext(); n != "3" {
			t.Fatalf("NextOffset in the fence after the lost reply = %s, want 3: the first script did not land", n)
		}
	}

	res, err := s.Apply(t.Context(), tok, batch, effect(false, late))
	if late && !bytes.Contains(released, []byte("ok\r\n")) {
		t.Fatalf("the late request's reply %q is not the script's ok: the first script did not land (retry: %+v, %v)", released, res, err)
	}
	var vals []string
	for _, o := range offs {
		v, _, gerr := getKV(t.Context(), s, fmt.Sprint("k", o))
		vals = append(vals, fmt.Sprintf("k%d=%q (%v)", o, v, gerr))
	}
	if err != nil || res.Applied != 0 || res.NextOffset != 3 {
		t.Fatalf("retried Apply = %+v, %v; want nothing applied, NextOffset 3; counters after: %v", res, err, vals)
	}
	t.Logf("the retry: %+v", res)
	for _, o := range offs {
		if v, _, _ := getKV(t.Context(), s, fmt.Sprint("k", o)); v != "1" {
			t.Fatalf("applied twice: counters after the retry: %v, want each 1 (exactly once)", vals)
		}
	}
	if n := fenceNext(); n != "3" {
		t.Fatalf("NextOffset after the retry = %s, want 3", n)
	}
}
