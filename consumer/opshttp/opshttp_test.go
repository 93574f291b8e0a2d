package opshttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/opshttp"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/sink/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// attempts matches a stall's count in a readiness reason: "(1 attempt): "
// or "(<n> attempts): ".
var attempts = regexp.MustCompile(`\([0-9]+ attempts?\): `)

// TestReadyzFailsWhileStalled: /readyz answers 200 while the worker serves
// both partitions, then 503 once a command without a handler has stalled
// one of them longer than MaxStall, its body naming that partition, the
// stall and its cause; /healthz stays 200 and /metrics serves the
// caller's gatherer.
func TestReadyzFailsWhileStalled(t *testing.T) {
	const topic = "cmds"
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	w, err := consumer.New(t.Context(), consumer.Config[*memory.Tx]{
		Brokers: broker.ListenAddrs(), Group: "g", Topic: topic, Sink: memory.New(),
		Handlers:          map[string]consumer.Handler[*memory.Tx]{"touch": func(context.Context, *memory.Tx, consumer.Command) error { return nil }},
		SessionTimeout:    time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RetryBackoff:      10 * time.Millisecond,
		MaxRetryBackoff:   50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	reg := prometheus.NewRegistry()
	probe := prometheus.NewCounter(prometheus.CounterOpts{Name: "opshttp_test_probe_total", Help: "A counter of the test's own."})
	reg.MustRegister(probe)
	h, err := opshttp.New(opshttp.Config{Gatherer: reg, Worker: w, MaxStall: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	waitFor(t, "/readyz to answer 200", func() bool { code, _ := get(t, srv.URL+"/readyz"); return code == http.StatusOK })

	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := envelope.Partition([]byte("k"), 2)
	r, err := envelope.Encode(topic, p, envelope.Command{Key: []byte("k"), Type: "no-such-type", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var body string
	waitFor(t, "/readyz to answer 503", func() bool {
		var code int
		code, body = get(t, srv.URL+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	want := fmt.Sprintf("partition %d: stalled for ", p)
	// "(1 attempt)" or "(<n> attempts)": the stall may be seen after its
	// first attempt.
	if !strings.HasPrefix(body, "not ready\n"+want) || !attempts.MatchString(body) || !strings.Contains(body, "no-such-type") {
		t.Fatalf("/readyz body %q, want \"not ready\" then %q…(<n> attempt[s]): <cause naming no-such-type>", body, want)
	}
	if other := fmt.Sprintf("partition %d:", 1-p); strings.Contains(body, other) {
		t.Fatalf("/readyz body %q names %s, which is not stalled", body, other)
	}
	if code, b := get(t, srv.URL+"/healthz"); code != http.StatusOK || b != "ok\n" {
		t.Fatalf("/healthz = %d %q while stalled, want 200 ok", code, b)
	}
	if code, b := get(t, srv.URL+"/metrics"); code != http.StatusOK || !strings.Contains(b, "opshttp_test_probe_total 0") {
		t.Fatalf("/metrics = %d without the gatherer's counter:\n%s", code, b)
	}
}

// TestNewValidates: New refuses a config it cannot serve.
func TestNewValidates(t *testing.T) {
	reg := prometheus.NewRegistry()
	for name, cfg := range map[string]opshttp.Config{
		"no gatherer":            {},
		"negative MaxStall":      {Gatherer: reg, MaxStall: -time.Second},
		"MaxStall and no worker": {Gatherer: reg, MaxStall: time.Second},
	} {
		if _, err := opshttp.New(cfg); !errors.Is(err, opshttp.ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
	h, err := opshttp.New(opshttp.Config{Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	if code, b := get(t, srv.URL+"/readyz"); code != http.StatusOK || b != "ready\n" {
		t.Fatalf("/readyz without a worker = %d %q, want 200 ready", code, b)
	}
	if code, _ := get(t, srv.URL+"/other"); code != http.StatusNotFound {
		t.Fatalf("/other = %d, want 404", code)
	}
}
