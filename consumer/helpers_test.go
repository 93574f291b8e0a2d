package consumer_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/consumerprom"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

const topic = "cmds"

// testParallel is how many of this package's parallel tests run at once
// unless -parallel says otherwise: they mostly wait on the broker's timers
// (sessions, rebalances, backoffs), not on the CPU, so the default of
// -parallel (GOMAXPROCS) would leave a small machine waiting.
const testParallel = "8"

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", testParallel); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}

// cluster is where a test runs: the in-process kfake broker by default, or
// the real cluster named by WORKROUTER_TEST_BROKERS (comma-separated
// addresses), on a fresh topic and group per test (named after the test,
// so that tests running in parallel never share one). On a real cluster,
// WORKROUTER_TEST_PROTOCOL=kip848 runs the workers of the tests that do not
// choose a protocol on KIP-848 instead of the cooperative protocol (the
// broker's group.consumer.session.timeout.ms then sets their sessions);
// cooperative, or unset, keeps the default; any other value fails the test.
type cluster struct {
	addrs []string
	kf    *kfake.Cluster // nil on a real cluster
	topic string
	group string
}

func (c *cluster) ListenAddrs() []string { return c.addrs }

// invalidTopicChars matches what a Kafka topic name may not hold.
var invalidTopicChars = regexp.MustCompile(`[^a-zA-Z0-9._-]`)

// newCluster returns the test's cluster with its topic created.
func newCluster(t *testing.T, partitions int32) *cluster {
	t.Helper()
	if env := os.Getenv("WORKROUTER_TEST_BROKERS"); env != "" {
		switch p := os.Getenv("WORKROUTER_TEST_PROTOCOL"); p {
		case "", "cooperative", "kip848":
		default:
			t.Fatalf("WORKROUTER_TEST_PROTOCOL=%s: want cooperative or kip848", p)
		}
		// A subtest's name has a '/' (and its spaces become '_'), which
		// Kafka refuses in a topic name (INVALID_TOPIC_EXCEPTION): only
		// [a-zA-Z0-9._-] is allowed.
		name := strings.ToLower(invalidTopicChars.ReplaceAllString(t.Name(), "-"))
		c := &cluster{
			addrs: strings.Split(env, ","),
			topic: fmt.Sprintf("workrouter-test-%s-%d", name, time.Now().UnixNano()),
			group: fmt.Sprintf("workrouter-test-%s-%d", name, time.Now().UnixNano()),
		}
		adm, err := kadm.NewOptClient(kgo.SeedBrokers(c.addrs...))
		if err != nil {
			t.Fatal(err)
		}
		defer adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adm.CreateTopic(ctx, partitions, -1, nil, c.topic); err != nil {
			t.Fatalf("create topic on WORKROUTER_TEST_BROKERS=%s: %v", env, err)
		}
		// The broker answers CreateTopics once the controller has the
		// topic; its own metadata catches up a moment later, and until
		// then a produce may be refused (UNKNOWN_TOPIC_OR_PARTITION).
		testwait.For(t, 30*time.Second, "the broker's metadata to serve the new topic", func() bool {
			md, err := adm.Metadata(ctx, c.topic)
			if err != nil || md.Topics[c.topic].Err != nil || len(md.Topics[c.topic].Partitions) != int(partitions) {
				return false
			}
			for _, p := range md.Topics[c.topic].Partitions {
				if p.Err != nil || p.Leader < 0 {
					return false
				}
			}
			return true
		})
		t.Cleanup(func() {
			adm, err := kadm.NewOptClient(kgo.SeedBrokers(c.addrs...))
			if err == nil {
				adm.DeleteTopics(context.Background(), c.topic)
				adm.Close()
			}
		})
		return c
	}
	return newFakeCluster(t, partitions)
}

// defaultProtocol is the group protocol of the workers of a test that
// does not choose one: KIP-848 on a real cluster under
// WORKROUTER_TEST_PROTOCOL=kip848, the cooperative protocol otherwise.
func (c *cluster) defaultProtocol() consumer.Protocol {
	if c.kf == nil && os.Getenv("WORKROUTER_TEST_PROTOCOL") == "kip848" {
		return consumer.KIP848
	}
	return consumer.Cooperative
}

// newFakeCluster starts an in-process kfake broker with the topic seeded,
// short session timeouts allowed, and KIP-848 members told to heartbeat
// every 100 ms (as the tests' classic members do) rather than every 5 s,
// so that a KIP-848 rebalance is not a wait of seconds. Tests that inject faults through
// kfake's request interception use it even when WORKROUTER_TEST_BROKERS is
// set: a real cluster cannot be intercepted.
func newFakeCluster(t *testing.T, partitions int32) *cluster {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &cluster{addrs: c.ListenAddrs(), kf: c, topic: topic, group: "g"}
}

