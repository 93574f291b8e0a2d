package kafka_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/sink/kafka"
)

// childEnv names the environment variable that makes the test binary a
// worker process (childWorker); its value is the worker's configuration,
// fields separated by '|': brokers, group, input topic, output topic,
// checkpoint topic, dead-letter topic, session timeout, the offset to
// freeze at, the marker file, the resume file, the group protocol
// ("kip848" or "classic").
const childEnv = "WR_KAFKASINK_CHILD"

// childWorker is the worker process of TestSIGSTOPZombie: a
// consumer.Worker on the Kafka sink whose handler produces one record per
// input (value "child"). Every Applied event is a line "APPLIED
// first=<offset> next=<offset>" on stdout. At the freeze offset its handler creates the
// marker file, then waits for the resume file: the parent stops the
// process with SIGSTOP meanwhile. Every Fenced event is a line "FENCED
// <error>" on stdout.
func childWorker() int {
	f := strings.Split(os.Getenv(childEnv), "|")
	if len(f) != 11 {
		fmt.Fprintln(os.Stderr, "child: bad", childEnv)
		return 2
	}
	brokers, group, in, out, cp, dead := strings.Split(f[0], ","), f[1], f[2], f[3], f[4], f[5]
	session, _ := time.ParseDuration(f[6])
	freezeAt, _ := strconv.ParseInt(f[7], 10, 64)
	marker, resume := f[8], f[9]
	proto := consumer.Cooperative
	if f[10] == "kip848" {
		proto = consumer.KIP848
	}
	ctx := context.Background()
	s, err := kafka.New(ctx, kafka.Config{Brokers: brokers, CheckpointTopic: cp, DeadLetterTopic: dead, TransactionalID: "wr-kafkasink-child", Producers: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer s.Close()
	var once sync.Once
	w, err := consumer.New(ctx, consumer.Config[*kafka.Tx]{
		Brokers: brokers, Group: group, Topic: in, Sink: s, SessionTimeout: session, HeartbeatInterval: session / 10, Protocol: proto,
		Observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			switch e := e.(type) {
			case consumer.Fenced:
				fmt.Printf("FENCED %s first=%d %v\n", e.Op, e.FirstOffset, e.Err)
			case consumer.Applied:
				fmt.Printf("APPLIED first=%d next=%d\n", e.FirstOffset, e.NextOffset)
			}
		})},
		Handlers: map[string]consumer.Handler[*kafka.Tx]{
			"order": func(ctx context.Context, tx *kafka.Tx, cmd consumer.Command) error {
				if cmd.Offset == freezeAt {
					once.Do(func() {
						_ = os.WriteFile(marker, nil, 0o600)
						for {
							if _, err := os.Stat(resume); err == nil {
								return
							}
							time.Sleep(5 * time.Millisecond)
						}
					})
				}
				return tx.Produce(ctx, kafka.Record{Topic: out, Key: []byte(strconv.FormatInt(cmd.Offset, 10)), Value: []byte("child")})
			},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	s.BindMember(w.Member)
	fmt.Println("READY")
	<-w.Done()
	return 0
}

// TestSIGSTOPZombie freezes a worker process with SIGSTOP in the middle
// of a batch, past its session timeout; a second worker takes its
// partition over and applies every input; the first is resumed with
// SIGCONT and commits its batch: it is refused (the child reports the
// fence: the coordinator's UNKNOWN_MEMBER_ID, or the sink's client-side
// check if the client learned first that its member is gone), and a
// read_committed consumer of
// the output sees exactly one output per input, none of the frozen
// batch's.
func TestSIGSTOPZombie(t *testing.T) {
	forBrokers(t, func(t *testing.T, b *broker) {
		sigstopZombie(t, b, false)
	})
	// KIP-848 on kfake, whose member sessions are set to 1 s: on the
	// real node a KIP-848 session is the broker's
	// group.consumer.session.timeout.ms (45 s by default), too long to
	// wait out here.
	t.Run("kfake-kip848", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond),
			kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100", "group.consumer.session.timeout.ms": "1000",
				"group.consumer.min.session.timeout.ms": "1000"}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		sigstopZombie(t, &broker{name: "kfake", addrs: c.ListenAddrs(), kf: c, sfx: suffix()}, true)
	})
}

