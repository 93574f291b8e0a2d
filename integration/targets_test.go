package integration

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/kafka"
	"github.com/testcontainers/testcontainers-go/modules/redpanda"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/consumer"
)

// Images of the brokers, overridable for trying another release.
const (
	// defaultKafkaImage is Apache Kafka 4.0 (KRaft) as Confluent packages
	// it for testcontainers' kafka module: the first release with KIP-848
	// consumer groups.
	defaultKafkaImage    = "confluentinc/confluent-local:8.0.0"
	defaultRedpandaImage = "docker.redpanda.com/redpandadata/redpanda:v25.2.4"
	// defaultBrokerImage is workrouter's own image (deploy/Dockerfile.local,
	// which .ci/run builds under this tag) serving the embedded broker of
	// workrouter-lab, copied in: the one broker image a machine without a
	// registry has.
	defaultBrokerImage = "workrouter:ci"
)

// target is a cluster the tests run on.
type target struct {
	name    string
	brokers []string
	// kip848 says the broker serves KIP-848 consumer groups with a session
	// timeout short enough for the tests (see protocols).
	kip848 bool
	// session is the group session timeout the tests' workers use.
	session time.Duration
}

// protocols returns the group protocols to run on tg.
func (tg target) protocols() []consumer.Protocol {
	if tg.kip848 {
		return []consumer.Protocol{consumer.Cooperative, consumer.KIP848}
	}
	return []consumer.Protocol{consumer.Cooperative}
}

func (tg target) protocolName(p consumer.Protocol) string { return tg.name + "/" + p.String() }

var (
	dockerOnce sync.Once
	dockerErr  error

	startMu  sync.Mutex
	started  = map[string]target{}
	startErr = map[string]error{}
	stops    []func()
)

// TestMain stops the containers the tests started, then fails the
// package if any goroutine the tests started is still running.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, stop := range stops {
		stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// targets returns the clusters to run on: WORKROUTER_TEST_BROKERS if set,
// else a Kafka and a Redpanda container (started once per test binary).
// Without either it skips t with one line.
func targets(t *testing.T) []target {
	t.Helper()
	if env := os.Getenv("WORKROUTER_TEST_BROKERS"); env != "" {
		tg := target{name: "env", brokers: strings.Split(env, ","), session: 6 * time.Second}
		if s := os.Getenv("WORKROUTER_TEST_SESSION_TIMEOUT"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("WORKROUTER_TEST_SESSION_TIMEOUT=%q: %v", s, err)
			}
			tg.session = d
		}
		// A cluster's KIP-848 session timeout is the broker's
		// (group.consumer.session.timeout.ms, 45s by default): opt in
		// only where it is no longer than the tests' session timeout.
		tg.kip848 = os.Getenv("WORKROUTER_TEST_KIP848") == "1" && servesKIP848(t, tg.brokers)
		return []target{tg}
	}
	dockerOnce.Do(func() { dockerErr = dockerHealthy() })
	if dockerErr != nil {
		t.Skipf("skipped: no healthy Docker engine (%s); start Docker, or point WORKROUTER_TEST_BROKERS at a cluster",
			strings.Join(strings.Fields(dockerErr.Error()), " "))
	}
	// No registry is reachable on machines like the project's: an image
	// can only come from the engine's own store. Each one missing is one
	// line; with neither, the test skips with both.
	var tgs []target
	var missing []string
	for _, c := range []struct {
		name string
		fn   func(context.Context) (target, func(), error)
	}{{"kafka", startKafka}, {"redpanda", startRedpanda}, {"broker", startBrokerImage}} {
		if img, err := imageLocal(t.Context(), c.name); err != nil {
			missing = append(missing, fmt.Sprintf("%s: image %s is not available locally (docker pull it, or set WORKROUTER_TEST_%s_IMAGE)",
				c.name, img, strings.ToUpper(c.name)))
			continue
		}
		tgs = append(tgs, start(t, c.name, c.fn))
	}
	if len(tgs) == 0 {
		t.Skipf("skipped: %s", strings.Join(missing, "; "))
	}
	for _, m := range missing {
		t.Logf("not run on %s", m)
	}
	return tgs
}

