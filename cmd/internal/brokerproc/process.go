package brokerproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// ErrRunning is matched by the error Restart returns for a broker that is
// still running (Restart follows Kill).
var ErrRunning = errors.New("brokerproc: the broker is still running")

// readyTimeout bounds the wait for a starting broker's ready line.
const readyTimeout = 30 * time.Second

// Process is the harness's handle on a harness broker process. Kill,
// Restart and Stop are called from one goroutine at a time (the chaos
// scheduler's); Addr, Pid and the interception commands from any
// goroutine.
type Process struct {
	bin    cluster.Binary
	logTo  io.Writer
	client *http.Client

	mu   sync.Mutex
	cfg  Config // Listen is the real address after the first start
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a harness broker from bin with cfg and waits until it is
// ready; its log (stderr) goes to logTo (nil discards; written from a
// goroutine of the Process until the process exits). The caller must end
// it with Stop.
func Start(ctx context.Context, bin cluster.Binary, cfg Config, logTo io.Writer) (*Process, error) {
	if len(bin.Argv) == 0 {
		return nil, fmt.Errorf("%w: no broker command", ErrConfig)
	}
	if cfg.DataDir == "" || cfg.Control == "" || cfg.Topic == "" || cfg.Partitions < 1 {
		return nil, fmt.Errorf("%w: a data dir, a control socket and a topic with partitions are required", ErrConfig)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if logTo == nil {
		logTo = io.Discard
	}
	control := cfg.Control
	p := &Process{bin: bin, logTo: logTo, cfg: cfg, client: &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			// A connection to a killed predecessor must never be reused.
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", control)
			},
		},
	}}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// start starts the process with p.cfg and waits for its ready line.
func (p *Process) start(ctx context.Context) error {
	p.mu.Lock()
	cfg := p.cfg
	p.mu.Unlock()
	cmd := exec.Command(p.bin.Argv[0], append(slices.Clone(p.bin.Argv[1:]), cfg.Args()...)...)
	cmd.Env = append(os.Environ(), p.bin.Env...)
	cmd.Env = append(cmd.Env, EnvHarnessBroker+"=1")
	cmd.Stderr = p.logTo
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("brokerproc: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("brokerproc: starting the broker: %w", err)
	}
	done := make(chan struct{})
	ready := make(chan Ready, 1)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			var r Ready
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Addr != "" {
				ready <- r
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case r := <-ready:
		p.mu.Lock()
		p.cfg.Listen, p.cmd, p.done = r.Addr, cmd, done
		p.mu.Unlock()
		return nil
	case <-done:
		return fmt.Errorf("brokerproc: the broker exited before it was ready: %s", cmd.ProcessState)
	case <-t.C:
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	<-done
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("brokerproc: the broker was not ready within %s", readyTimeout)
}

// Addr is the host:port Kafka clients connect to; it stays the same
// across restarts.
func (p *Process) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.Listen
}

// Pid is the current broker process's ID.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Kill kills the broker process with SIGKILL and waits for it to exit. It
// reports whether the process died of that SIGKILL (false if it had
// exited before).
func (p *Process) Kill() bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Restart starts the broker again after Kill, on the same address, data
// dir and control socket, and waits until it is ready.
func (p *Process) Restart(ctx context.Context) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
	default:
		return ErrRunning
	}
	return p.start(ctx)
}

// Stop asks the broker to shut down cleanly (SIGTERM) and waits up to
// grace for it, then kills it. It reports whether it exited by itself.
func (p *Process) Stop(grace time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	defer p.client.CloseIdleConnections()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return cmd.ProcessState.Success()
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
		return false
	}
}

// post sends one control command and decodes a count reply, if any.
func (p *Process) post(ctx context.Context, path string, form url.Values) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://harness-broker"+path, nil)
	if err != nil {
		return 0, err
	}
	req.URL.RawQuery = form.Encode()
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("brokerproc: %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusNoContent:
		return 0, nil
	case http.StatusOK:
		var r countReply
		if err := json.Unmarshal(body, &r); err != nil {
			return 0, fmt.Errorf("brokerproc: %s: %w", path, err)
		}
		return r.N, nil
	}
	return 0, fmt.Errorf("brokerproc: %s: %s: %s", path, resp.Status, body)
}

// Blackhole makes the broker hold back member's group heartbeats (no
// reply) until the returned end is called; end reports how many it held.
func (p *Process) Blackhole(ctx context.Context, member string) (end func() (int, error), err error) {
	if _, err := p.post(ctx, "/blackhole", url.Values{"member": {member}}); err != nil {
		return nil, err
	}
	return func() (int, error) { return p.post(context.Background(), "/blackhole/end", nil) }, nil
}

// Coordinator makes the broker answer member's heartbeats and offset
// commits with mode for d; end (call it after d) reports how many
// requests it answered so.
func (p *Process) Coordinator(ctx context.Context, member string, mode CoordMode, d time.Duration) (end func() (int, error), err error) {
	form := url.Values{"member": {member}, "mode": {strconv.Itoa(int(mode))}, "for": {d.String()}}
	if _, err := p.post(ctx, "/coordinator", form); err != nil {
		return nil, err
	}
	return func() (int, error) { return p.post(context.Background(), "/coordinator/end", nil) }, nil
}
