package postgres

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/workrouter/workrouter/internal/testpg"
)

// clearPGEnv unsets the libpq variables that could supply a host, user or
// database, for the duration of the test.
func clearPGEnv(t *testing.T) {
	for _, name := range []string{"PGHOST", "PGUSER", "PGDATABASE", "PGSERVICE"} {
		t.Setenv(name, "")
	}
}

// TestOpenRefusesAnIncompleteDSN: a DSN that does not name its host, user
// or database is refused before anything connects (postgres:// alone
// used to reach the local socket as the operating system's user and
// create the sink's tables in a database named after it), in the URL and
// the keyword/value form, without repeating a password.
func TestOpenRefusesAnIncompleteDSN(t *testing.T) {
	clearPGEnv(t)
	for _, tc := range []struct {
		dsn  string
		want []string
	}{
		{"postgres://", []string{"no host", "no user", "no database"}},
		{"postgresql://", []string{"no host"}},
		{"postgres://127.0.0.1:5432/test", []string{"no user"}},
		{"postgres://postgres:hunter2@127.0.0.1:5432", []string{"no database"}},
		{"postgres://postgres:hunter2@:5432/test", []string{"no host"}},
		{"postgres:///test?user=postgres", []string{"no host"}},
		{"host=127.0.0.1 user=postgres password='hunter2'", []string{"no database"}},
		{"dbname=test", []string{"no host", "no user"}},
	} {
		s, err := Open(t.Context(), Config{DSN: tc.dsn})
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", tc.dsn)
			continue
		}
		if !errors.Is(err, ErrConfig) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): %v, want ErrConfig without the password", tc.dsn, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%q): %q does not say %q", tc.dsn, err, w)
			}
		}
	}
}

// TestOpenCompleteDSNs: the host, user and database given in either form,
// as query parameters, or by the libpq environment are accepted.
func TestOpenCompleteDSNs(t *testing.T) {
	clearPGEnv(t)
	for _, dsn := range []string{
		"postgres://postgres@127.0.0.1:5432/test",
		"postgres:///test?host=127.0.0.1&user=postgres",
		"postgres://[::1]/x?host=127.0.0.1&user=postgres&dbname=test",
		"host=127.0.0.1 user=postgres dbname=test",
		"host='127.0.0.1' port=5432 user = postgres dbname='te\\st'",
	} {
		p := dsnGiven(dsn)
		if !p.host || !p.user || !p.database {
			t.Errorf("dsnGiven(%q) = %+v", dsn, p)
		}
		if err := checkDSN(dsn); err != nil {
			t.Errorf("checkDSN(%q): %v", dsn, err)
		}
	}
	if err := checkDSN("service=ledger"); err != nil {
		t.Errorf("checkDSN(service=ledger): %v", err)
	}
	t.Setenv("PGHOST", "127.0.0.1")
	t.Setenv("PGUSER", "postgres")
	t.Setenv("PGDATABASE", "test")
	testpg.DSN(t) // the server answers
	// Read-only, to create nothing: the public schema may hold no sink.
	s, err := Open(t.Context(), Config{DSN: "postgres://", ReadOnly: true})
	if err == nil {
		s.Close()
	} else if !errors.Is(err, ErrNoSchema) && !errors.Is(err, ErrSchema) {
		// No sink in the public schema, or one of another version that a
		// read-only open leaves alone: either way the DSN was accepted
		// and the server answered.
		t.Fatalf("Open(postgres://) with PGHOST, PGUSER and PGDATABASE: %v", err)
	}
}

// TestOpenSaysTheServerRefused: a server that answered that the database
// or the role does not exist, or that it knows no parameter the DSN sets,
// is not "unreachable": Open fails with ErrRefused, quoting the answer
// once.
func TestOpenSaysTheServerRefused(t *testing.T) {
	dsn := testpg.DSN(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("postgres://%%s@%s:%d/%%s", cfg.Host, cfg.Port)
	for _, tc := range []struct {
		dsn, code, says string
	}{
		{fmt.Sprintf(base, cfg.User, "wr_nosuchdb"), "3D000", `database "wr_nosuchdb" does not exist`},
		{fmt.Sprintf(base, "wr_nosuchrole", cfg.Database), "28000", `role "wr_nosuchrole" does not exist`},
		{fmt.Sprintf(base, cfg.User, cfg.Database) + "?foo=bar", "42704", `unrecognized configuration parameter "foo"`},
	} {
		s, err := Open(t.Context(), Config{DSN: tc.dsn, ReadOnly: true})
		if err == nil {
			s.Close()
			t.Fatalf("Open(%s) succeeded", tc.dsn)
		}
		var pgErr *pgconn.PgError
		if !errors.Is(err, ErrRefused) || errors.Is(err, ErrUnreachable) || !errors.As(err, &pgErr) || pgErr.Code != tc.code {
			t.Errorf("Open(%s): %v, want ErrRefused (not ErrUnreachable) with SQLSTATE %s", tc.dsn, err, tc.code)
		}
		if msg := err.Error(); strings.Count(msg, tc.says) != 1 || strings.Contains(msg, "unreachable") {
			t.Errorf("Open(%s): %q does not say %q once, or says unreachable", tc.dsn, msg, tc.says)
		}
	}
}
