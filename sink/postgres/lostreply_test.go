package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/lostreply"
	"github.com/workrouter/workrouter/sink"
)

// pgReplyComplete reports whether reply, the server's answer to a
// pipeline so far, is whole: it ends with ReadyForQuery, which the Sync
// closing every pipeline of pgx's brings.
func pgReplyComplete(reply []byte) bool {
	n := len(reply)
	return n >= 6 && reply[n-6] == 'Z' && bytes.Equal(reply[n-5:n-1], []byte{0, 0, 0, 5})
}

// The ambiguous commit (issue 44): Apply's last pipeline, the checked
// advance of the fence with COMMIT, reaches the server and commits, but
// its answer never reaches the sink, which returns an error matching
// ErrOutcomeUnknown; the worker then retries the same batch, with the
// same token, records and command IDs. The retry must apply nothing
// twice and lose nothing. The link is cut by a dialer of the sink's own
// pool (internal/lostreply), so the cut is between the sink and the
// server, as a network that drops replies makes it. Two timings:
//
//   - landed=first: the COMMIT runs before the retry begins. The retry's
//     transaction reads the fence row, finds NextOffset past the batch
//     and skips every record (a replay). Red without the skip of the
//     records below the NextOffset read in the unit (applyAttempt's
//     first), for a batch without IDs; with IDs the lookup of the IDs
//     (reloaded from the table, the commit's outcome being unknown) finds
//     both records applied, and only both removed make it red.
//   - landed=late: the request reaches the server only while the retry
//     runs, after the retry read the fence and the IDs (the server got
//     the COMMIT late: a slow link, a lock wait; the client had given up).
//     Only the checked advance's conditions stop the retry: for a batch
//     without IDs, next_offset = the NextOffset read (red without it); with
//     IDs, that and ids_version = the version read, each enough alone (red
//     with both removed). The refused retry then runs again and skips the
//     batch as a replay (red without the skip too, for a batch without
//     IDs).
//
// In every case the first commit is shown to have landed although its
// Apply failed: the fence row read by the test (landed=first) or the
// server's answer to the COMMIT that the dialer dropped (landed=late).
func TestCommitReplyLost(t *testing.T) {
	t.Parallel()
	for _, late := range []bool{false, true} {
		for _, withIDs := range []bool{false, true} {
			landed := "first"
			if late {
				landed = "late"
			}
			t.Run("landed="+landed+"/ids="+strconv.FormatBool(withIDs), func(t *testing.T) {
				t.Parallel()
				testCommitReplyLost(t, late, withIDs)
			})
		}
	}
}

func testCommitReplyLost(t *testing.T, late, withIDs bool) {
	schema := newTestSchema(t)
	link := lostreply.New(pgReplyComplete, 30*time.Second)
	t.Cleanup(link.Close)
	pcfg, err := pgxpool.ParseConfig(schemaDSN(t, schema))
	if err != nil {
		t.Fatal(err)
	}
	cc := pcfg.ConnConfig
	// Plain TCP, so that the dialer sees the protocol's bytes.
	cc.TLSConfig, cc.Fallbacks = nil, nil
	var d net.Dialer
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return link.Wrap(c), nil
	}
	// One connection, so that the warm-up Apply below leaves the
	// statements of Apply's last pipeline prepared on the one the cut
	// Apply uses: that pipeline is then one write (pgx prepares a
	// statement with a round trip of its own on its first use).
	pcfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := Open(t.Context(), Config{Pool: pool, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	scope := epochs.Scope{Group: "g-lost-reply", Topic: "orders", Partition: 1}
	tok := tokenOf(scope, 1, "m")
	mustClaim(t, s, tok)
	batchOf := func(offs []int64, ids ...string) sink.Batch {
		if withIDs {
			return sink.Batch{Offsets: offs, IDs: ids}
		}
		return sink.Batch{Offsets: offs}
	}
	warm := func(ctx context.Context, tx pgx.Tx, _ int) error {
		_, err := tx.Exec(ctx, appendKV, "warm-up", "x")
		return err
	}
	if res, err := s.Apply(t.Context(), tok, batchOf([]int64{0}, "cmd-0"), warm); err != nil || res.NextOffset != 1 {
		t.Fatalf("warm-up Apply = %+v, %v", res, err)
	}

	offs := []int64{1, 2}
	batch := batchOf(offs, "cmd-1", "cmd-2")
	var (
		released []byte // the server's answer to the late request
		sent     bool   // the late request was sent
	)
	effect := func(arm, release bool) sink.Effect[pgx.Tx] {
		return func(ctx context.Context, tx pgx.Tx, i int) error {
			if release && !sent {
				// The retry has read the fence (and the IDs): the
				// first Apply's pipeline reaches the server now, before
				// this statement, which would wait on its row locks.
				sent = true
				reply, err := link.Release()
				if err != nil {
					return fmt.Errorf("releasing the held COMMIT: %w", err)
				}
				released = reply
			}
			_, err := tx.Exec(ctx, appendKV, fmt.Sprint("k", offs[i]), "x")
			if arm && i == len(offs)-1 {
				// The next write on the connection is the checked
				// advance with COMMIT.
				if late {
					link.ArmHeld()
				} else {
					link.Arm()
				}
			}
			return err
		}
	}
	_, err = s.Apply(t.Context(), tok, batch, effect(true, false))
	if link.Cuts() != 1 {
		t.Fatalf("the dialer cut %d replies, want 1 (the fault did not happen)", link.Cuts())
	}
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Apply whose COMMIT's answer was lost: %v, want ErrOutcomeUnknown and not sink.ErrFenced", err)
	}
	t.Logf("the first Apply: %v", err)
	fenceNext := func() int64 {
		var next int64
		adminQueryRow(t, "SELECT next_offset FROM "+pgx.Identifier{schema, "workrouter_fences"}.Sanitize()+
			" WHERE grp = $1 AND topic = $2 AND part = $3", []any{scope.Group, scope.Topic, scope.Partition}, &next)
		return next
	}
	if !late {
		if reply, rerr := link.Reply(); rerr != nil || !bytes.Contains(reply, []byte("COMMIT\x00")) {
			t.Fatalf("the server's dropped answer %q (%v) holds no COMMIT", reply, rerr)
		}
		if next := fenceNext(); next != 3 {
			t.Fatalf("NextOffset in the fence row after the lost answer = %d, want 3: the first commit did not land", next)
		}
	}

	res, err := s.Apply(t.Context(), tok, batch, effect(false, late))
	if late && !bytes.Contains(released, []byte("COMMIT\x00")) {
		t.Fatalf("the late request's answer %q holds no COMMIT: the first commit did not land (retry: %+v, %v)", released, res, err)
	}
	var vals []string
	for _, o := range offs {
		v, _, gerr := getKV(t.Context(), s, fmt.Sprint("k", o))
		vals = append(vals, fmt.Sprintf("k%d=%q (%v)", o, v, gerr))
	}
	if err != nil || res.Applied != 0 || res.NextOffset != 3 {
		t.Fatalf("retried Apply = %+v, %v; want nothing applied, NextOffset 3; kv after: %v", res, err, vals)
	}
	t.Logf("the retry: %+v", res)
	for _, o := range offs {
		if v, _, _ := getKV(t.Context(), s, fmt.Sprint("k", o)); v != "x" {
			t.Fatalf("applied twice: kv after the retry: %v, want each x (exactly once)", vals)
		}
	}
	if next := fenceNext(); next != 3 {
		t.Fatalf("NextOffset after the retry = %d, want 3", next)
	}
}
