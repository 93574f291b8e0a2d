// Package brokerproc runs the harness's broker: the embedded broker
// (cmd/internal/broker, franz-go's kfake) in a process of its own, so that
// the chaos harness can SIGKILL it and start it again on the same address
// and data directory (docs/design.md#testing), while the faults that need
// request interception (held heartbeats, coordinator errors) keep working.
//
// The process is the workrouter-lab binary started with EnvHarnessBroker=1 (an
// internal entry point like the harness's worker; no command or flag of the
// CLI reaches it). It hosts kfake and an interceptor on kfake's request
// loop, listens for Kafka clients on a fixed host:port, and takes
// interception commands from the harness over HTTP on a Unix socket. When
// it is ready it writes one JSON line (Ready) on its stdout.
//
// Process is the harness's side: it starts the process, reads its ready
// line, kills and restarts it, and sends the interception commands.
//
// It is internal: the chaos harness is its only user.
package brokerproc

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/broker"
)

// EnvHarnessBroker, set to 1 in a workrouter process's environment, makes
// the binary run the harness's broker (Main) instead of the CLI. Only this
// package sets it.
const EnvHarnessBroker = "WORKROUTER_INTERNAL_HARNESS_BROKER"

// ErrConfig is matched by the error Main and Start return for a bad
// configuration.
var ErrConfig = errors.New("brokerproc: invalid config")

// Config is the harness broker's configuration; Args turns it into the
// process's arguments and Main parses them back.
type Config struct {
	// Listen is the host:port Kafka clients connect to and the broker
	// advertises. Port 0 picks a free port (Ready says which); a restart
	// must name the port the first start got.
	Listen string
	// DataDir keeps topics, records and group state across restarts
	// (required).
	DataDir string
	// SyncWrites fsyncs every produced batch before it is acknowledged.
	SyncWrites bool
	// Topic is created with Partitions partitions if it is absent.
	Topic      string
	Partitions int32
	// MinSessionTimeout is the smallest group session timeout accepted.
	MinSessionTimeout time.Duration
	// BrokerConfigs are broker-level configs (key=value).
	BrokerConfigs map[string]string
	// Control is the path of the Unix socket of the control channel.
	Control string
	// Verbose logs kfake's per-request notes (at debug level) on stderr.
	Verbose bool
}

// Args returns the harness broker's arguments for c.
func (c Config) Args() []string {
	args := []string{
		"--listen", c.Listen,
		"--data-dir", c.DataDir,
		"--topic", c.Topic,
		"--partitions", strconv.Itoa(int(c.Partitions)),
		"--min-session-timeout", c.MinSessionTimeout.String(),
		"--control", c.Control,
	}
	if c.SyncWrites {
		args = append(args, "--sync-writes")
	}
	if c.Verbose {
		args = append(args, "--verbose")
	}
	for k, v := range c.BrokerConfigs {
		args = append(args, "--broker-config", k+"="+v)
	}
	return args
}

// kvFlag collects repeated key=value flags.
type kvFlag map[string]string

func (f kvFlag) String() string { return fmt.Sprint(map[string]string(f)) }

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	f[k] = v
	return nil
}

// parseArgs parses Args' output.
func parseArgs(args []string) (Config, error) {
	var c Config
	c.BrokerConfigs = map[string]string{}
	fs := flag.NewFlagSet("harness-broker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:0", "host:port to listen on")
	fs.StringVar(&c.DataDir, "data-dir", "", "data directory")
	fs.BoolVar(&c.SyncWrites, "sync-writes", false, "fsync every produced batch")
	fs.StringVar(&c.Topic, "topic", "", "topic to create if absent")
	partitions := fs.Int("partitions", 1, "partitions of the topic")
	fs.DurationVar(&c.MinSessionTimeout, "min-session-timeout", 0, "smallest session timeout accepted")
	fs.Var(kvFlag(c.BrokerConfigs), "broker-config", "broker config key=value (repeatable)")
	fs.StringVar(&c.Control, "control", "", "Unix socket of the control channel")
	fs.BoolVar(&c.Verbose, "verbose", false, "log kfake's per-request notes")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c.Partitions = int32(*partitions)
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("%w: unexpected arguments %v", ErrConfig, fs.Args())
	case c.DataDir == "" || c.Control == "" || c.Topic == "":
		return c, fmt.Errorf("%w: --data-dir, --control and --topic are required", ErrConfig)
	}
	return c, nil
}

