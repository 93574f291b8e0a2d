package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/memory"
)

// TestHandlersMayKeepTheCommandsBytes pins what Handler's doc promises: a
// handler may keep cmd.Key, cmd.Payload and its header values after it
// returns, without copying them. The handler keeps the slices themselves
// (no copies) of hundreds of records read in many small batches; once every
// record is applied, each kept slice still holds its own record's bytes.
// It is red if the Worker ever decodes a batch into memory of an earlier
// batch's commands.
func TestHandlersMayKeepTheCommandsBytes(t *testing.T) {
	t.Parallel()
	const records = 400
	c := newCluster(t, 1)
	s := memory.New()
	type kept struct {
		key, payload, header []byte
	}
	var (
		mu   sync.Mutex
		keep = map[int64]kept{}
	)
	handler := func(_ context.Context, tx *memory.Tx, cmd consumer.Command) error {
		k := kept{key: cmd.Key, payload: cmd.Payload}
		if len(cmd.Headers) > 0 {
			k.header = cmd.Headers[0].Value
		}
		mu.Lock()
		keep[cmd.Offset] = k
		mu.Unlock()
		tx.Put(fmt.Sprintf("o-%d", cmd.Offset), nil)
		return nil
	}
	w := startWorker(t, c, s, workerOpts{name: "a", maxBatch: 5, handler: handler})
	testwait.For(t, 30*time.Second, "a to own the partition", func() bool { return len(w.Owned()) == 1 })

	raw := newRawProducer(t, c)
	want := map[int64]kept{}
	for i := range records {
		cmd := envelope.Command{Key: fmt.Appendf(nil, "key-%d", i), Type: "append", Payload: fmt.Appendf(nil, "payload-%d", i),
			Headers: []envelope.Header{{Key: "n", Value: fmt.Appendf(nil, "header-%d", i)}}}
		rec, err := envelope.Encode(c.topic, 0, cmd)
		if err != nil {
			t.Fatal(err)
		}
		off := raw.send(rec)[0]
		want[off] = kept{cmd.Key, cmd.Payload, cmd.Headers[0].Value}
	}
	testwait.For(t, 60*time.Second, "every record applied", func() bool { return len(s.Keys("o-")) == records })

	mu.Lock()
	defer mu.Unlock()
	if len(keep) != records {
		t.Fatalf("the handler saw %d records, want %d", len(keep), records)
	}
	for off, w := range want {
		k := keep[off]
		if string(k.key) != string(w.key) || string(k.payload) != string(w.payload) || string(k.header) != string(w.header) {
			t.Fatalf("offset %d: kept key %q payload %q header %q, want %q %q %q", off, k.key, k.payload, k.header, w.key, w.payload, w.header)
		}
	}
}
