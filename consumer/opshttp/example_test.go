package opshttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/consumerprom"
	"github.com/workrouter/workrouter/consumer/opshttp"
	"github.com/workrouter/workrouter/sink/memory"
)

// A program that builds its own worker serves its operations endpoints
// with the handler: /metrics from its registry (the worker's metrics
// registered there by consumerprom), /readyz by the worker's readiness
// rule.
func Example() {
	broker, _ := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	defer broker.Close()

	reg := prometheus.NewRegistry()
	metrics, err := consumerprom.New(reg, "order-workers")
	if err != nil {
		panic(err)
	}
	w, err := consumer.New(context.Background(), consumer.Config[*memory.Tx]{
		Brokers:   broker.ListenAddrs(),
		Group:     "order-workers",
		Topic:     "orders",
		Sink:      memory.New(),
		Handlers:  map[string]consumer.Handler[*memory.Tx]{"touch": func(context.Context, *memory.Tx, consumer.Command) error { return nil }},
		Observers: []consumer.Observer{metrics},
	})
	if err != nil {
		panic(err)
	}
	defer w.Close()

	h, err := opshttp.New(opshttp.Config{Gatherer: reg, Worker: w, MaxStall: 5 * time.Minute})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h) // in production: &http.Server{Addr: ":9464", Handler: h}
	defer srv.Close()

	for {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			fmt.Printf("%d %s", resp.StatusCode, body)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output: 200 ready
}
