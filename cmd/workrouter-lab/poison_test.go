package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/invariants"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
)

// The process-level tests of poison records (docs/design.md#hazard-9):
// harness and product worker processes of this binary, an embedded broker,
// a foreign producer (a plain kgo client, not the router) writing records
// workrouter's router never writes, and the dlq commands reading and
// resolving what the sink stored.

// foreignProducer produces records as a non-workrouter client would:
// explicit partitions, any key, any headers.
func foreignProducer(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceRaw produces recs and returns where each landed.
func produceRaw(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// typeHeader is a workrouter-type header.
func typeHeader(typ string) kgo.RecordHeader {
	return kgo.RecordHeader{Key: envelope.TypeHeader, Value: []byte(typ)}
}

// dlqRows runs `dlq list --json` on spec in process and returns its rows.
func dlqRows(t *testing.T, spec string) []dlqJSON {
	t.Helper()
	out, stderr, err := runCLI(t, nil, "dlq", "list", "--sink", spec, "--json", "--limit", "0")
	if err != nil {
		t.Fatalf("dlq list: %v (stderr %q)", err, stderr)
	}
	var rows []dlqJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("dlq list --json does not parse: %v\n%s", err, out)
	}
	return rows
}

// createTopic creates topic with partitions partitions on the broker.
func createTopic(t *testing.T, addr, topic string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(clitest.NewClient(t, addr))
	resp, err := adm.CreateTopic(t.Context(), partitions, 1, nil, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("creating topic %s: %v / %v", topic, err, resp.Err)
	}
}

// poisonRecord is a record of the foreign producer that must be
// dead-lettered, with the reason it must get.
type poisonRecord struct {
	what   string
	rec    *kgo.Record
	reason string
}

// TestPoisonRecordsDeadLettered (hazard 9), the acceptance test of issue
// 12: a foreign producer writes poison records on all four partitions —
// bytes that are not a workrouter envelope, a null key, two type headers,
// a type without a handler (--on-no-handler dead-letter), ledger commands
// the handler refuses for good (malformed payloads), a command whose
// handler panics — between good ledger commands produced before and after
// them. Every good command is applied exactly once (F/L/O/X/V from the
// sink's records), every poison record has exactly one dead-letter row
// with its reason and nothing else was skipped (D), the worker survived
// the panics, and every dead letter was mirrored to the DLQ topic with
// its headers.
func TestPoisonRecordsDeadLettered(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorld(t, b)
		const dlqTopic = "ledger.dlq"
		createTopic(t, w.brk.Addr(), dlqTopic, 1)
		w.produce(300)

		raw := foreignProducer(t, w.brk.Addr())
		deposit := func(p int32, key []byte, payload string, headers ...kgo.RecordHeader) *kgo.Record {
			return &kgo.Record{Topic: w.topic, Partition: p, Key: key, Value: []byte(payload), Headers: headers}
		}
		poison := []poisonRecord{
			{"non-envelope bytes", deposit(0, []byte("kcat-1"), "\x00\x01 this is not a workrouter command"), consumer.ReasonUndecodable},
			{"a malformed deposit", deposit(0, []byte("poison-a"), `{"id":"bad-1","seq":0,"amount":-5}`, typeHeader(ledger.TypeDeposit)), consumer.ReasonPermanent},
			{"a null key", deposit(1, nil, `{"id":"bad-2","seq":0,"amount":5}`, typeHeader(ledger.TypeDeposit)), consumer.ReasonUndecodable},
			{"two type headers", deposit(1, []byte("poison-b"), `{"id":"bad-3","seq":0,"amount":5}`,
				typeHeader(ledger.TypeDeposit), typeHeader(ledger.TypeWithdraw)), consumer.ReasonUndecodable},
			{"a type without a handler", deposit(2, []byte("poison-c"), `{"id":"bad-4","seq":0,"amount":5}`, typeHeader("transfer")), consumer.ReasonNoHandler},
			{"a withdrawal that is not JSON", deposit(2, []byte("poison-d"), `not json`, typeHeader(ledger.TypeWithdraw)), consumer.ReasonPermanent},
			{"a command whose handler panics", deposit(3, []byte("poison-e"), `{}`, typeHeader("boom")), consumer.ReasonHandlerError},
		}
		for _, p := range poison {
			produceRaw(t, raw, p.rec)
			w.poison = append(w.poison, cluster.PoisonRecord{Partition: p.rec.Partition, Offset: p.rec.Offset})
		}
		w.produce(300)

		a := w.start("a", "--on-no-handler=dead-letter", "--max-attempts=2", "--dlq-topic="+dlqTopic, "--panic-type=boom")
		testwait.For(t, 90*time.Second, fmt.Sprintf("%d dead letters", len(poison)), func() bool {
			return a.Count(consumer.KindDeadLettered) >= len(poison)
		})
		w.waitAllApplied(90 * time.Second)
		w.check() // F, L, O, X, V for the good commands

		// D: every poison record has exactly one dead-letter row, and no
		// other record has one.
		rows := dlqRows(t, b.store.Spec())
		var in invariants.Input
		for id, ack := range w.prod.Acked() {
			in.Acked = append(in.Acked, invariants.Acked{ID: id, Partition: ack.Partition, Offset: ack.Offset})
		}
		at := func(p int32, o int64) string { return fmt.Sprintf("record %d@%d", p, o) }
		want := map[string]poisonRecord{}
		for _, p := range poison {
			want[at(p.rec.Partition, p.rec.Offset)] = p
			in.Acked = append(in.Acked, invariants.Acked{ID: at(p.rec.Partition, p.rec.Offset), Partition: p.rec.Partition, Offset: p.rec.Offset, Poison: true})
		}
		for _, r := range rows {
			in.DeadLetters = append(in.DeadLetters, invariants.DeadLetter{ID: at(r.Partition, r.Offset), Partition: r.Partition, Offset: r.Offset})
		}
		postings, err := b.store.Postings(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range postings {
			in.Writes = append(in.Writes, invariants.Write{Partition: p.Partition, Offset: p.Offset, Epoch: p.Epoch, Member: p.Member, ID: p.ID, Key: p.Account, Seq: int64(p.Seq)})
		}
		rep := invariants.Check(in)
		if rep.D != 0 || rep.L != 0 || rep.X != 0 {
			t.Fatalf("D/L/X violated: %+v\n%v", rep.Violations, rep.Findings)
		}
		if len(rows) != len(poison) {
			t.Fatalf("%d dead letters, want %d: %+v", len(rows), len(poison), rows)
		}
		for _, r := range rows {
			p := want[at(r.Partition, r.Offset)]
			if r.Reason != p.reason || r.State != "open" || r.Group != w.group || r.Topic != w.topic {
				t.Errorf("dead letter of %s: %+v, want reason %s, open", p.what, r, p.reason)
			}
			if p.reason == consumer.ReasonHandlerError && (r.Attempts != 2 || !strings.Contains(r.Error, "handler panicked")) {
				t.Errorf("dead letter of %s: attempts %d, error %q; want 2 attempts of a recovered panic", p.what, r.Attempts, r.Error)
			}
		}
		t.Logf("%d postings, %d dead letters", len(postings), len(rows))
		if a.Exited() || len(a.Errors()) > 0 {
			t.Fatalf("the worker did not survive its handler's panics: exited %v, errors %v", a.Exited(), a.Errors())
		}

		// The DLQ topic mirrors every dead letter (at least once), keyed
		// like the original, with headers naming where it came from.
		mirrored := map[string]*kgo.Record{}
		cl := clitest.NewClient(t, w.brk.Addr(), kgo.ConsumeTopics(dlqTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		for len(mirrored) < len(poison) {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("%d of %d dead letters mirrored to %s", len(mirrored), len(poison), dlqTopic)
			}
			fs.EachRecord(func(r *kgo.Record) {
				h := map[string]string{}
				for _, kv := range r.Headers {
					h[kv.Key] = string(kv.Value)
				}
				p, _ := strconv.Atoi(h[consumer.DLQHeaderOriginalPartition])
				o, _ := strconv.ParseInt(h[consumer.DLQHeaderOriginalOffset], 10, 64)
				orig, ok := want[at(int32(p), o)]
				if !ok || h[consumer.DLQHeaderOriginalTopic] != w.topic || h[consumer.DLQHeaderGroup] != w.group ||
					h[consumer.DLQHeaderReason] != orig.reason || h[consumer.DLQHeaderID] == "" || string(r.Key) != string(orig.rec.Key) {
					t.Errorf("mirrored record %q headers %v does not match a dead letter", r.Key, h)
					return
				}
				mirrored[at(int32(p), o)] = r
			})
		}
	})
}

// freeze installs a database trigger that makes every posting of account
// fail — standing in for a defect of the handler's environment (a bad
// migration, say) — and returns the fix, which drops it.
func freeze(t *testing.T, b *procBackend, account string) (fix func()) {
	t.Helper()
	ctx := t.Context()
	if b.admin == nil {
		path := strings.TrimPrefix(b.store.Spec(), "sqlite:")
		// The workers write all along: the trigger's DDL waits for
		// their transactions (busy_timeout) instead of failing with
		// SQLITE_BUSY.
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TRIGGER frozen BEFORE INSERT ON ledger_postings
			WHEN NEW.account = '%s' BEGIN SELECT RAISE(ABORT, 'account %s is frozen'); END`, account, account)); err != nil {
			t.Fatal(err)
		}
		return func() {
			if _, err := db.ExecContext(context.Background(), `DROP TRIGGER frozen`); err != nil {
				t.Fatal(err)
			}
		}
	}
	pc, err := pgx.ParseConfig(b.store.Spec())
	if err != nil {
		t.Fatal(err)
	}
	schema := pgx.Identifier{pc.RuntimeParams["search_path"]}.Sanitize()
	for _, stmt := range []string{
		`CREATE FUNCTION ` + schema + `.frozen() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.account = '` + account + `' THEN RAISE EXCEPTION 'account % is frozen', NEW.account; END IF; RETURN NEW; END $$`,
		`CREATE TRIGGER frozen BEFORE INSERT ON ` + schema + `.ledger_postings FOR EACH ROW EXECUTE FUNCTION ` + schema + `.frozen()`,
	} {
		if _, err := b.admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		if _, err := b.admin.Exec(context.Background(), `DROP TRIGGER frozen ON `+schema+`.ledger_postings`); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDLQRedriveAfterFix: a ledger deposit fails in its handler (a
// database trigger refuses its posting) while the sink is healthy, so it
// is dead-lettered after --max-attempts; the defect is fixed (the trigger
// dropped) and `dlq redrive` produces it again as a new command, which the
// worker applies exactly once. A second redrive of it is refused; a
// redrive or drop of an unknown ID is one line of error and sends
// nothing; `dlq drop` of a malformed command writes its audit row. The
// invariants hold for every other command throughout.
func TestDLQRedriveAfterFix(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorld(t, b)
		fix := freeze(t, b, "frozen-1")
		a := w.start("a", "--max-attempts=2")
		testwait.For(t, 30*time.Second, "a to claim every partition", func() bool { return len(a.Owned()) == procPartitions })
		w.produce(200)
		rt, err := router.New(t.Context(), router.Config{Brokers: []string{w.brk.Addr()}, Topic: w.topic})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		frozen := ledger.Deposit("frozen-1", "frozen-cmd", 0, 500)
		for _, cmd := range []router.Command{frozen, {Key: []byte("typo-1"), Type: ledger.TypeDeposit, Payload: []byte(`{"id":"typo","amount":5`)}} {
			res, err := rt.Send(t.Context(), cmd)
			if err != nil {
				t.Fatal(err)
			}
			w.poison = append(w.poison, cluster.PoisonRecord{Partition: res.Partition, Offset: res.Offset})
		}
		w.produce(200)
		testwait.For(t, 60*time.Second, "2 dead letters", func() bool { return a.Count(consumer.KindDeadLettered) >= 2 })
		w.waitAllApplied(60 * time.Second)

		rows := dlqRows(t, b.store.Spec())
		if len(rows) != 2 {
			t.Fatalf("%d dead letters, want 2: %+v", len(rows), rows)
		}
		var frozenID, typoID int64
		for _, r := range rows {
			switch {
			case r.Key != nil && r.Key.Text != nil && *r.Key.Text == "frozen-1":
				frozenID = r.ID
				if r.Reason != consumer.ReasonHandlerError || r.Attempts != 2 || !strings.Contains(r.Error, "frozen") {
					t.Fatalf("the frozen deposit's dead letter: %+v, want handler_error after 2 attempts", r)
				}
			case r.Key != nil && r.Key.Text != nil && *r.Key.Text == "typo-1":
				typoID = r.ID
				if r.Reason != consumer.ReasonPermanent || r.Attempts != 1 {
					t.Fatalf("the malformed deposit's dead letter: %+v, want permanent after 1 attempt", r)
				}
			}
		}
		if frozenID == 0 || typoID == 0 {
			t.Fatalf("dead letters %+v: want one of frozen-1 and one of typo-1", rows)
		}
		spec := b.store.Spec()
		ends := clitest.EndOffsetSum(t, w.brk.Addr(), w.topic)

		// Unknown IDs: one line of error each, nothing sent.
		for _, verb := range []string{"redrive", "drop"} {
			args := []string{"dlq", verb, "424242", "--sink", spec, "--reason", "x", "--yes"}
			if verb == "redrive" {
				args = append(args, "--brokers", w.brk.Addr())
			}
			p := clitest.Start(t, args)
			if code := p.Wait(t); code == 0 {
				t.Fatalf("dlq %s of an unknown id exited 0", verb)
			}
			stderr := p.Stderr.String()
			if !strings.HasPrefix(stderr, "workrouter-lab: dead letter 424242 does not exist") || strings.Count(stderr, "\n") != 1 {
				t.Errorf("dlq %s of an unknown id: stderr %q, want one line naming it", verb, stderr)
			}
		}

		fix()
		out, _, err := runCLI(t, nil, "dlq", "redrive", strconv.FormatInt(frozenID, 10), "--sink", spec, "--brokers", w.brk.Addr(),
			"--reason", "the frozen trigger was a bad migration; dropped", "--yes")
		if err != nil {
			t.Fatalf("dlq redrive: %v", err)
		}
		m := regexp.MustCompile(`produced to ledger partition (\d+) offset (\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("dlq redrive printed %q", out)
		}
		part, _ := strconv.Atoi(m[1])
		off, _ := strconv.ParseInt(m[2], 10, 64)
		testwait.For(t, 60*time.Second, "the redriven deposit to be applied", func() bool {
			n, err := b.store.Count(t.Context(), `SELECT count(*) FROM ledger_postings WHERE id = 'frozen-cmd'`)
			return err == nil && n > 0
		})
		n, err := b.store.Count(t.Context(), `SELECT count(*) FROM ledger_postings WHERE id = 'frozen-cmd' AND account = 'frozen-1' AND part = $1 AND off = $2`, part, off)
		if err != nil || n != 1 {
			t.Fatalf("postings of the redriven deposit at %d@%d: %d (%v), want exactly 1", part, off, n, err)
		}

		_, _, err = runCLI(t, nil, "dlq", "redrive", strconv.FormatInt(frozenID, 10), "--sink", spec, "--brokers", w.brk.Addr(), "--reason", "again", "--yes")
		if err == nil || !strings.Contains(err.Error(), "redriven at most once") {
			t.Fatalf("a second redrive: %v, want a refusal", err)
		}
		if got := clitest.EndOffsetSum(t, w.brk.Addr(), w.topic); got != ends+1 {
			t.Fatalf("the topic grew by %d records, want exactly the one redrive", got-ends)
		}

		out, _, err = runCLI(t, nil, "dlq", "drop", strconv.FormatInt(typoID, 10), "--sink", spec, "--reason", "a typo; the producer sent a corrected command", "--yes")
		if err != nil || !strings.Contains(out, "dropped dead letter") {
			t.Fatalf("dlq drop: %v\n%s", err, out)
		}
		out, _, err = runCLI(t, nil, "dlq", "show", strconv.FormatInt(typoID, 10), "--sink", spec)
		if err != nil || !strings.Contains(out, `open -> dropped  reason "a typo; the producer sent a corrected command"`) {
			t.Fatalf("dlq show after the drop: %v\n%s", err, out)
		}
		out, _, err = runCLI(t, nil, "dlq", "show", strconv.FormatInt(frozenID, 10), "--sink", spec)
		if err != nil || !strings.Contains(out, "redriving -> redriven") || !strings.Contains(out, fmt.Sprintf("produced to ledger partition %d offset %d", part, off)) {
			t.Fatalf("dlq show after the redrive: %v\n%s", err, out)
		}

		w.produce(100)
		w.waitAllApplied(60 * time.Second)
		w.check()
		if rows := dlqRows(t, spec); len(rows) != 2 {
			t.Fatalf("%d dead letters at the end, want the 2 (the redrive was not dead-lettered again): %+v", len(rows), rows)
		}
	})
}

// TestDatabaseOutageDeadLettersNothing: the database is unreachable for
// far longer than the retry budget (--max-attempts 2, --max-retry-time
// 100ms) while commands stream in; the worker retries every failure of the
// sink without limit, so afterwards every command is applied and nothing
// was dead-lettered.
func TestDatabaseOutageDeadLettersNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *procBackend) {
		w := newProcWorld(t, b)
		a := w.start("a", "--sqlite-busy-timeout=100ms", "--max-attempts=2", "--max-retry-time=100ms")
		testwait.For(t, 30*time.Second, "a to claim every partition", func() bool { return len(a.Owned()) == procPartitions })
		w.produce(300)
		w.waitAllApplied(60 * time.Second)
		stalls := a.Count(consumer.KindStalled)

		release := b.unreachable(t)
		down := time.Now()
		w.produce(300)
		// Several failed attempts per partition, over many budgets' time.
		if err := cluster.WaitUntil(t.Context(), 60*time.Second, "the worker to fail against the database",
			func() bool { return a.Count(consumer.KindStalled) >= stalls+3*procPartitions }); err != nil {
			release()
			t.Fatal(err)
		}
		time.Sleep(time.Until(down.Add(2 * time.Second)))
		release()
		w.waitAllApplied(120 * time.Second)
		w.check()
		if n := a.Count(consumer.KindDeadLettered); n != 0 {
			t.Fatalf("the outage dead-lettered %d records", n)
		}
		if rows := dlqRows(t, b.store.Spec()); len(rows) != 0 {
			t.Fatalf("dead letters after the outage: %+v", rows)
		}
	})
}