// dockerHealthy asks testcontainers' Docker provider whether the engine
// answers.
func dockerHealthy() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	p, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Health(ctx)
}

// imageOf returns the image the container of name runs.
func imageOf(name string) string {
	if img := os.Getenv("WORKROUTER_TEST_" + strings.ToUpper(name) + "_IMAGE"); img != "" {
		return img
	}
	switch name {
	case "kafka":
		return defaultKafkaImage
	case "broker":
		return defaultBrokerImage
	}
	return defaultRedpandaImage
}

// imageLocal returns the image of name and an error unless the engine
// already holds it.
func imageLocal(ctx context.Context, name string) (string, error) {
	img := imageOf(name)
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return img, err
	}
	defer p.Close()
	_, err = p.Client().ImageInspect(ctx, img)
	return img, err
}

// start starts the container of name once per test binary with fn.
func start(t *testing.T, name string, fn func(context.Context) (target, func(), error)) target {
	t.Helper()
	startMu.Lock()
	defer startMu.Unlock()
	if err, failed := startErr[name]; failed {
		t.Fatalf("%s container: %v", name, err)
	}
	if tg, ok := started[name]; ok {
		return tg
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tg, stop, err := fn(ctx)
	if stop != nil {
		stops = append(stops, stop)
	}
	if err != nil {
		startErr[name] = err
		t.Fatalf("%s container: %v", name, err)
	}
	tg.kip848 = tg.kip848 && servesKIP848(t, tg.brokers)
	t.Logf("%s: brokers %v, KIP-848 %v", name, tg.brokers, tg.kip848)
	started[name] = tg
	return tg
}

// startKafka starts Apache Kafka in KRaft mode with group timeouts short
// enough for the tests (the defaults are 6s classic and 45s KIP-848).
func startKafka(ctx context.Context) (target, func(), error) {
	c, err := kafka.Run(ctx, imageOf("kafka"), testcontainers.WithEnv(map[string]string{
		"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS":             "1000",
		"KAFKA_GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS":    "1000",
		"KAFKA_GROUP_CONSUMER_SESSION_TIMEOUT_MS":        "2000",
		"KAFKA_GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS": "200",
		"KAFKA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS":     "500",
		"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                "false",
	}))
	stop := func() {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
	}
	if err != nil {
		return target{}, stop, err
	}
	brokers, err := c.Brokers(ctx)
	if err != nil {
		return target{}, stop, err
	}
	return target{name: "kafka", brokers: brokers, kip848: true, session: 2 * time.Second}, stop, nil
}

// startRedpanda starts Redpanda in dev-container mode with the same
// classic-group timeouts. Only the classic protocol runs on it: the tests
// set no KIP-848 session timeout for Redpanda.
func startRedpanda(ctx context.Context) (target, func(), error) {
	c, err := redpanda.Run(ctx, imageOf("redpanda"),
		redpanda.WithBootstrapConfig("group_min_session_timeout_ms", 1000),
		redpanda.WithBootstrapConfig("group_initial_rebalance_delay", 0),
	)
	stop := func() {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
	}
	if err != nil {
		return target{}, stop, err
	}
	seed, err := c.KafkaSeedBroker(ctx)
	if err != nil {
		return target{}, stop, err
	}
	return target{name: "redpanda", brokers: []string{seed}, session: 2 * time.Second}, stop, nil
}

// servesKIP848 reports whether every broker of the cluster answers
// ConsumerGroupHeartbeat (KIP-848).
func servesKIP848(t *testing.T, brokers []string) bool {
	t.Helper()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		t.Fatalf("ApiVersions on %v: %v", brokers, err)
	}
	ok := len(versions) > 0
	for _, v := range versions {
		if v.Err != nil {
			t.Fatalf("ApiVersions on %v: %v", brokers, v.Err)
		}
		if _, has := v.KeyMaxVersion(int16(kmsg.ConsumerGroupHeartbeat)); !has {
			ok = false
		}
	}
	return ok
}

