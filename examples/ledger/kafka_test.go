package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink/kafka"
)

// TestKafkaEventsExactlyOnce runs the ledger on a sink/kafka sink on
// kfake: every command yields exactly one event that a read_committed
// consumer sees, with the decision the overdraft rule makes in produce
// order per account (refusals included). Halfway, the first worker leaves
// and a second takes every partition over: its handlers read the balances
// back from the events topic, so its decisions continue the first's. A
// command sent twice with one ID is decided once.
func TestKafkaEventsExactlyOnce(t *testing.T) {
	ctx := t.Context()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	const parts = 3
	for _, tp := range []struct {
		name  string
		parts int32
	}{{ledger.Topic, parts}, {ledger.EventsTopic, parts}, {"ledger.checkpoints", 1}, {"ledger.dead", 1}} {
		if _, err := adm.CreateTopic(ctx, tp.parts, 1, nil, tp.name); err != nil {
			t.Fatalf("create %s: %v", tp.name, err)
		}
	}

	start := func(name string) (*consumer.Worker[*kafka.Tx], *kafka.Sink) {
		t.Helper()
		s, err := kafka.New(ctx, kafka.Config{Brokers: brokers, CheckpointTopic: "ledger.checkpoints", DeadLetterTopic: "ledger.dead",
			TransactionalID: "ledger-test-" + name})
		if err != nil {
			t.Fatal(err)
		}
		l, err := ledger.NewKafka(ledger.KafkaConfig{Brokers: brokers})
		if err != nil {
			t.Fatal(err)
		}
		w, err := consumer.New(ctx, consumer.Config[*kafka.Tx]{Brokers: brokers, Group: "ledger-kafka", Topic: ledger.Topic,
			Sink: s, Handlers: l.Handlers(), SessionTimeout: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond})
		if err != nil {
			s.Close()
			t.Fatal(err)
		}
		s.BindMember(w.Member)
		return w, s
	}

	rt, err := router.New(ctx, router.Config{Brokers: brokers, Topic: ledger.Topic})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	// The model: per account, the decisions in produce order.
	type want struct {
		kind    string
		balance int64
	}
	wants := map[string]want{}
	balances := map[string]int64{}
	var cmds []router.Command
	for i := range 400 {
		acct := fmt.Sprintf("acct-%02d", i%20)
		seq := i / 20
		id := fmt.Sprintf("c-%d", i)
		amount := int64(10 + (i*37)%50)
		var cmd router.Command
		if i%3 == 2 {
			cmd = ledger.Withdraw(acct, id, seq, amount)
			if balances[acct] >= amount {
				balances[acct] -= amount
				wants[id] = want{ledger.KindWithdraw, balances[acct]}
			} else {
				wants[id] = want{ledger.KindRefused, balances[acct]}
			}
		} else {
			cmd = ledger.Deposit(acct, id, seq, amount/3)
			balances[acct] += amount / 3
			wants[id] = want{ledger.KindDeposit, balances[acct]}
		}
		cmd.ID = id
		cmds = append(cmds, cmd)
	}
	send := func(cs []router.Command) {
		t.Helper()
		for _, cmd := range cs {
			if _, err := rt.Send(ctx, cmd); err != nil {
				t.Fatal(err)
			}
		}
	}
	events := func() []ledger.Event {
		t.Helper()
		evs, err := ledger.KafkaEvents(ctx, brokers, ledger.EventsTopic)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}

	w1, s1 := start("w1")
	send(cmds[:200])
	testwait.For(t, 60*time.Second, "the first worker to decide the first 200 commands", func() bool {
		return len(events()) >= 200
	})
	if err := w1.Close(); err != nil {
		t.Fatalf("close w1: %v", err)
	}
	s1.Close()

	w2, s2 := start("w2")
	defer s2.Close()
	defer w2.Close()
	send(cmds[200:])
	send(cmds[7:8]) // the same command again: decided once
	testwait.For(t, 60*time.Second, "the second worker to decide every command", func() bool {
		st := w2.Stats()
		return st.Records >= 201 && len(events()) >= len(cmds)
	})

	evs := events()
	byID := map[string][]ledger.Event{}
	for _, e := range evs {
		byID[e.ID] = append(byID[e.ID], e)
	}
	refused := 0
	for id, w := range wants {
		got := byID[id]
		if len(got) != 1 {
			t.Errorf("command %s: %d events, want exactly 1", id, len(got))
			continue
		}
		if got[0].Kind != w.kind || got[0].Balance != w.balance {
			t.Errorf("command %s: %s with balance %d, want %s with balance %d", id, got[0].Kind, got[0].Balance, w.kind, w.balance)
		}
		if w.kind == ledger.KindRefused {
			refused++
		}
	}
	if len(evs) != len(cmds) {
		t.Errorf("%d events for %d commands", len(evs), len(cmds))
	}
	rep := ledger.VerifyKafka(evs)
	if rep.Duplicates != 0 || rep.OrderViolations != 0 || len(rep.Mismatches) != 0 || rep.Refused != refused || refused == 0 {
		t.Errorf("VerifyKafka = %+v, want no duplicates, order violations or mismatches and %d refusals (> 0)", rep, refused)
	}
	members := map[string]bool{}
	for _, e := range evs {
		members[e.Member] = true
	}
	if len(members) != 2 {
		t.Errorf("events decided by %d members, want 2 (the takeover did not happen?)", len(members))
	}
	for _, e := range evs[:1] {
		if !strings.HasPrefix(e.Group, "ledger-kafka") {
			t.Errorf("event group %q", e.Group)
		}
	}
	// Every event carries its command's ID as a header, for consumers
	// that deduplicate.
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(ledger.EventsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fs := rd.PollFetches(pctx)
	fs.EachRecord(func(r *kgo.Record) {
		var id string
		for _, h := range r.Headers {
			if h.Key == envelope.IDHeader {
				id = string(h.Value)
			}
		}
		if _, ok := wants[id]; !ok {
			t.Errorf("event at %d/%d: header %s = %q, not a command's ID", r.Partition, r.Offset, envelope.IDHeader, id)
		}
	})
}

// TestKafkaEventsOpenTransaction: KafkaEvents reads to the end, so a
// committed event above an open transaction's first offset is not left
// out: a transaction left open makes the read fail after KafkaEventsIdle
// (ErrEventsStalled, never a hang), and one that commits while the read
// waits lets it return every committed event. Red when it read to the last
// stable offset at the call: it returned "committed-1" alone, without the
// committed "after-open", and the ledger's handlers, which rebuild their
// balances with it, decided from balances missing committed events (the
// chaos run's X: account balances that do not match their postings).
func TestKafkaEventsOpenTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	const topic = "events-open-txn"
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	produce := func(cl *kgo.Client, id string) {
		t.Helper()
		v := fmt.Sprintf(`{"id":%q,"account":"a","kind":"deposit","amount":1}`, id)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	produce(plain, "committed-1")
	open, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("open-txn"), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(open, "open")
	produce(plain, "after-open") // above the open transaction's first offset: not stable yet

	// Left open, the transaction holds the read: it fails after
	// KafkaEventsIdle, naming what it still had to read, instead of
	// returning the committed events below the open transaction without
	// "after-open", which is committed too.
	defer func(idle time.Duration) { ledger.KafkaEventsIdle = idle }(ledger.KafkaEventsIdle)
	ledger.KafkaEventsIdle = time.Second
	evs, err := ledger.KafkaEvents(ctx, brokers, topic)
	if !errors.Is(err, ledger.ErrEventsStalled) {
		t.Fatalf("KafkaEvents with a transaction left open: %+v, %v; want ErrEventsStalled", evs, err)
	}
	t.Logf("with the transaction left open: %v", err)

	// Ended while the read waits, the transaction lets it through: every
	// committed event, the one above the transaction's first offset too.
	ledger.KafkaEventsIdle = 20 * time.Second
	type result struct {
		evs []ledger.Event
		err error
	}
	done := make(chan result, 1)
	go func() {
		evs, err := ledger.KafkaEvents(ctx, brokers, topic)
		done <- result{evs, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("KafkaEvents returned while a transaction below the end was open: %+v, %v", r.evs, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := open.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("KafkaEvents after the transaction committed: %v", r.err)
	}
	var ids []string
	for _, e := range r.evs {
		ids = append(ids, e.ID)
	}
	if want := []string{"committed-1", "open", "after-open"}; !slices.Equal(ids, want) {
		t.Fatalf("KafkaEvents after the transaction committed: %v, want %v", ids, want)
	}
}