// readyz returns the status code of the worker's /readyz (0 if it does
// not answer).
func readyz(addr string) int {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// readyzBody returns the status code and body of the worker's /readyz
// (0 and "" if it does not answer).
func readyzBody(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// opsAddr returns the address of the ops endpoints that a process logged
// on stderr (--metrics-addr 127.0.0.1:0), failing t if it logged none.
func opsAddr(t *testing.T, stderr fmt.Stringer) string {
	t.Helper()
	m := regexp.MustCompile(`serving /metrics, /healthz and /readyz" addr=(\S+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no ops address logged:\n%s", stderr)
	}
	return m[1]
}

// metric returns the text of the worker's /metrics.
func metric(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestReadyzFailsWhileStalled: with --ready-max-stall, the product worker's
// /readyz answers 200 while its partitions run, 503 once a command of a
// type without a handler (--on-no-handler stall) has stalled its
// partition for longer than the threshold (the stalled gauge says so),
// and 200 again once a worker restarted with --on-no-handler dead-letter
// dead-letters it.
func TestReadyzFailsWhileStalled(t *testing.T) {
	brk, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{ledger.Topic: 2}, MinSessionTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { brk.Close() })
	spec := "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")
	start := func(noHandler string) (*clitest.Proc, string) {
		addr := clitest.FreeAddr(t)
		p := clitest.Start(t, []string{"worker", "--example", "ledger", "--brokers", brk.Addr(), "--sink", spec,
			"--session-timeout", "2s", "--heartbeat-interval", "200ms", "--metrics-addr", addr,
			"--ready-max-stall", "1s", "--on-no-handler", noHandler})
		testwait.For(t, 30*time.Second, "/readyz to answer 200", func() bool { return readyz(addr) == http.StatusOK })
		return p, addr
	}
	p, addr := start("stall")
	rt, err := router.New(t.Context(), router.Config{Brokers: []string{brk.Addr()}, Topic: ledger.Topic})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	res, err := rt.Send(t.Context(), router.Command{Key: []byte("acct-1"), Type: "transfer", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	stalled := regexp.MustCompile(fmt.Sprintf(`workrouter_consumer_partition_stalled\{[^}]*partition="%d"[^}]*\} 1`, res.Partition))
	var body string
	testwait.For(t, 30*time.Second, "/readyz to answer 503", func() bool {
		var code int
		code, body = readyzBody(addr)
		return code == http.StatusServiceUnavailable
	})
	if want := fmt.Sprintf("partition %d: stalled for ", res.Partition); !strings.Contains(body, want) || !strings.Contains(body, `no handler for command type "transfer"`) {
		t.Fatalf("/readyz body %q does not name the stalled partition (%q…) and its cause", body, want)
	}
	if !stalled.MatchString(metric(addr)) {
		t.Fatalf("/readyz answers 503 but partition %d's stalled gauge is not 1:\n%s", res.Partition, metric(addr))
	}
	// status reads the stall from the committed offset's metadata, which
	// the worker writes at every retry.
	var sp statusPartition
	testwait.For(t, 30*time.Second, "status --json to show the stall", func() bool {
		rep, err := statusJSON(t, "--brokers", brk.Addr(), "--group", "ledger-workers", "--topic", ledger.Topic, "--check-keys", "0")
		if err != nil {
			return false
		}
		for _, q := range rep.Partitions {
			if q.Partition == res.Partition {
				sp = q
			}
		}
		return sp.State == "stalled"
	})
	if sp.StateSince == nil || sp.StateAttempts < 1 || !strings.Contains(sp.StateError, `no handler for command type "transfer"`) {
		t.Fatalf("status --json of the stalled partition: %+v", sp)
	}
	// status exits 2 while a partition needs attention, naming it.
	st := clitest.Start(t, []string{"status", "--brokers", brk.Addr(), "--group", "ledger-workers", "--topic", ledger.Topic, "--check-keys", "0"})
	wantErr := fmt.Sprintf("workrouter-lab: partition %d needs attention (exit status 2)\n", res.Partition)
	if code := st.Wait(t); code != 2 || st.Stderr.String() != wantErr || !strings.Contains(st.Stdout.String(), "needs attention:") {
		t.Fatalf("status of a stalled partition: exit %d, stderr %q (want 2 and %q), stdout:\n%s", code, st.Stderr, wantErr, st.Stdout)
	}
	p.Interrupt(t)

	p, addr = start("dead-letter")
	testwait.For(t, 30*time.Second, "the command to be dead-lettered", func() bool {
		rows := dlqRows(t, spec)
		return len(rows) == 1 && rows[0].Reason == consumer.ReasonNoHandler && rows[0].Partition == res.Partition
	})
	if code := readyz(addr); code != http.StatusOK {
		t.Fatalf("/readyz after the dead letter: %d, want 200", code)
	}
	testwait.For(t, 30*time.Second, "status to exit 0 once the stall is gone", func() bool {
		st := clitest.Start(t, []string{"status", "--brokers", brk.Addr(), "--group", "ledger-workers", "--topic", ledger.Topic, "--check-keys", "0"})
		return st.Wait(t) == 0
	})
	p.Interrupt(t)
}