// testLogger is the workers' logger: a debug log on stderr under
// WORKROUTER_TEST_LOG=1, nothing otherwise. WORKROUTER_TEST_KGOLOG=<test
// name> adds the franz-go client's own debug log for that test's workers
// (startWorker).
func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("WORKROUTER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return nil
}

// produce sends perKey commands for each of keys keys, interleaved, with
// payload "<seq>", partitioned as the router does. It returns the keys.
func produce(t *testing.T, c *cluster, partitions int32, keys []string, from, to int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	flush := func() {
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		recs = recs[:0]
	}
	for seq := from; seq < to; seq++ {
		for _, k := range keys {
			r, err := envelope.Encode(c.topic, envelope.Partition([]byte(k), partitions), envelope.Command{
				Key: []byte(k), Type: "append", Payload: []byte(strconv.Itoa(seq)),
			})
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
			if len(recs) == 1000 {
				flush()
			}
		}
	}
	flush()
}

func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	return keys
}

// appendHandler appends the command's payload to the key's log in the sink.
func appendHandler(_ context.Context, tx *memory.Tx, cmd consumer.Command) error {
	k := "log/" + string(cmd.Key)
	cur, _ := tx.Get(k)
	next := make([]byte, 0, len(cur)+len(cmd.Payload)+1)
	next = append(next, cur...)
	if len(cur) > 0 {
		next = append(next, ',')
	}
	next = append(next, cmd.Payload...)
	tx.Put(k, next)
	return nil
}

