package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/cmd/internal/broker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// deadline bounds a test that would otherwise hang on failure; passing runs
// finish long before it.
const deadline = 60 * time.Second

func start(t *testing.T, cfg broker.Config) *broker.Broker {
	t.Helper()
	b, err := broker.Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t *testing.T, ctx context.Context, addr, topic string, values ...string) {
	t.Helper()
	cl := newClient(t, addr, kgo.DefaultProduceTopic(topic))
	defer cl.Close()
	rs := make([]*kgo.Record, len(values))
	for i, v := range values {
		rs[i] = &kgo.Record{Key: []byte(v), Value: []byte(v)}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// consume polls cl until it has n records or ctx ends.
func consume(t *testing.T, ctx context.Context, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records before the deadline: %v", len(got), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s/%d: %v", topic, p, err)
		})
		got = append(got, fs.Records()...)
	}
	return got
}

func values(rs []*kgo.Record) []string {
	vs := make([]string, len(rs))
	for i, r := range rs {
		vs[i] = string(r.Value)
	}
	slices.Sort(vs)
	return vs
}

func seq(prefix string, n int) []string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return vs
}

func TestStartOnFreePortProducesAndConsumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	b := start(t, broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{"cmds": 3}})

	host, port, err := net.SplitHostPort(b.Addr())
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Addr() = %q (%v); want 127.0.0.1 and a real port", b.Addr(), err)
	}
	if got := b.Partitions("cmds"); got != 3 {
		t.Fatalf("Partitions(cmds) = %d, want 3", got)
	}

	want := seq("v", 30)
	produce(t, ctx, b.Addr(), "cmds", want...)
	cl := newClient(t, b.Addr(), kgo.ConsumeTopics("cmds"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := values(consume(t, ctx, cl, len(want)))
	if !slices.Equal(got, want) {
		t.Fatalf("consumed %v, want %v", got, want)
	}
}

func TestListenHonoursHost(t *testing.T) {
	// kfake on its own always binds 127.0.0.1; the wrapper must bind the
	// host it is given. 127.0.0.2 is loopback on Linux but not everywhere.
	probe, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2 not available here: %v", err)
	}
	probe.Close()

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	b := start(t, broker.Config{Listen: "127.0.0.2:0", Topics: map[string]int32{"t": 1}})
	if host, _, _ := net.SplitHostPort(b.Addr()); host != "127.0.0.2" {
		t.Fatalf("Addr() = %q, want host 127.0.0.2", b.Addr())
	}
	produce(t, ctx, b.Addr(), "t", "x")
}

