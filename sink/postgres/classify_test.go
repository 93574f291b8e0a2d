package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/workrouter/workrouter/sink"
)

// TestIsSinkFailure: failures of the database are told from a handler's
// own errors without a server (the classifier looks at the error only).
func TestIsSinkFailure(t *testing.T) {
	var s *Sink
	var c sink.ErrorClassifier = s
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