// logOf returns the payload sequence applied for key.
func logOf(s *memory.Sink, key string) []int {
	v, ok := s.Get("log/" + key)
	if !ok {
		return nil
	}
	var out []int
	for _, f := range strings.Split(string(v), ",") {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

func appliedCount(s *memory.Sink, keys []string) int {
	n := 0
	for _, k := range keys {
		n += len(logOf(s, k))
	}
	return n
}

// checkInvariants asserts L, O and X from the sink's data (every key's log
// is exactly 0..perKey-1, in order) and F, O, X from the sink's history.
func checkInvariants(t *testing.T, s *memory.Sink, keys []string, perKey int) {
	t.Helper()
	for _, k := range keys {
		got := logOf(s, k)
		if len(got) != perKey {
			t.Errorf("key %s: %d effects applied, want %d (L/X)", k, len(got), perKey)
			continue
		}
		for i, v := range got {
			if v != i {
				t.Errorf("key %s: effect %d is seq %d (O/X violated): %v", k, i, v, got)
				break
			}
		}
	}
	if err := s.Verify(); err != nil {
		t.Errorf("sink history: %v", err)
	}
}

type workerOpts struct {
	name     string
	group    string
	handler  consumer.Handler[*memory.Tx]
	onFenced func(error) // called with every Fenced event's error
	// observers are more Config.Observers.
	observers []consumer.Observer
	// reclaimInterval sets Config.ReclaimInterval.
	reclaimInterval time.Duration
	// noTakeover sets Config.NoTakeover: a holder of an earlier
	// incarnation blocks until an operator's reset.
	noTakeover bool
	// poison sets Config.Poison; handlers, if set, replaces the "append"
	// handler map.
	poison   consumer.PoisonPolicy
	handlers map[string]consumer.Handler[*memory.Tx]
	// sink, if set, is the sink the worker uses (a wrapper of s).
	sink     sink.Sink[*memory.Tx]
	revoke   time.Duration
	protocol consumer.Protocol
	// protocolChosen keeps protocol (even Cooperative, the zero value)
	// under WORKROUTER_TEST_PROTOCOL: a test that runs each protocol.
	protocolChosen bool
	// registerer gets the Worker's metrics (consumerprom); lagInterval sets
	// LagInterval.
	registerer  prometheus.Registerer
	lagInterval time.Duration
	// maxBatch and queueSize set Config.MaxBatch (default 64; -1 leaves it
	// zero: the sink's preference, else 256) and QueueSize.
	maxBatch, queueSize int
	// keyConcurrency sets Config.KeyConcurrency.
	keyConcurrency int
	// commitPace, if set, is the committer's least time between commits
	// (consumer.SetCommitPace).
	commitPace time.Duration
	// topicCheck, if set, is the least time between two checks of the
	// topic (consumer.SetTopicCheckInterval).
	topicCheck time.Duration
	// diagnoseTimeout, if set, bounds the look at the group after a
	// fenced claim (consumer.SetDiagnoseTimeout).
	diagnoseTimeout time.Duration
}

func startWorker(t *testing.T, c *cluster, s *memory.Sink, o workerOpts) *consumer.Worker[*memory.Tx] {
	t.Helper()
	if o.handler == nil {
		o.handler = appendHandler
	}
	if o.group == "" {
		o.group = c.group
	}
	switch {
	case o.maxBatch == 0:
		o.maxBatch = 64
	case o.maxBatch < 0:
		o.maxBatch = 0
	}
	lg := testLogger(t)
	if lg != nil {
		lg = lg.With("worker", o.name)
	}
	var observers []consumer.Observer
	if o.onFenced != nil {
		observers = append(observers, consumer.ObserverFunc(func(e consumer.Event) {
			if f, ok := e.(consumer.Fenced); ok {
				o.onFenced(f.Err)
			}
		}))
	}
	observers = append(observers, o.observers...)
	handlers := o.handlers
	if handlers == nil {
		handlers = map[string]consumer.Handler[*memory.Tx]{"append": o.handler}
	}
	if !o.protocolChosen && o.protocol == consumer.Cooperative {
		o.protocol = c.defaultProtocol()
	}
	var snk sink.Sink[*memory.Tx] = s
	if o.sink != nil {
		snk = o.sink
	}
	cfg := consumer.Config[*memory.Tx]{
		Brokers:           c.ListenAddrs(),
		Group:             o.group,
		Topic:             c.topic,
		Sink:              snk,
		Handlers:          handlers,
		Poison:            o.poison,
		Protocol:          o.protocol,
		MaxBatch:          o.maxBatch,
		QueueSize:         o.queueSize,
		KeyConcurrency:    o.keyConcurrency,
		SessionTimeout:    time.Second,
		RebalanceTimeout:  3 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RevokeTimeout:     o.revoke,
		RetryBackoff:      10 * time.Millisecond,
		MaxRetryBackoff:   200 * time.Millisecond,
		ClientID:          o.name,
		Logger:            lg,
		Observers:         observers,
		LagInterval:       o.lagInterval,
		ReclaimInterval:   o.reclaimInterval,
		NoTakeover:        o.noTakeover,
	}
	if os.Getenv("WORKROUTER_TEST_KGOLOG") == t.Name() { // the client's own log, for one test
		prefix := t.Name() + " " + o.name + " "
		cfg.ClientOpts = append(cfg.ClientOpts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, func() string { return prefix })))
	}
	if o.registerer != nil {
		cfg.Observers = append(cfg.Observers, promObserver(t, o.registerer, o.group))
	}
	if o.commitPace > 0 {
		consumer.SetCommitPace(&cfg, o.commitPace)
	}
	if o.topicCheck > 0 {
		consumer.SetTopicCheckInterval(&cfg, o.topicCheck)
	}
	if o.diagnoseTimeout > 0 {
		consumer.SetDiagnoseTimeout(&cfg, o.diagnoseTimeout)
	}
	w, err := consumer.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// gate blocks handler calls until opened.
type gate struct {
	once    sync.Once
	ch      chan struct{}
	entered chan struct{}
	enterMu sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{}), entered: make(chan struct{})} }

func (g *gate) wait() {
	g.enterMu.Do(func() { close(g.entered) })
	<-g.ch
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func fmtTokens[T fmt.Stringer](ts []T) string {
	var b strings.Builder
	for _, t := range ts {
		b.WriteString(t.String() + " ")
	}
	return b.String()
}

// regressAll stores, for each of the partitions, a holder of the group's
// previous incarnation at epoch 10: every claim of the group's members is
// refused as a regression, so the partitions stay blocked.
func regressAll(t *testing.T, c *cluster, s *memory.Sink, partitions int32) {
	t.Helper()
	for p := range partitions {
		prev := epochs.Token{Group: c.group, Topic: c.topic, Partition: p, Epoch: 10, Member: "previous-incarnation"}
		if _, err := s.Claim(t.Context(), prev, sink.Observed{}); err != nil {
			t.Fatal(err)
		}
	}
}

// blockedBy reports whether every one of ps (want of them) is blocked as
// a regression of the group's epochs.
func blockedBy(ps []consumer.PartitionStatus, want int) bool {
	n := 0
	for _, p := range ps {
		if p.State == consumer.StateBlocked && errors.Is(p.LastErr, consumer.ErrEpochRegressed) {
			n++
		}
	}
	return n == want && len(ps) == want
}

// promObserver registers the metrics of a Worker of group on reg
// (package consumerprom) and returns them, to put in its Observers.
func promObserver(t *testing.T, reg prometheus.Registerer, group string) consumer.Observer {
	t.Helper()
	m, err := consumerprom.New(reg, group)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