func sigstopZombie(t *testing.T, b *broker, kip848 bool) {
	ctx := t.Context()
	in := b.topic(t, "in", 1, nil)
	tp := b.sinkTopics(t)
	group := "wr-kafkasink-sigstop-" + b.sfx
	// Apache Kafka's least session timeout is 6 s by default.
	session := 6 * time.Second
	if b.kf != nil {
		session = time.Second
	}
	proto := consumer.Cooperative
	if kip848 {
		proto = consumer.KIP848
	}
	dir := t.TempDir()
	marker, resume := filepath.Join(dir, "frozen"), filepath.Join(dir, "resume")
	const first, total = 10, 20
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{strings.Join(b.addrs, ","), group, in, tp.out, tp.checkpoint, tp.dead,
		session.String(), strconv.Itoa(first), marker, resume, map[bool]string{false: "classic", true: "kip848"}[kip848]}, "|"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if stopped {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	pcl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.DefaultProduceTopic(in))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			r := kgo.KeySliceRecord([]byte("k"), nil)
			r.Headers = []kgo.RecordHeader{{Key: "workrouter-type", Value: []byte("order")}}
			if err := pcl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	adm := b.admin(t)
	committed := func() int64 {
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return -1
		}
		o, ok := offs.Lookup(in, 0)
		if !ok {
			return -1
		}
		return o.At
	}
	produce(0, first)
	testwait.For(t, 60*time.Second, "the child worker to commit its first inputs", func() bool { return committed() == first })
	produce(first, total)
	testwait.For(t, 60*time.Second, "the child worker's handler to reach the freeze offset", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped = true
	t.Logf("child %d frozen at offset %d", cmd.Process.Pid, first)

	// The second worker, in this process.
	s2 := b.newSink(t, tp, nil)
	w2, err := consumer.New(ctx, consumer.Config[*kafka.Tx]{
		Brokers: b.addrs, Group: group, Topic: in, Sink: s2, SessionTimeout: session, HeartbeatInterval: session / 10, Protocol: proto,
		Handlers: map[string]consumer.Handler[*kafka.Tx]{
			"order": func(ctx context.Context, tx *kafka.Tx, cmd consumer.Command) error {
				return tx.Produce(ctx, kafka.Record{Topic: tp.out, Key: []byte(strconv.FormatInt(cmd.Offset, 10)), Value: []byte("w2")})
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s2.BindMember(w2.Member)
	defer w2.Close()
	testwait.For(t, 90*time.Second, "the second worker to take the partition over and apply every input", func() bool { return committed() == total })

	if err := os.WriteFile(resume, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	var fence string
	timeout := time.After(60 * time.Second)
	for fence == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the child exited without reporting a fence")
			}
			if strings.HasPrefix(l, "FENCED apply") {
				fence = l
			}
			if strings.HasPrefix(l, fmt.Sprintf("APPLIED first=%d ", first)) {
				t.Errorf("the resumed child committed its frozen batch: %s", l)
				fence = l
			}
		case <-timeout:
			t.Fatal("the resumed child reported no fenced apply in 60 s")
		}
	}
	t.Logf("the resumed child: %s", fence)
	// The coordinator refuses the commit (UNKNOWN_MEMBER_ID), unless
	// the child's client learned first, from a heartbeat, that its
	// member is gone, and the sink's client-side check refused it.
	if !strings.Contains(fence, fmt.Sprintf("first=%d", first)) ||
		!strings.Contains(fence, "UNKNOWN_MEMBER_ID") && !strings.Contains(fence, kafka.ErrMemberChanged.Error()) {
		t.Fatalf("the child's fence %q is not a refusal of its frozen batch at offset %d (UNKNOWN_MEMBER_ID, or the member changed)", fence, first)
	}
	got := outputsOf(t, b, tp.out)
	for off := range int64(total) {
		want := "child"
		if off >= first {
			want = "w2"
		}
		if v := got[off]; len(v) != 1 || v[0] != want {
			t.Errorf("input %d: a read_committed consumer sees %q, want exactly [%s]", off, v, want)
		}
	}
	if len(got) != total {
		t.Errorf("outputs for %d inputs, want %d", len(got), total)
	}
}
