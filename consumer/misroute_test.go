package consumer_test

import (
	"context"
	"errors"
	"hash/crc32"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/memory"
)

// librdkafkaProducer is a producer that partitions keys the way librdkafka's
// default partitioner (consistent_random: crc32(key) % n for keyed records)
// does, as kcat or confluent-kafka-go would: written here on kgo, not with
// the router, so that the test does not check the router against itself.
func librdkafkaProducer(t *testing.T, c *cluster) *kgo.Client {
	t.Helper()
	crc := kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, n int) int { return int(crc32.ChecksumIEEE(r.Key) % uint32(n)) }
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(crc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceEnvelopes sends one command per key through cl and returns the
// partition each key landed on.
func produceEnvelopes(t *testing.T, cl *kgo.Client, c *cluster, keys []string, seq int) map[string]int32 {
	t.Helper()
	var recs []*kgo.Record
	for _, k := range keys {
		r, err := envelope.Encode(c.topic, 0, router.Command{Key: []byte(k), Type: "append", Payload: []byte(strconv.Itoa(seq))})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	res := cl.ProduceSync(context.Background(), recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, r := range res {
		out[string(r.Record.Key)] = r.Record.Partition
	}
	return out
}

func misrouteWorker(t *testing.T, c *cluster, s *memory.Sink, p envelope.Partitioner, policy consumer.MisroutePolicy,
	reg prometheus.Registerer, log *lockedBuffer, obs consumer.Observer, opts ...func(*consumer.Config[*memory.Tx])) *consumer.Worker[*memory.Tx] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cfg := consumer.Config[*memory.Tx]{
		Brokers: c.addrs, Group: c.group, Topic: c.topic, Sink: s,
		Handlers:    map[string]consumer.Handler[*memory.Tx]{"append": appendHandler},
		Partitioner: p, Misroute: policy,
		SessionTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond, RetryBackoff: 10 * time.Millisecond,
		MaxRetryBackoff: 50 * time.Millisecond,
		Logger:          slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Observers:       []consumer.Observer{obs},
	}
	if reg != nil {
		cfg.Observers = append(cfg.Observers, promObserver(t, reg, c.group))
	}
	for _, o := range opts {
		o(&cfg)
	}
	w, err := consumer.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// acctKeys are the keys of issue 14's report: with 6 partitions kcat put
// acct-0 on partition 1 and acct-9 on 3, where murmur2 puts both on 0.
func acctKeys() []string {
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = "acct-" + strconv.Itoa(i)
	}
	return keys
}

// TestMisroutedRecordsFlagged: keys produced with librdkafka's default
// partitioner reach a worker that expects murmur2. Every record whose key
// murmur2 maps elsewhere is counted, logged at WARN with the key and both
// partitions, and (policy apply) still applied.
func TestMisroutedRecordsFlagged(t *testing.T) {
	t.Parallel()
	const partitions = 6
	c := newCluster(t, partitions)
	keys := acctKeys()
	landed := produceEnvelopes(t, librdkafkaProducer(t, c), c, keys, 0)
	if landed["acct-0"] != 1 || landed["acct-9"] != 3 {
		t.Fatalf("the librdkafka-style producer put acct-0 on %d and acct-9 on %d; kcat puts them on 1 and 3", landed["acct-0"], landed["acct-9"])
	}
	want := 0
	for k, p := range landed {
		if envelope.Partition([]byte(k), partitions) != p {
			want++
		}
	}
	if want == 0 {
		t.Fatal("no key is misrouted: the test would prove nothing")
	}

	var (
		mu     sync.Mutex
		events []consumer.Misrouted
	)
	obs := consumer.ObserverFunc(func(e consumer.Event) {
		if m, ok := e.(consumer.Misrouted); ok {
			mu.Lock()
			events = append(events, m)
			mu.Unlock()
		}
	})
	reg := prometheus.NewRegistry()
	log := &lockedBuffer{}
	s := memory.New()
	w := misrouteWorker(t, c, s, envelope.Murmur2, consumer.MisrouteApply, reg, log, obs)
	testwait.For(t, 30*time.Second, "every command applied", func() bool { return appliedCount(s, keys) == len(keys) })

	if got := w.Stats().Misrouted; got != int64(want) {
		t.Errorf("Stats().Misrouted = %d, want %d", got, want)
	}
	if got := counterSum(t, reg, "workrouter_consumer_misrouted_total"); got != float64(want) {
		t.Errorf("workrouter_consumer_misrouted_total = %v, want %d", got, want)
	}
	mu.Lock()
	for _, m := range events {
		if m.Refused || m.Partitions != partitions || m.Expected != envelope.Partition(m.Key, partitions) || m.Token.Partition != landed[string(m.Key)] {
			t.Errorf("bad event %+v", m)
		}
	}
	mu.Unlock()
	logged := log.String()
	for _, frag := range []string{"level=WARN", "misrouted record", "key=acct-0", "partition=1", "expected_partition=0", "partitioner=murmur2"} {
		if !strings.Contains(logged, frag) {
			t.Errorf("the warning lacks %q:\n%s", frag, logged)
		}
	}
}

// TestCRC32PartitionerAgreesWithLibrdkafka: with Partitioner CRC32 on the
// router and the worker, the router places every key where the
// librdkafka-style producer does, and the worker flags nothing.
func TestCRC32PartitionerAgreesWithLibrdkafka(t *testing.T) {
	t.Parallel()
	const partitions = 6
	c := newCluster(t, partitions)
	keys := acctKeys()
	landed := produceEnvelopes(t, librdkafkaProducer(t, c), c, keys, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rt, err := router.New(ctx, router.Config{Brokers: c.addrs, Topic: c.topic, Partitioner: envelope.CRC32})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for _, k := range keys {
		res, err := rt.Send(ctx, router.Command{Key: []byte(k), Type: "append", Payload: []byte("1")})
		if err != nil {
			t.Fatal(err)
		}
		if res.Partition != landed[k] {
			t.Errorf("key %s: the router put it on %d, the librdkafka-style producer on %d", k, res.Partition, landed[k])
		}
	}

	reg := prometheus.NewRegistry()
	log := &lockedBuffer{}
	s := memory.New()
	var flagged sync.Map
	w := misrouteWorker(t, c, s, envelope.CRC32, consumer.MisrouteApply, reg, log, consumer.ObserverFunc(func(e consumer.Event) {
		if m, ok := e.(consumer.Misrouted); ok {
			flagged.Store(string(m.Key), true)
		}
	}))
	testwait.For(t, 30*time.Second, "every command applied", func() bool { return appliedCount(s, keys) == 2*len(keys) })
	checkInvariants(t, s, keys, 2)
	if n := w.Stats().Misrouted; n != 0 {
		t.Errorf("Stats().Misrouted = %d, want 0", n)
	}
	flagged.Range(func(k, _ any) bool { t.Errorf("key %v flagged as misrouted", k); return true })
	if strings.Contains(log.String(), "misrouted") {
		t.Errorf("a misrouting warning was logged:\n%s", log)
	}
}

// TestMisrouteRefuseStalls: under MisrouteRefuse, with a poison policy
// that stalls undecodable records, a misrouted record stalls its partition
// (reported as Stalled with ErrMisrouted) and nothing after it on that
// partition is applied.
func TestMisrouteRefuseStalls(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 6)
	landed := produceEnvelopes(t, librdkafkaProducer(t, c), c, []string{"acct-0"}, 0) // partition 1; murmur2 says 0
	if landed["acct-0"] != 1 {
		t.Fatalf("acct-0 landed on %d", landed["acct-0"])
	}
	stalled := make(chan error, 16)
	s := memory.New()
	w := misrouteWorker(t, c, s, envelope.Murmur2, consumer.MisrouteRefuse, nil, &lockedBuffer{}, consumer.ObserverFunc(func(e consumer.Event) {
		if st, ok := e.(consumer.Stalled); ok && st.Token.Partition == 1 {
			select {
			case stalled <- st.Err:
			default:
			}
		}
	}), func(c *consumer.Config[*memory.Tx]) { c.Poison.Undecodable = consumer.PoisonStall })
	var err error
	for i := 0; i < 2; i++ { // the first attempt and at least one retry
		select {
		case err = <-stalled:
		case <-time.After(30 * time.Second):
			t.Fatal("partition 1 did not stall")
		}
	}
	if !errors.Is(err, consumer.ErrMisrouted) {
		t.Fatalf("stalled with %v, want ErrMisrouted", err)
	}
	if n := appliedCount(s, []string{"acct-0"}); n != 0 {
		t.Fatalf("%d misrouted commands applied under MisrouteRefuse", n)
	}
	if w.Stats().Misrouted < 1 {
		t.Fatalf("Stats().Misrouted = %d", w.Stats().Misrouted)
	}
}

// TestMisrouteRefuseDeadLetters: under MisrouteRefuse and the default
// poison policy, a misrouted record is dead-lettered (reason misrouted)
// and its partition goes on.
func TestMisrouteRefuseDeadLetters(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 6)
	produceEnvelopes(t, librdkafkaProducer(t, c), c, []string{"acct-0"}, 0) // partition 1; murmur2 says 0
	s := memory.New()
	w := misrouteWorker(t, c, s, envelope.Murmur2, consumer.MisrouteRefuse, nil, &lockedBuffer{}, consumer.ObserverFunc(func(consumer.Event) {}))
	testwait.For(t, 30*time.Second, "the misrouted record dead-lettered", func() bool { return w.Stats().DeadLettered >= 1 })
	dls, err := s.DeadLetters(context.Background(), dlq.Filter{})
	if err != nil || len(dls) < 1 || dls[0].Record.Reason != consumer.ReasonMisrouted || !strings.Contains(dls[0].Record.Error, "maps it to partition 0") {
		t.Fatalf("dead letters %+v, %v: want one with reason %q", dls, err, consumer.ReasonMisrouted)
	}
	if n := appliedCount(s, []string{"acct-0"}); n != 0 {
		t.Fatalf("%d misrouted commands applied under MisrouteRefuse", n)
	}
}

// counterSum returns the sum of every series of the counter family name.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
