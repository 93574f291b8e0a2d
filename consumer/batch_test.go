package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestHandlersSeeEachRecordAsProduced: a partition's goroutine decodes
// every batch into the same memory, reused from batch to batch. Over many
// small batches of different lengths, with more command types than the
// decoder remembers, user headers on some records and undecodable records
// among them, every handler call sees exactly the command produced at its
// offset (nothing of an earlier batch shows through), and only the
// undecodable records are dead-lettered.
func TestHandlersSeeEachRecordAsProduced(t *testing.T) {
	t.Parallel()
	const (
		partitions = 2
		records    = 600
		types      = 20 // more than the 16 types an envelope.Decoder remembers
	)
	c := newCluster(t, partitions)
	s := memory.New()

	type seen struct{ key, typ, payload, headers string }
	fmtHeaders := func(hs []envelope.Header) string {
		var b strings.Builder
		for _, h := range hs {
			fmt.Fprintf(&b, "%s=%s;", h.Key, h.Value)
		}
		return b.String()
	}
	var (
		mu    sync.Mutex
		calls = map[[2]int64]seen{}
	)
	handler := func(_ context.Context, tx *memory.Tx, cmd consumer.Command) error {
		mu.Lock()
		defer mu.Unlock()
		calls[[2]int64{int64(cmd.Token.Partition), cmd.Offset}] = seen{string(cmd.Key), cmd.Type, string(cmd.Payload), fmtHeaders(cmd.Headers)}
		tx.Put(string(cmd.Key), cmd.Payload)
		return nil
	}
	handlers := map[string]consumer.Handler[*memory.Tx]{}
	for i := range types {
		handlers[fmt.Sprintf("type-%d", i)] = handler
	}
	w := startWorker(t, c, s, workerOpts{name: "a", maxBatch: 7, handlers: handlers})
	testwait.For(t, 30*time.Second, "a to own every partition", func() bool { return len(w.Owned()) == partitions })

	raw := newRawProducer(t, c)
	want := map[[2]int64]seen{}
	undecodable := 0
	for i := range records {
		p := int32(i % partitions)
		var rec *kgo.Record
		var exp seen
		if i%53 == 7 {
			rec = &kgo.Record{Topic: c.topic, Partition: p, Key: []byte("k"), Value: []byte("not an envelope")}
			undecodable++
		} else {
			cmd := envelope.Command{Key: fmt.Appendf(nil, "key-%d", i%31), Type: fmt.Sprintf("type-%d", (i/3)%types), Payload: fmt.Appendf(nil, "%d", i)}
			if i%4 == 1 {
				cmd.Headers = []envelope.Header{{Key: "n", Value: fmt.Appendf(nil, "%d", i)}}
			}
			var err error
			if rec, err = envelope.Encode(c.topic, p, cmd); err != nil {
				t.Fatal(err)
			}
			exp = seen{string(cmd.Key), cmd.Type, string(cmd.Payload), fmtHeaders(cmd.Headers)}
		}
		off := raw.send(rec)[0]
		if exp != (seen{}) {
			want[[2]int64{int64(p), off}] = exp
		}
	}
	deadLetters := func() int {
		dls, err := s.DeadLetters(context.Background(), dlq.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(dls)
	}
	testwait.For(t, 60*time.Second, "every command applied and every undecodable record dead-lettered", func() bool {
		mu.Lock()
		n := len(calls)
		mu.Unlock()
		return n >= len(want) && deadLetters() >= undecodable
	})
	if st := w.Stats(); st.Batches < int64(records/7) {
		t.Fatalf("%d batches for %d records with MaxBatch 7: the test did not reuse batch memory", st.Batches, records)
	}
	mu.Lock()
	defer mu.Unlock()
	for at, got := range calls {
		if exp, ok := want[at]; !ok {
			t.Errorf("a handler was called for %d@%d, which holds no command (an undecodable record)", at[0], at[1])
		} else if got != exp {
			t.Errorf("%d@%d: the handler saw %+v, the producer wrote %+v", at[0], at[1], got, exp)
		}
	}
	if n := deadLetters(); n != undecodable {
		t.Fatalf("%d dead letters, want the %d undecodable records", n, undecodable)
	}
}

// TestHandlersChangesToTheirCommandStayTheirs: the Worker decodes a batch
// once and retries its records from that decoded memory. A handler that
// changes every field it can of its Command and then fails sees, on the
// retry, the command as produced again, with its offset, timestamp and
// the tenure's token: nothing it changed shows through (a Worker that
// handed handlers its own decoded memory, or built their Command without
// one of those fields, fails this).
func TestHandlersChangesToTheirCommandStayTheirs(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := memory.New()
	keys := makeKeys(3)
	var (
		mu      sync.Mutex
		changed = map[int64]bool{} // offsets whose first call changed its Command and failed
		wrong   []string
	)
	handler := func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
		mu.Lock()
		first := !changed[cmd.Offset]
		changed[cmd.Offset] = true
		if cmd.Type != "append" || !strings.HasPrefix(string(cmd.Key), "key-") || len(cmd.Payload) == 0 ||
			cmd.Token.Partition != 0 || cmd.Token.Group != c.group || cmd.Offset < 0 || cmd.Timestamp.IsZero() {
			wrong = append(wrong, fmt.Sprintf("%+v", cmd))
		}
		mu.Unlock()
		if first {
			cmd.Type, cmd.Key, cmd.Payload, cmd.ID = "changed", nil, nil, "changed"
			cmd.Offset, cmd.Timestamp, cmd.TopicID = -1, time.Time{}, "changed"
			cmd.Token.Group, cmd.Token.Partition = "changed", 99
			return fmt.Errorf("offset %d: fails once", cmd.Offset)
		}
		return appendHandler(ctx, tx, cmd)
	}
	w := startWorker(t, c, s, workerOpts{name: "a", handler: handler})
	produce(t, c, 1, keys, 0, 10)
	testwait.For(t, 30*time.Second, "all applied", func() bool { return appliedCount(s, keys) == 30 })
	checkInvariants(t, s, keys, 10)
	mu.Lock()
	defer mu.Unlock()
	if len(changed) != 30 || w.Stats().Retries < 30 {
		t.Fatalf("the handler did not fail once per record: %d offsets failed, stats %+v", len(changed), w.Stats())
	}
	if len(wrong) > 0 {
		t.Fatalf("%d handler calls saw a changed command, first %s", len(wrong), wrong[0])
	}
}
