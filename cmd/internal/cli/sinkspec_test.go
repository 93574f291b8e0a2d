package cli

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/sqlite"
)

func TestParseSinkSpec(t *testing.T) {
	for in, want := range map[string]sinkSpec{
		"sqlite:./w.db":                          {kind: "sqlite", path: "./w.db"},
		"sqlite:/var/lib/w r.db":                 {kind: "sqlite", path: "/var/lib/w r.db"},
		"SQLite:w.db":                            {kind: "sqlite", path: "w.db"},
		" sqlite3:w.db ":                         {kind: "sqlite", path: "w.db"},
		"postgres://u@h:5432/db":                 {kind: "postgres", dsn: "postgres://u@h:5432/db"},
		"postgresql://u:pw@h/db?sslmode=disable": {kind: "postgres", dsn: "postgresql://u:pw@h/db?sslmode=disable"},
	} {
		got, err := parseSinkSpec(in)
		if err != nil || got != want {
			t.Errorf("parseSinkSpec(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                               "--sink is empty",
		"   ":                            "--sink is empty",
		"sqlite:":                        `empty path after "sqlite:"`,
		"sqlite:file:x.db?mode=ro":       "not a file: URI",
		"/tmp/w.db":                      "has no kind",
		":w.db":                          "has no kind",
		"mongodb://localhost:27017":      `unknown sink kind "mongodb"`,
		"mysql://u:secret@h/db":          `unknown sink kind "mysql"`,
		"postgres://u:secret@h:port/db":  "not a valid PostgreSQL connection string",
		"postgres://u:secret@h/db?x=%zz": "not a valid PostgreSQL connection string",
	} {
		_, err := parseSinkSpec(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseSinkSpec(%q): %v, want an error containing %q", in, err, want)
			continue
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "\n") {
			t.Errorf("parseSinkSpec(%q): error %q repeats the password or spans lines", in, err)
		}
	}
}

func TestSinkSpecStringHidesPassword(t *testing.T) {
	spec, err := parseSinkSpec("postgres://alice:secret@db.example:6543/ledger")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := spec.String(), "postgres://alice@db.example:6543/ledger"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	// The schema is part of which sink it is: the worker's banner and
	// status name it (they used to leave it out).
	spec, err = parseSinkSpec("postgres://alice:secret@db.example:6543/ledger?sslmode=disable&search_path=billing")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := spec.String(), "postgres://alice@db.example:6543/ledger?search_path=billing"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got := (sinkSpec{kind: "sqlite", path: "a.db"}).String(); got != "sqlite:a.db" {
		t.Fatalf("String() = %q", got)
	}
}

func TestOpenAdminSQLite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	// A missing file is an error, and is not created.
	missing := filepath.Join(dir, "missing.db")
	if _, _, err := openAdmin(ctx, sinkSpec{kind: "sqlite", path: missing}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("openAdmin(missing): %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("openAdmin created %s: %v", missing, err)
	}
	if _, _, err := openAdmin(ctx, sinkSpec{kind: "sqlite", path: dir}); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("openAdmin(dir): %v", err)
	}
	notDB := filepath.Join(dir, "not.db")
	if err := os.WriteFile(notDB, []byte("this is not an SQLite database, not even close, it is just text"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openAdmin(ctx, sinkSpec{kind: "sqlite", path: notDB}); err == nil {
		t.Fatalf("openAdmin(text file) succeeded")
	}

	// A sink a worker claimed in: Lister, Resetter and History work.
	path := filepath.Join(dir, "w.db")
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 2, Epoch: 7, Member: "m"}
	if _, err := s.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	a, closeSink, err := openAdmin(ctx, sinkSpec{kind: "sqlite", path: path})
	if err != nil {
		t.Fatalf("openAdmin: %v", err)
	}
	defer closeSink()
	fences, err := a.Fences(ctx)
	if err != nil || len(fences) != 1 || fences[0].Holder != tok {
		t.Fatalf("Fences = %+v, %v", fences, err)
	}
	if _, err := a.ResetFence(ctx, fenceadmin.ResetRequest{Scope: tok.Scope(), Expect: fences[0], Reason: "test"}); err != nil {
		t.Fatalf("ResetFence: %v", err)
	}
	if _, err := a.ResetFence(ctx, fenceadmin.ResetRequest{Scope: epochs.Scope{Group: "g", Topic: "t", Partition: 9}, Reason: "test"}); !errors.Is(err, sink.ErrNotFound) {
		t.Fatalf("ResetFence(unknown): %v, want sink.ErrNotFound", err)
	}
	hs, err := a.History(ctx, tok.Scope())
	if err != nil || len(hs) != 2 {
		t.Fatalf("History = %+v, %v", hs, err)
	}
	if hs[0].Kind != "claim" || hs[0].Token != tok || hs[1].Kind != "reset" || hs[1].Reason != "test" ||
		hs[1].Token != tok || hs[1].Seq <= hs[0].Seq || hs[1].At.IsZero() {
		t.Fatalf("History = %+v", hs)
	}
}

func TestFilterFences(t *testing.T) {
	fs := []sink.Fence{
		{Scope: epochs.Scope{Group: "a", Topic: "x"}},
		{Scope: epochs.Scope{Group: "a", Topic: "y"}},
		{Scope: epochs.Scope{Group: "b", Topic: "x"}},
	}
	for _, tc := range []struct {
		group, topic string
		want         int
	}{{"", "", 3}, {"a", "", 2}, {"", "x", 2}, {"a", "x", 1}, {"c", "", 0}} {
		if got := filterFences(fs, tc.group, tc.topic); len(got) != tc.want {
			t.Errorf("filterFences(%q, %q) = %d fences, want %d", tc.group, tc.topic, len(got), tc.want)
		}
	}
}
