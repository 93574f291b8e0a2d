package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// TestDeadLetterRacingClaim: a dead letter by a that races a claim by a
// newer token b is fenced and stores nothing. The race is made
// deterministic with an outside transaction that locks the fence row (as
// b's Claim does), waits until the dead letter is blocked on that lock,
// makes b the holder and commits: the dead letter must see b, either at
// its locked read of the fence row or at its conditional UPDATE's row
// count.
func TestDeadLetterRacingClaim(t *testing.T) {
	t.Parallel()
	schema := newTestSchema(t)
	s := openSink(t, schema, nil)
	ctx := t.Context()
	scope := testScope(t)
	a, b := tokenOf(scope, 1, "a"), tokenOf(scope, 2, "b")
	mustClaim(t, s, a)

	conn, err := pgx.Connect(ctx, requireDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	outside, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after the commit
	var pid int32
	if err := outside.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := outside.Exec(ctx, `SELECT 1 FROM `+s.q.fences+` WHERE grp = $1 AND topic = $2 AND part = $3 FOR UPDATE`,
		scope.Group, scope.Topic, scope.Partition); err != nil {
		t.Fatal(err)
	}

	type result struct {
		res sink.DeadLetterResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.DeadLetter(ctx, a, sink.DeadRecord{Offset: 0, Value: []byte("poison"), Reason: "undecodable", Error: "not an envelope"})
		done <- result{res, err}
	}()
	// Wait until a session waits for the outside transaction's lock: the
	// dead letter, blocked on the fence row.
	for blocked := 0; blocked == 0; {
		select {
		case r := <-done:
			t.Fatalf("the dead letter returned (%+v, %v) while the fence row was locked", r.res, r.err)
		default:
		}
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		if blocked == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	// What b's Claim writes: b holds the scope, NextOffset unchanged.
	if _, err := outside.Exec(ctx, `UPDATE `+s.q.fences+` SET epoch = $4, member = $5 WHERE grp = $1 AND topic = $2 AND part = $3`,
		scope.Group, scope.Topic, scope.Partition, b.Epoch, b.Member); err != nil {
		t.Fatal(err)
	}
	if err := outside.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	r := <-done
	var fe *sink.FencedError
	if !errors.As(r.err, &fe) || fe.Op != sink.OpDeadLetter || fe.Stored != b || fe.Offered != a {
		t.Fatalf("the dead letter racing b's claim = %+v, %v; want a FencedError of %s with stored %s", r.res, r.err, a, b)
	}
	if dls, err := s.DeadLetters(ctx, dlq.Filter{Group: scope.Group}); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after the fenced dead letter = %+v, %v; want none", dls, err)
	}
	if next := mustClaim(t, s, b); next != 0 {
		t.Fatalf("NextOffset after the fenced dead letter = %d, want 0", next)
	}
}