// newTopic creates a topic of its own for one test on tg.
func newTopic(t *testing.T, tg target, partitions int32) string {
	t.Helper()
	topic := fmt.Sprintf("workrouter-it-%s-%d", strings.ToLower(strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())), time.Now().UnixNano())
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(tg.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, -1, nil, topic); err != nil {
		t.Fatalf("creating topic %s on %s: %v", topic, tg.name, err)
	}
	// Kafka answers CreateTopics once its controller has committed the
	// topic; a broker's metadata (even the same node's, in combined mode)
	// catches up a moment later, and until then a Metadata request says
	// UNKNOWN_TOPIC_OR_PARTITION, which router.New reports as
	// ErrTopicNotFound. Wait until the topic and every partition's leader
	// are in the metadata.
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == int(partitions) {
				ready := true
				for _, p := range td.Partitions {
					ready = ready && p.Err == nil && p.Leader >= 0
				}
				if ready {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s on %s: not in the metadata after it was created: %v", topic, tg.name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Cleanup(func() {
		adm, err := kadm.NewOptClient(kgo.SeedBrokers(tg.brokers...))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = adm.DeleteTopics(ctx, topic)
			cancel()
			adm.Close()
		}
	})
	return topic
}

// startBrokerImage starts workrouter's image with the embedded broker,
// `workrouter-lab broker` (the image holds the product binary alone: the
// static workrouter-lab of labBinary is copied in and run as its
// entrypoint), through testcontainers, on the host network (no bridge, no container address:
// the broker listens on 127.0.0.1, on a port it picks and logs), waits for
// that log line and reads the address from it. The reaper's image is
// pulled from a registry: run with TESTCONTAINERS_RYUK_DISABLED=true where
// there is none (.ci/run does); the stop function removes the container.
// Only the classic protocol runs on it: its KIP-848 session timeout is
// kfake's 45s, far longer than the tests'.
func startBrokerImage(ctx context.Context) (target, func(), error) {
	const ready = "workrouter broker listening on "
	// The host network as the provider's "default bridge": otherwise it
	// attaches the container to a bridge network it creates (the engine
	// here has no default bridge).
	p, err := testcontainers.NewDockerProvider(testcontainers.WithDefaultBridgeNetwork("host"))
	if err != nil {
		return target{}, nil, err
	}
	lab, err := labBinary()
	if err != nil {
		return target{}, nil, err
	}
	c, err := p.CreateContainer(ctx, testcontainers.ContainerRequest{
		Image:              imageOf("broker"),
		Files:              []testcontainers.ContainerFile{{HostFilePath: lab, ContainerFilePath: "/workrouter-lab", FileMode: 0o755}},
		Entrypoint:         []string{"/workrouter-lab"},
		Cmd:                []string{"broker", "--listen", "127.0.0.1:0", "--min-session-timeout", "1s"},
		HostConfigModifier: func(hc *container.HostConfig) { hc.NetworkMode = "host" },
		WaitingFor:         wait.ForLog(ready).WithStartupTimeout(time.Minute),
	})
	stop := func() {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
	}
	if err != nil {
		return target{}, stop, err
	}
	if err := c.Start(ctx); err != nil {
		return target{}, stop, err
	}
	logs, err := c.Logs(ctx)
	if err != nil {
		return target{}, stop, err
	}
	defer logs.Close()
	b, err := io.ReadAll(logs)
	if err != nil {
		return target{}, stop, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if _, rest, ok := strings.Cut(line, ready); ok {
			addr, _, _ := strings.Cut(rest, " ")
			if !strings.HasPrefix(addr, "127.0.0.1:") {
				return target{}, stop, fmt.Errorf("the broker container listens on %q, not on 127.0.0.1", addr)
			}
			return target{name: "broker", brokers: []string{addr}, session: 2 * time.Second}, stop, nil
		}
	}
	return target{}, stop, fmt.Errorf("the broker container logged no %q line: %q", ready, b)
}