func TestRestartKeepsTopicsRecordsAndCommittedOffsets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	dir := t.TempDir()
	const topic, group = "cmds", "workers"
	cfg := broker.Config{
		Listen:            "127.0.0.1:0",
		DataDir:           dir,
		Topics:            map[string]int32{topic: 3},
		MinSessionTimeout: time.Second,
	}
	groupOpts := []kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumerGroup(group),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A short session timeout, as the consumer tests use; the broker
		// must accept it when MinSessionTimeout allows it.
		kgo.SessionTimeout(time.Second),
		kgo.HeartbeatInterval(200 * time.Millisecond),
	}

	// First life: produce, consume in a group, commit.
	b1, err := broker.Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	first := seq("first", 40)
	produce(t, ctx, b1.Addr(), topic, first...)

	member := newClient(t, b1.Addr(), groupOpts...)
	if got := values(consume(t, ctx, member, len(first))); !slices.Equal(got, first) {
		t.Fatalf("group consumed %v, want %v", got, first)
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	adm1 := kadm.NewClient(newClient(t, b1.Addr()))
	committed, err := adm1.FetchOffsets(ctx, group)
	if err != nil || committed.Error() != nil {
		t.Fatalf("FetchOffsets before restart: %v / %v", err, committed.Error())
	}
	ends, err := adm1.ListEndOffsets(ctx, topic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("ListEndOffsets: %v / %v", err, ends.Error())
	}
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(topic, o.Partition)
		if !ok || c.At != o.Offset {
			t.Fatalf("partition %d: committed %+v, want end offset %d", o.Partition, c, o.Offset)
		}
	})
	member.Close() // leaves the group
	adm1.Close()
	if err := b1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// Second life on the same dir, asking for a different partition count:
	// the existing topic must be left as is.
	cfg.Topics = map[string]int32{topic: 5}
	b2 := start(t, cfg)
	if got := b2.Partitions(topic); got != 3 {
		t.Fatalf("after restart Partitions(%s) = %d, want 3 (left as is)", topic, got)
	}

	adm2 := kadm.NewClient(newClient(t, b2.Addr()))
	after, err := adm2.FetchOffsets(ctx, group)
	if err != nil || after.Error() != nil {
		t.Fatalf("FetchOffsets after restart: %v / %v", err, after.Error())
	}
	committed.Each(func(o kadm.OffsetResponse) {
		a, ok := after.Lookup(o.Topic, o.Partition)
		if !ok || a.At != o.At {
			t.Fatalf("%s/%d: committed offset after restart %+v, want %d", o.Topic, o.Partition, a, o.At)
		}
	})

	// All records are still there.
	reader := newClient(t, b2.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if got := values(consume(t, ctx, reader, len(first))); !slices.Equal(got, first) {
		t.Fatalf("after restart read %v, want %v", got, first)
	}
	reader.Close()

	// The group resumes from its commits: it sees only new records.
	second := seq("second", 10)
	produce(t, ctx, b2.Addr(), topic, second...)
	member2 := newClient(t, b2.Addr(), groupOpts...)
	if got := values(consume(t, ctx, member2, len(second))); !slices.Equal(got, second) {
		t.Fatalf("group after restart consumed %v, want only %v", got, second)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: dir})
		if err != nil {
			t.Fatalf("Start(dir=%q): %v", dir, err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = b.Close() })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("Close #%d (dir=%q): %v", i, dir, err)
			}
		}
		if err := b.Close(); err != nil {
			t.Errorf("Close again (dir=%q): %v", dir, err)
		}
		// The port is free again after Close.
		ln, err := net.Listen("tcp", b.Addr())
		if err != nil {
			t.Errorf("port still busy after Close: %v", err)
		} else {
			ln.Close()
		}
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		cfg   broker.Config
		want  error
		alsoT error // a second error the result must also match, if not nil
	}{
		{"listen without port", broker.Config{Listen: "nonsense"}, broker.ErrConfig, nil},
		{"listen bad port", broker.Config{Listen: "127.0.0.1:http-ish"}, broker.ErrConfig, nil},
		{"listen port out of range", broker.Config{Listen: "127.0.0.1:70000"}, broker.ErrConfig, nil},
		{"port in use", broker.Config{Listen: busy.Addr().String()}, broker.ErrListen, syscall.EADDRINUSE},
		{"zero partitions", broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{"t": 0}}, broker.ErrConfig, nil},
		{"empty topic", broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{"": 1}}, broker.ErrConfig, nil},
		{"sync writes in memory", broker.Config{Listen: "127.0.0.1:0", SyncWrites: true}, broker.ErrConfig, nil},
		{"negative session timeout", broker.Config{Listen: "127.0.0.1:0", MinSessionTimeout: -time.Second}, broker.ErrConfig, nil},
		{"every interface, nothing advertised", broker.Config{Listen: "0.0.0.0:0"}, broker.ErrConfig, nil},
		{"every IPv6 interface, nothing advertised", broker.Config{Listen: "[::]:0"}, broker.ErrConfig, nil},
		{"no host, nothing advertised", broker.Config{Listen: ":0"}, broker.ErrConfig, nil},
		{"advertise without port", broker.Config{Listen: "127.0.0.1:0", Advertise: "broker.example.com"}, broker.ErrConfig, nil},
		{"advertise port out of range", broker.Config{Listen: "127.0.0.1:0", Advertise: "broker.example.com:70000"}, broker.ErrConfig, nil},
		{"advertise every interface", broker.Config{Listen: "0.0.0.0:0", Advertise: "0.0.0.0:9092"}, broker.ErrConfig, nil},
		{"advertise no host", broker.Config{Listen: "0.0.0.0:0", Advertise: ":9092"}, broker.ErrConfig, nil},
		{"data dir is a file", broker.Config{Listen: "127.0.0.1:0", DataDir: notADir}, broker.ErrDataDir, nil},
		{"data dir under a file", broker.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(notADir, "sub")}, broker.ErrDataDir, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := broker.Start(tc.cfg)
			if err == nil {
				b.Close()
				t.Fatalf("Start succeeded, want %v", tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Start error %q does not match %v", err, tc.want)
			}
			if tc.alsoT != nil && !errors.Is(err, tc.alsoT) {
				t.Fatalf("Start error %q does not match %v", err, tc.alsoT)
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestUnwritableDataDirIsRejected(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	if f, err := os.CreateTemp(dir, "probe"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Skip("running with privileges that ignore directory permissions")
	}
	_, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: dir})
	if !errors.Is(err, broker.ErrDataDir) || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("Start error = %v, want ErrDataDir and fs.ErrPermission", err)
	}
}
