package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/sink"
)

// TestIsSinkFailure: failures of the database are told from a handler's
// own errors without a server (the classifier looks at the error only).
func TestIsSinkFailure(t *testing.T) {
	var s *Sink
	var c sink.Health = s
	var truncated error
	if err := json.Unmarshal([]byte(`{"amount":`), new(map[string]any)); err != nil {
		truncated = fmt.Errorf("decoding the payload: %w", err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a handler's truncated JSON", truncated, false},
		{"a handler's wrapped io.ErrUnexpectedEOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), false},
		{"a handler's own error", errors.New("insufficient funds"), false},
		{"a constraint violation", &pgconn.PgError{Code: "23505"}, false},
		{"a serialization failure", &pgconn.PgError{Code: "40001"}, true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"a closed network connection", fmt.Errorf("query: %w", net.ErrClosed), true},
		{"a cancelled context", fmt.Errorf("query: %w", context.Canceled), true},
		{"an unknown commit outcome", fmt.Errorf("commit: %w", ErrOutcomeUnknown), true},
	} {
		if got := c.IsSinkFailure(tc.err); got != tc.want {
			t.Errorf("%s: IsSinkFailure(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestIsPermanent: data exceptions (class 22) and exceeded program limits
// (class 54) are permanent; constraint violations, errors of the code or
// schema (class 42), failures of the database and a handler's own errors
// are not. Permanent and IsSinkFailure never hold together.
func TestIsPermanent(t *testing.T) {
	var s *Sink
	var c sink.Health = s
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a handler's own error", errors.New("insufficient funds"), false},
		{"text that is not UTF-8", fmt.Errorf("ledger: deposit: %w", &pgconn.PgError{Code: "22021"}), true},
		{"invalid input syntax", &pgconn.PgError{Code: "22P02"}, true},
		{"numeric out of range", &pgconn.PgError{Code: "22003"}, true},
		{"string too long", &pgconn.PgError{Code: "22001"}, true},
		{"division by zero", &pgconn.PgError{Code: "22012"}, true},
		{"index row too large", &pgconn.PgError{Code: "54000"}, true},
		{"unique violation: may be a race", &pgconn.PgError{Code: "23505"}, false},
		{"foreign key: the parent may come later", &pgconn.PgError{Code: "23503"}, false},
		{"check violation: may depend on state", &pgconn.PgError{Code: "23514"}, false},
		{"undefined table: a migration fixes it", &pgconn.PgError{Code: "42P01"}, false},
		{"insufficient privilege: a GRANT fixes it", &pgconn.PgError{Code: "42501"}, false},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, false},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, false},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, false},
		{"out of memory", &pgconn.PgError{Code: "53200"}, false},
		{"too many connections", &pgconn.PgError{Code: "53300"}, false},
		{"connection exception", &pgconn.PgError{Code: "08006"}, false},
		{"a closed network connection", fmt.Errorf("query: %w", net.ErrClosed), false},
		{"a cancelled context around a data exception", fmt.Errorf("%w (%w)", context.Canceled, &pgconn.PgError{Code: "22021"}), false},
		{"a malformed SQLSTATE", &pgconn.PgError{Code: "22"}, false},
	} {
		if got := c.IsPermanent(tc.err); got != tc.want {
			t.Errorf("%s: IsPermanent(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
		if c.IsPermanent(tc.err) && s.IsSinkFailure(tc.err) {
			t.Errorf("%s: both permanent and a sink failure", tc.name)
		}
	}
}

// TestIsPermanentOnTheServer: the errors the server really returns for a
// key that is not UTF-8 written to a text column (22021, which used to be
// retried 8 times, about 6 s per record, before it was dead-lettered as
// handler_error) and for a key too large for its index (54000) are
// permanent and not sink failures.
func TestIsPermanentOnTheServer(t *testing.T) {
	dsn := testpg.DSN(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE accounts (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 8000)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	var s *Sink
	for _, tc := range []struct {
		name, code string
		key        string
	}{
		{"a binary key", "22021", string([]byte{'a', 0xff, 0xfe, 'b'})},
		{"a key too large for its index", "54000", hex.EncodeToString(big)},
	} {
		_, err := conn.Exec(ctx, `INSERT INTO accounts (id) VALUES ($1)`, tc.key)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != tc.code {
			t.Fatalf("%s: the server returned %v, want SQLSTATE %s", tc.name, err, tc.code)
		}
		wrapped := fmt.Errorf("ledger: open account: %w", err)
		if !s.IsPermanent(wrapped) || s.IsSinkFailure(wrapped) {
			t.Errorf("%s (%v): IsPermanent %v, IsSinkFailure %v; want permanent, not a sink failure",
				tc.name, err, s.IsPermanent(wrapped), s.IsSinkFailure(wrapped))
		}
	}
}

// TestEffectErrorTxHealthy: an effect error that came from the sink's
// transaction (a statement the server refused, which aborts a PostgreSQL
// transaction) is not reported sound, on the plain path and on a lane, so
// the consumer asks the classifier about it; one the handler made on its
// own in a sound transaction is (sinktest's EffectErrorTxHealthy).
func TestEffectErrorTxHealthy(t *testing.T) {
	t.Parallel()
	s := openSink(t, newTestSchema(t), nil)
	ctx := t.Context()
	tok := tokenOf(testScope(t), 1, "m")
	mustClaim(t, s, tok)
	divide := func(ctx context.Context, tx pgx.Tx, _ int) error {
		_, err := tx.Exec(ctx, `SELECT 1 / 0`)
		return err
	}
	_, err := s.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, divide)
	var ee *sink.EffectError
	if !errors.As(err, &ee) || ee.TxHealthy {
		t.Fatalf("Apply whose statement failed: %v (%+v), want an EffectError not TxHealthy", err, ee)
	}
	lane := tokenOf(testScope(t), 1, "m")
	if _, err := s.Claim(ctx, lane, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Apply(ctx, lane, sink.Batch{Offsets: []int64{0}, From: []int64{0}}, divide)
	if !errors.As(err, &ee) || ee.TxHealthy {
		t.Fatalf("a lane's Apply whose statement failed: %v (%+v), want an EffectError not TxHealthy", err, ee)
	}
	own := errors.New("insufficient funds")
	_, err = s.Apply(ctx, lane, sink.Batch{Offsets: []int64{0}, From: []int64{0}}, func(context.Context, pgx.Tx, int) error { return own })
	if !errors.As(err, &ee) || !ee.TxHealthy || !errors.Is(err, own) {
		t.Fatalf("a lane's Apply whose handler failed on its own before any statement: %v (%+v), want an EffectError TxHealthy", err, ee)
	}
}
