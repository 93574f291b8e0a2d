package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/clitest"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/internal/testredis"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
)

// TestWorkerServesSinkMetrics: `workrouter worker --metrics-addr` serves
// the sink's own series beside the consumer's: PostgreSQL's gap
// compactions, Redis's held watches.
func TestWorkerServesSinkMetrics(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) cluster.StoreConfig
		want  []string
	}{
		{"postgres", func(t *testing.T) cluster.StoreConfig {
			return cluster.StoreConfig{PostgresDSN: testpg.DSN(t), SchemaPrefix: "wr_metrics"}
		}, []string{`workrouter_postgres_gap_compactions_total{outcome="busy"}`, `workrouter_sink_operations_total{backend="postgres"`}},
		{"redis", func(t *testing.T) cluster.StoreConfig {
			return cluster.StoreConfig{RedisURL: testredis.URL(t), SchemaPrefix: "wr-metrics"}
		}, []string{`workrouter_redis_held_watches `, `workrouter_sink_operations_total{backend="redis"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.store(t)
			ctx := context.Background()
			st, err := cluster.OpenStore(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Topics: map[string]int32{ledger.Topic: 2}})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			w := clitest.Start(t, []string{"worker", "--example", "ledger", "--brokers", b.Addr(), "--sink", st.WorkerSpec("w1"),
				"--client-id", "w1", "--metrics-addr", "127.0.0.1:0"})
			select {
			case <-w.Stdout.FirstLine():
			case <-time.After(clitest.Deadline):
				t.Fatalf("worker did not start; stderr:\n%s", w.Stderr)
			}
			rt, err := router.New(ctx, router.Config{Brokers: []string{b.Addr()}, Topic: ledger.Topic})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			for i := range 20 {
				if _, err := rt.Send(ctx, ledger.Deposit(fmt.Sprintf("acct-%d", i%4), fmt.Sprintf("id-%d", i), i/4, 100)); err != nil {
					t.Fatal(err)
				}
			}
			addr := opsAddr(t, w.Stderr)
			var body string
			applied := fmt.Sprintf(`workrouter_sink_records_total{backend=%q,outcome="applied"} 20`, tc.name)
			testwait.For(t, clitest.Deadline, "20 records applied on /metrics", func() bool {
				body = metric(addr)
				return strings.Contains(body, applied)
			})
			for _, want := range tc.want {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "workrouter_redis|workrouter_postgres"))
				}
			}
			w.Cmd.Process.Signal(syscall.SIGINT)
			if code := w.Wait(t); code != 0 {
				t.Fatalf("worker exited %d after SIGINT; stderr:\n%s", code, w.Stderr)
			}
		})
	}
}

// grepLines returns the lines of text that match re.
func grepLines(text, re string) string {
	r := regexp.MustCompile(re)
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if r.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
