package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/redisstore"
	"github.com/workrouter/workrouter/fencehttp/sqlstore"
	"github.com/workrouter/workrouter/internal/testredis"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/sqlite"
)

var (
	rrPrev   = epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 50, Member: "previous"}
	rrHolder = epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "current"}
)

// recreatedSink creates an SQLite sink file where the group's previous
// incarnation held g/t/0 at epoch 50, an operator reset the fence, and
// the new incarnation's member claimed it at epoch 1 (with a proof); and
// g/t/1, claimed at epoch 3 and never reset.
func recreatedSink(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sink.db")
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Claim(ctx, rrPrev, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, epochs.Token{Group: "g", Topic: "t", Partition: 1, Epoch: 3, Member: "current"}, sink.Observed{}); err != nil {
		t.Fatal(err)
	}
	fs, err := s.Fences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Scope != rrPrev.Scope() {
			continue
		}
		if _, err := s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: f.Scope, Expect: f, Reason: "group recreated"}); err != nil {
			t.Fatal(err)
		}
	}
	fs, _ = s.Fences(ctx)
	for _, f := range fs {
		if f.Scope == rrPrev.Scope() {
			if _, err := s.Claim(ctx, rrHolder, sink.Observed{Proof: &sink.Proof{Version: f.Version}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return path
}

// storeWith creates a sqlstore on SQLite at a new path whose scopes hold
// toks (a request of each, aborted: the token stays).
func storeWith(t *testing.T, toks ...epochs.Token) (string, *sqlstore.Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "service.db")
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := sqlstore.New(context.Background(), sqlstore.Config{DB: db, Dialect: sqlstore.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	seed(t, s, toks...)
	return path, s
}

func seed(t *testing.T, s fencehttp.Store, toks ...epochs.Token) {
	t.Helper()
	for _, tok := range toks {
		u, _, err := s.Begin(context.Background(), tok, "seed")
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Abort(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

var resourceExpectRE = regexp.MustCompile(`--yes --expect (\S+)`)

// TestFencesResetResource: the dry run shows the store's token, the
// sink's holder and the floor, changes nothing and prints the expect
// token; --yes with a wrong token is refused; with the right one the
// store's scope is pinned to the holder below floor 50 and audited; the
// scope that needs nothing (partition 1: the store admits its holder) is
// left alone; a second run has nothing to do.
func TestFencesResetResource(t *testing.T) {
	ctx := context.Background()
	sinkPath := recreatedSink(t)
	storePath, st := storeWith(t, rrPrev, epochs.Token{Group: "g", Topic: "t", Partition: 1, Epoch: 2, Member: "x"})
	args := func(more ...string) []string {
		return append([]string{"fences", "reset-resource", "--store", "sqlstore:sqlite:" + storePath, "--sink", "sqlite:" + sinkPath,
			"--group", "g", "--topic", "t", "--all", "--reason", "group recreated (INC-9)"}, more...)
	}
	out, _, err := runCLI(t, nil, args()...)
	if err == nil || !strings.Contains(err.Error(), "without --yes") {
		t.Fatalf("dry run: %v, want a refusal without --yes\n%s", err, out)
	}
	for _, want := range []string{"g/t/0", "token epoch 50 member previous", "holder epoch 1 member current", "pinned below floor 50",
		"g/t/1", "already admits"} {
		if !strings.Contains(out, want) {
			t.Fatalf("dry run output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("dry run:\n%s", out)
	m := resourceExpectRE.FindStringSubmatch(out)
	if m == nil || !strings.HasPrefix(m[1], "0=") || strings.Contains(m[1], ",") {
		t.Fatalf("dry run names no expect token for partition 0 alone:\n%s", out)
	}
	if s, _ := st.State(ctx, rrPrev.Scope()); s.Token != rrPrev || s.Floor != fencehttp.NoFloor {
		t.Fatalf("the dry run changed the store: %+v", s)
	}

	if _, _, err := runCLI(t, nil, args("--yes")...); err == nil || !strings.Contains(err.Error(), "--expect") {
		t.Fatalf("--yes without --expect: %v", err)
	}
	if _, _, err := runCLI(t, nil, args("--yes", "--expect", "0=00000000")...); err == nil || !strings.Contains(err.Error(), "run the dry run again") {
		t.Fatalf("--yes with a wrong expect token: %v", err)
	}
	if s, _ := st.State(ctx, rrPrev.Scope()); s.Token != rrPrev {
		t.Fatalf("a refused reset changed the store: %+v", s)
	}

	out, _, err = runCLI(t, nil, args("--yes", "--expect", m[1])...)
	if err != nil {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	if !strings.Contains(out, "reset g/t/0") || !strings.Contains(out, "not reset g/t/1: the store already admits") {
		t.Fatalf("reset output:\n%s", out)
	}
	if s, _ := st.State(ctx, rrPrev.Scope()); s.Token != rrHolder || s.Floor != 50 || !s.Pinned() {
		t.Fatalf("the store after the reset: %+v, want the holder pinned below 50", s)
	}
	rr, err := st.Resets(ctx, rrPrev.Scope())
	if err != nil || len(rr) != 1 || rr[0].Reason != "group recreated (INC-9)" || !strings.Contains(rr[0].Detail, `"floor":50`) {
		t.Fatalf("the store's audit: %+v, %v", rr, err)
	}
	if _, _, err := st.Begin(ctx, rrPrev, "late"); !errors.Is(err, fencehttp.ErrFenced) {
		t.Fatalf("the previous incarnation after the reset: %v, want refused", err)
	}

	out, _, err = runCLI(t, nil, args("--json")...)
	if err == nil || !strings.Contains(err.Error(), "nothing to reset") {
		t.Fatalf("dry run after the reset: %v\n%s", err, out)
	}
	var rows []resourcePlanJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	for _, r := range rows {
		if r.Refusal == "" || r.Done {
			t.Fatalf("--json row after the reset: %+v, want refused (the store admits the holder)", r)
		}
	}
}

// TestFencesResetResourceRedis: the same reset on a redisstore.
func TestFencesResetResourceRedis(t *testing.T) {
	u := testredis.URL(t)
	opt, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	prefix := testredis.Prefix()
	st, err := redisstore.New(redisstore.Config{Client: rdb, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Drop(context.Background())
	seed(t, st, rrPrev)
	args := []string{"fences", "reset-resource", "--store", "redisstore:" + u, "--store-prefix", prefix, "--sink", "sqlite:" + recreatedSink(t),
		"--group", "g", "--topic", "t", "--partition", "0", "--reason", "INC-10"}
	out, _, err := runCLI(t, nil, args...)
	m := resourceExpectRE.FindStringSubmatch(out)
	if err == nil || m == nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if out, _, err := runCLI(t, nil, append(args, "--yes", "--expect", strings.TrimPrefix(m[1], "0="))...); err != nil {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	if s, err := st.State(context.Background(), rrPrev.Scope()); err != nil || s.Token != rrHolder || s.Floor != 50 {
		t.Fatalf("the store after the reset: %+v %v", s, err)
	}
}

// TestFencesResetResourceErrors: flags checked before anything is
// opened, no file created at a mistyped path, no password printed, a
// database without the store's tables named as such.
func TestFencesResetResourceErrors(t *testing.T) {
	sinkPath := recreatedSink(t)
	missing := filepath.Join(t.TempDir(), "typo.db")
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"fences", "reset-resource", "--sink", "sqlite:" + sinkPath, "--group", "g", "--topic", "t", "--partition", "0", "--reason", "r"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no store", base, "--store is required"},
		{"unknown kind", append(base, "--store", "lockstore:x"), "--store: want sqlstore:"},
		{"sqlstore on redis", append(base, "--store", "sqlstore:redis://127.0.0.1:6379"), "sqlstore lives in SQLite or PostgreSQL"},
		{"missing file", append(base, "--store", "sqlstore:sqlite:"+missing), "no such file"},
		{"not a store", append(base, "--store", "sqlstore:sqlite:"+empty), "no token store with --store-prefix"},
		{"bad prefix", append(base, "--store", "sqlstore:sqlite:"+empty, "--store-prefix", "1; DROP"), "--store-prefix"},
		{"postgres password", append(base, "--store", "sqlstore:postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=2"), "sqlstore: connecting"},
		{"redis password", append(base, "--store", "redisstore:redis://:s3cret@127.0.0.1:1/0"), "connection refused"},
		{"no reason", append(slices.Clone(base[:len(base)-2]), "--store", "sqlstore:sqlite:"+empty), "--reason is required"},
	} {
		out, _, err := runCLI(t, nil, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
			continue
		}
		t.Logf("%s: %v", c.name, err)
		if strings.Contains(err.Error()+out, "s3cret") {
			t.Errorf("%s: the password is printed: %v\n%s", c.name, err, out)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a mistyped --store path was created: %v", err)
	}
}
