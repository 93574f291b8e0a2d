package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// dirState is a directory's file names and every file's bytes.
type dirState map[string][]byte

func snapshot(t *testing.T, dir string) dirState {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := dirState{}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func (d dirState) names() []string {
	var n []string
	for k := range d {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// sameFiles fails unless after has the same files as before and the named
// ones byte for byte.
func sameFiles(t *testing.T, before, after dirState, exact ...string) {
	t.Helper()
	if !slices.Equal(before.names(), after.names()) {
		t.Fatalf("files before %v, after %v", before.names(), after.names())
	}
	for _, name := range exact {
		if !bytes.Equal(before[name], after[name]) {
			t.Fatalf("%s changed (%d bytes before, %d after)", name, len(before[name]), len(after[name]))
		}
	}
}

func openRO(t *testing.T, path string) (*sqlite.Sink, error) {
	t.Helper()
	return sqlite.Open(context.Background(), sqlite.Config{Path: path, ReadOnly: true})
}

// TestReadOnlyLeavesAClosedDatabaseAsItWas: a sink no process has open
// (no -wal file) is read without creating a -wal or -shm file, and its file
// is byte for byte the same afterwards.
func TestReadOnlyLeavesAClosedDatabaseAsItWas(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "sink.db")
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 1, Epoch: 3, Member: "m"}
	w := openAt(t, path)
	if _, err := w.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	if !slices.Equal(before.names(), []string{"sink.db"}) {
		t.Fatalf("after the writer closed: %v, want only sink.db", before.names())
	}

	r, err := openRO(t, path)
	if err != nil {
		t.Fatalf("read-only Open: %v", err)
	}
	fs, err := r.Fences(ctx)
	if err != nil || len(fs) != 1 || fs[0].Holder != tok {
		t.Fatalf("Fences = %+v, %v", fs, err)
	}
	hs, err := r.History(ctx, tok.Scope())
	if err != nil || len(hs) != 1 || hs[0].Kind != "claim" {
		t.Fatalf("History = %+v, %v", hs, err)
	}
	if _, err := r.Claim(ctx, tok, sink.Observed{}); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Fatalf("Claim on a read-only sink: %v, want ErrReadOnly", err)
	}
	if _, err := r.ResetFence(ctx, fenceadmin.ResetRequest{Scope: tok.Scope(), Reason: "why"}); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Fatalf("ResetFence on a read-only sink: %v, want ErrReadOnly", err)
	}
	if _, err := r.DeadLetter(ctx, tok, sink.DeadRecord{Offset: 0, Reason: "r", Error: "e"}); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Fatalf("DeadLetter: %v, want ErrReadOnly", err)
	}
	if _, err := r.ResolveDeadLetter(ctx, 1, dlq.Open, dlq.Dropped, "why", ""); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Fatalf("ResolveDeadLetter: %v, want ErrReadOnly", err)
	}
	noop := func(context.Context, *sqlite.Tx, int) error { return nil }
	if _, err := r.Apply(ctx, tok, sink.Batch{Offsets: []int64{0}}, noop); !errors.Is(err, sqlite.ErrReadOnly) || errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Apply on a read-only sink: %v, want ErrReadOnly (and not fenced)", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	sameFiles(t, before, snapshot(t, dir), "sink.db")
}

// TestReadOnlySeesALiveWriter: while a writer has the database open (its
// -wal and -shm exist), a read-only sink reads through them and sees the
// writer's latest commit; the set of files stays the same.
func TestReadOnlySeesALiveWriter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "sink.db")
	w := openAt(t, path)
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	if _, err := w.Claim(ctx, tok, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	if !slices.Contains(before.names(), "sink.db-wal") {
		t.Fatalf("the writer has no -wal file: %v", before.names())
	}
	r, err := openRO(t, path)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := r.Fences(ctx)
	if err != nil || len(fs) != 1 || fs[0].Holder != tok {
		t.Fatalf("Fences = %+v, %v", fs, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, before, snapshot(t, dir), "sink.db")
}

// TestReadOnlyDoesNotTouchAnotherDatabase: a read-only Open of an SQLite
// file that is not a sink reports ErrNoSchema and changes nothing: no
// table is created and the journal mode is not switched to WAL.
func TestReadOnlyDoesNotTouchAnotherDatabase(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('hello')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := snapshot(t, dir)
	_, err = openRO(t, path)
	if !errors.Is(err, sqlite.ErrNoSchema) {
		t.Fatalf("read-only Open of another application's database: %v, want ErrNoSchema", err)
	}
	sameFiles(t, before, snapshot(t, dir), "app.db")
	if h := before["app.db"]; h[18] != 1 || h[19] != 1 {
		t.Fatalf("the database was not in rollback-journal mode to begin with: %v", h[18:20])
	}

	// An empty file is an empty database: no schema either.
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, dir)
	if _, err := openRO(t, empty); !errors.Is(err, sqlite.ErrNoSchema) {
		t.Fatalf("read-only Open of an empty file: %v, want ErrNoSchema", err)
	}
	sameFiles(t, before, snapshot(t, dir), "empty.db", "app.db")

	// A missing file is not created.
	missing := filepath.Join(dir, "missing.db")
	if _, err := openRO(t, missing); !errors.Is(err, sqlite.ErrConfig) {
		t.Fatalf("read-only Open of a missing file: %v, want ErrConfig", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a read-only Open created %s", missing)
	}
}

// TestReadOnlyReportsAConcurrentCheckpoint: a read-only sink that reads a
// closed database without locks reports, on Close, that another process
// changed the file meanwhile (here: a writer that opened, wrote and closed,
// which checkpoints into the file).
func TestReadOnlyReportsAConcurrentCheckpoint(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sink.db")
	w := openAt(t, path)
	w.Close()
	r, err := openRO(t, path)
	if err != nil {
		t.Fatal(err)
	}
	w = openAt(t, path)
	if _, err := w.Claim(ctx, epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := r.Close(); !errors.Is(err, sqlite.ErrChangedDuringRead) {
		t.Fatalf("Close after a concurrent checkpoint: %v, want ErrChangedDuringRead", err)
	}
}