// Ready is the line the harness broker writes on its stdout once it
// serves Kafka clients and the control channel.
type Ready struct {
	Addr    string `json:"addr"`
	Control string `json:"control"`
	Pid     int    `json:"pid"`
}

// Main runs the harness broker with args (Config.Args) until ctx ends,
// writing Ready on stdout and its log on stderr. The process's main
// goroutine calls it.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseArgs(args)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if cfg.Verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	b, err := startBroker(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer b.Close()
	in := newInterceptor(b.Cluster())
	defer in.close()

	// A socket file left by a killed predecessor is ours to replace.
	if err := os.Remove(cfg.Control); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("brokerproc: control socket: %w", err)
	}
	ln, err := net.Listen("unix", cfg.Control)
	if err != nil {
		return fmt.Errorf("brokerproc: control socket: %w", err)
	}
	srv := &http.Server{Handler: newControl(in), ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		wg.Wait()
	}()
	line, _ := json.Marshal(Ready{Addr: b.Addr(), Control: cfg.Control, Pid: os.Getpid()})
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return err
	}
	logger.Info("harness broker ready", "addr", b.Addr(), "data_dir", cfg.DataDir, "sync_writes", cfg.SyncWrites)
	<-ctx.Done()
	logger.Info("harness broker stopping", "reason", context.Cause(ctx))
	return nil
}

// startBroker starts the broker on cfg.Listen, retrying for a while if
// the address is still in use (a restart right after a kill).
func startBroker(ctx context.Context, cfg Config, logger *slog.Logger) (*broker.Broker, error) {
	bc := broker.Config{
		Listen:            cfg.Listen,
		DataDir:           cfg.DataDir,
		SyncWrites:        cfg.SyncWrites,
		Topics:            map[string]int32{cfg.Topic: cfg.Partitions},
		MinSessionTimeout: cfg.MinSessionTimeout,
		BrokerConfigs:     cfg.BrokerConfigs,
		Logger:            logger,
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := broker.Start(bc)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return b, err
		}
		logger.Warn("listen address in use; retrying", "addr", cfg.Listen, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// control serves the control channel: one fault of each kind at a time,
// ended by its /end call. Its handlers run on the HTTP server's
// goroutines.
type control struct {
	in *interceptor

	mu    sync.Mutex
	hbEnd func() int
	coEnd func() int
}

// countReply is the body of an /end answer.
type countReply struct {
	N int `json:"n"`
}

// newControl returns the control channel's handler over in.
func newControl(in *interceptor) http.Handler {
	c := &control{in: in}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /blackhole", c.blackhole)
	mux.HandleFunc("POST /blackhole/end", c.endBlackhole)
	mux.HandleFunc("POST /coordinator", c.coordinator)
	mux.HandleFunc("POST /coordinator/end", c.endCoordinator)
	return mux
}

func (c *control) blackhole(w http.ResponseWriter, r *http.Request) {
	member := r.FormValue("member")
	if member == "" {
		http.Error(w, "no member", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hbEnd != nil {
		http.Error(w, "a heartbeat blackhole is active", http.StatusConflict)
		return
	}
	c.hbEnd = c.in.blackhole(member)
	w.WriteHeader(http.StatusNoContent)
}

func (c *control) endBlackhole(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	end := c.hbEnd
	c.hbEnd = nil
	c.mu.Unlock()
	if end == nil {
		http.Error(w, "no heartbeat blackhole is active", http.StatusConflict)
		return
	}
	_ = json.NewEncoder(w).Encode(countReply{N: end()})
}

func (c *control) coordinator(w http.ResponseWriter, r *http.Request) {
	member := r.FormValue("member")
	mode, merr := strconv.Atoi(r.FormValue("mode"))
	d, derr := time.ParseDuration(r.FormValue("for"))
	if member == "" || merr != nil || derr != nil || d <= 0 || mode < int(CoordNotCoordinator) || mode > int(CoordNoReply) {
		http.Error(w, "want member, mode (0-2) and for (a duration)", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.coEnd != nil {
		http.Error(w, "a coordinator fault is active", http.StatusConflict)
		return
	}
	c.coEnd = c.in.coordinator(member, CoordMode(mode), d)
	w.WriteHeader(http.StatusNoContent)
}

func (c *control) endCoordinator(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	end := c.coEnd
	c.coEnd = nil
	c.mu.Unlock()
	if end == nil {
		http.Error(w, "no coordinator fault is active", http.StatusConflict)
		return
	}
	_ = json.NewEncoder(w).Encode(countReply{N: end()})
}
