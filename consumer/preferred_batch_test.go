package consumer_test

import (
	"slices"
	"testing"
	"time"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// batchPreferring is a memory sink that declares a preferred batch.
type batchPreferring struct {
	sink.Sink[*memory.Tx]
	batch int
}

func (p batchPreferring) Features() sink.Features {
	f := p.Sink.Features()
	f.PreferredBatch = p.batch
	return f
}

// TestPreferredBatch: a Worker whose MaxBatch is left zero applies
// batches of the sink's preferred size (sink.Features.PreferredBatch);
// one with a MaxBatch of its own keeps it. Red if New ignores the
// preference (batches of 256) or lets it override MaxBatch.
func TestPreferredBatch(t *testing.T) {
	t.Parallel()
	const n = 60
	for _, tc := range []struct {
		name      string
		maxBatch  int // -1: left zero
		preferred int
		want      int // the largest batch; 0: above 7 (256, not the preference)
	}{
		{"the sink's preference", -1, 7, 7},
		{"MaxBatch wins", 5, 7, 5},
		{"no preference", -1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newFakeCluster(t, 1)
			produce(t, c, 1, []string{"k"}, 0, n) // a backlog before the worker starts
			s := memory.New()
			rec := &eventRecorder{}
			startWorker(t, c, s, workerOpts{name: "w", maxBatch: tc.maxBatch, observers: []consumer.Observer{rec},
				sink: batchPreferring{Sink: s, batch: tc.preferred}})
			testwait.For(t, 30*time.Second, "every command applied", func() bool { return len(logOf(s, "k")) == n })
			var sizes []int
			for _, a := range eventsOf[consumer.Applied](rec) {
				sizes = append(sizes, a.Records)
			}
			switch {
			case len(sizes) == 0:
				t.Fatal("no batch applied")
			case tc.want > 0 && slices.Max(sizes) != tc.want:
				t.Fatalf("batches of %v records, want at most %d and one of %d", sizes, tc.want, tc.want)
			case tc.want == 0 && slices.Max(sizes) <= 7:
				t.Fatalf("batches of %v records, want one above 7 (the default 256, no preference)", sizes)
			}
			want := make([]int, n)
			for i := range want {
				want[i] = i
			}
			if got := logOf(s, "k"); !slices.Equal(got, want) {
				t.Fatalf("applied %v, want 0..%d in order", got, n-1)
			}
		})
	}
}

// TestPreferredBatchQueue: the queue's default follows MaxBatch as the
// caller gave it: 32×MaxBatch, 32×256 when MaxBatch is left to the sink's
// preference, never below MaxBatch. Red if a preferred batch of 2048
// makes a queue of 65,536 records per partition.
func TestPreferredBatchQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		maxBatch, preferred, queue int
		wantBatch, wantQueue       int
	}{
		{0, 0, 0, 256, 8192},
		{0, 2048, 0, 2048, 8192},
		{1000, 2048, 0, 1000, 32000},
		{0, 100_000, 0, 100_000, 100_000},
		{0, 2048, 500, 2048, 2048},
	} {
		c, err := consumer.Defaults(consumer.Config[*memory.Tx]{
			Brokers: []string{"127.0.0.1:9092"}, Group: "g", Topic: "t",
			Sink:     batchPreferring{Sink: memory.New(), batch: tc.preferred},
			Handlers: map[string]consumer.Handler[*memory.Tx]{"append": appendHandler},
			MaxBatch: tc.maxBatch, QueueSize: tc.queue,
		})
		if err != nil {
			t.Fatal(err)
		}
		if c.MaxBatch != tc.wantBatch || c.QueueSize != tc.wantQueue {
			t.Errorf("MaxBatch %d, preferred %d, QueueSize %d: MaxBatch %d, QueueSize %d; want %d and %d",
				tc.maxBatch, tc.preferred, tc.queue, c.MaxBatch, c.QueueSize, tc.wantBatch, tc.wantQueue)
		}
	}
}
