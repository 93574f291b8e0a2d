package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/workrouter/workrouter/consumer/opshttp"
)

// OpsServer serves /metrics, /healthz and /readyz for a long-running command.
type OpsServer struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

// loopbackDefault turns an address without a host (":9464") into a loopback
// one: metrics are only exposed on another interface when the user names it.
func loopbackDefault(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--metrics-addr %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// StartOps listens on addr ("" disables it and returns nil) and serves
// opshttp's handler: the registry's metrics, liveness (always 200 while
// the process serves) and readiness (worker's Readiness with maxStall; a
// nil worker is always ready). The server runs on a goroutine this
// function starts; stop it with Close.
func StartOps(addr string, reg *prometheus.Registry, worker opshttp.Readier, maxStall time.Duration, logger *slog.Logger) (*OpsServer, error) {
	if addr == "" {
		return nil, nil
	}
	addr, err := loopbackDefault(addr)
	if err != nil {
		return nil, err
	}
	h, err := opshttp.New(opshttp.Config{Gatherer: reg, Worker: worker, MaxStall: maxStall})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	o := &OpsServer{srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, addr: ln.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		if err := o.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("ops server stopped", "err", err)
		}
	}()
	logger.Info("serving /metrics, /healthz and /readyz", "addr", o.addr)
	return o, nil
}

// Close stops the server and waits for its goroutine. A nil server is fine.
func (o *OpsServer) Close() {
	if o == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.srv.Shutdown(ctx)
	<-o.done
}
