// Package opshttp serves a Worker's operations endpoints: /metrics from
// the caller's Prometheus gatherer, /healthz (liveness) and /readyz
// (readiness by consumer.Worker.Readiness, with the reasons in the body of
// a 503). The workrouter CLI's --metrics-addr serves this handler; a
// program that builds its own worker mounts it on its own server:
//
//	h, err := opshttp.New(opshttp.Config{Gatherer: reg, Worker: w, MaxStall: 5 * time.Minute})
//	...
//	srv := &http.Server{Addr: ":9464", Handler: h}
//
// The handler starts no goroutine; the caller owns the server.
package opshttp

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/workrouter/workrouter/consumer"
)

// Readier is what /readyz asks: *consumer.Worker[Tx] is one, for any Tx.
type Readier interface {
	Readiness(maxStall time.Duration) consumer.Readiness
}

// Config configures a Handler.
type Config struct {
	// Gatherer is what /metrics serves (a *prometheus.Registry, for
	// example the one consumerprom.New registered the Worker's metrics
	// on). Required.
	Gatherer prometheus.Gatherer
	// Worker answers /readyz. Nil makes /readyz answer 200 while the
	// process serves, like /healthz (for a process that runs no Worker).
	Worker Readier
	// MaxStall makes /readyz answer 503 while a partition has been
	// stalled or blocked longer than it (consumer.Worker.Readiness); 0:
	// stalls do not affect readiness.
	MaxStall time.Duration
}

// ErrConfig is matched by every error New returns.
var ErrConfig = errors.New("opshttp: invalid config")

// Handler serves /metrics, /healthz and /readyz; any other path is 404.
type Handler struct {
	mux *http.ServeMux
	cfg Config
}

// New validates cfg and returns its Handler.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.Gatherer == nil:
		return nil, fmt.Errorf("%w: nil Gatherer", ErrConfig)
	case cfg.MaxStall < 0:
		return nil, fmt.Errorf("%w: negative MaxStall %s", ErrConfig, cfg.MaxStall)
	case cfg.MaxStall > 0 && cfg.Worker == nil:
		return nil, fmt.Errorf("%w: MaxStall %s without a Worker", ErrConfig, cfg.MaxStall)
	}
	h := &Handler{mux: http.NewServeMux(), cfg: cfg}
	opts := promhttp.HandlerOpts{}
	if r, ok := cfg.Gatherer.(prometheus.Registerer); ok {
		opts.Registry = r // counts the handler's own errors there
	}
	h.mux.Handle("/metrics", promhttp.HandlerFor(cfg.Gatherer, opts))
	h.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	h.mux.HandleFunc("/readyz", h.readyz)
	return h, nil
}

// ServeHTTP serves /metrics, /healthz and /readyz.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// readyz answers 200 "ready", or 503 with "not ready" and the reasons of
// consumer.Readiness: the whole worker's, or one line per blocking
// partition ("partition 3: stalled for 2m0s (7 attempts): <cause>").
func (h *Handler) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if h.cfg.Worker == nil {
		fmt.Fprintln(w, "ready")
		return
	}
	r := h.cfg.Worker.Readiness(h.cfg.MaxStall)
	if r.Ready {
		fmt.Fprintln(w, "ready")
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, "not ready\n%s\n", r)
}
