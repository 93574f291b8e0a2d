// Package cluster runs and observes a cluster of `workrouter worker
// --example ledger` processes for the demo and the chaos harness: it starts
// worker processes of the workrouter binary, follows their structured logs
// (claims with their epochs, fenced writes, self-freezes, chaos events),
// produces ledger commands, opens the ledger sink (SQLite or PostgreSQL) to
// read back its own records, and tells whether Kafka lag is zero.
//
// It is internal: the demo and the chaos harness are its only users.
package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/faults"
)

// Log messages of the worker that Worker follows. They are the messages the
// consumer package and the worker command log.
const (
	MsgClaimed       = "partition claimed"
	MsgRevoked       = "partition revoked"
	MsgLost          = "partition lost"
	MsgApplyFenced   = "apply fenced; partition stopped"
	MsgClaimFenced   = "claim fenced; partition stopped"
	MsgFreezing      = faults.MsgFreezing
	MsgApplyRetrying = "apply failed; retrying batch"
)

// ErrWorkerArgs is matched by the error StartWorker returns for an empty
// command line.
var ErrWorkerArgs = errors.New("cluster: no worker command")

// Claim is a tenure a worker logged claiming: its epoch, member ID and the
// NextOffset the sink returned.
type Claim struct {
	Epoch  int32
	Member string
	Next   int64
}

// Freeze is the token of the batch a worker froze itself before.
type Freeze struct {
	Partition int32
	Epoch     int32
	Member    string
}

// WorkerOptions are the common flags of a ledger worker process: its
// brokers, topic, group, --sink value and name (client ID, also the
// worker's name in timelines).
type WorkerOptions struct {
	Brokers        []string
	Topic          string
	Group          string
	SinkSpec       string
	Name           string
	SessionTimeout time.Duration
	Protocol       string // "cooperative" (default) or "kip848"
	MaxBatch       int    // default 50
	// RebalanceTimeout of the members; default 60s (the worker's).
	RebalanceTimeout time.Duration
}

// Args returns the worker command's arguments (after the executable) for o.
func (o WorkerOptions) Args() []string {
	if o.MaxBatch == 0 {
		o.MaxBatch = 50
	}
	if o.Protocol == "" {
		o.Protocol = "cooperative"
	}
	if o.RebalanceTimeout == 0 {
		o.RebalanceTimeout = 60 * time.Second
	}
	return []string{"worker",
		"--example", "ledger",
		"--brokers", strings.Join(o.Brokers, ","),
		"--topic", o.Topic,
		"--group", o.Group,
		"--sink", o.SinkSpec,
		"--client-id", o.Name,
		"--protocol", o.Protocol,
		"--max-batch", strconv.Itoa(o.MaxBatch),
		"--session-timeout", o.SessionTimeout.String(),
		"--heartbeat-interval", "200ms",
		"--revoke-timeout", "5s",
		"--rebalance-timeout", o.RebalanceTimeout.String(),
		"--log-level", "info",
	}
}

// Worker is one running worker process and what its log has said so far.
// Its methods may be called from any goroutine.
type Worker struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}

	mu      sync.Mutex
	claims  map[int32]Claim
	member  string
	fenced  []string
	freezes []Freeze
	counts  map[string]int
	errs    []string
}

// StartWorker starts argv[0] with argv[1:] followed by args, and follows
// its stderr (slog text format). The caller owns the process: it must end
// it with Stop or Kill; Done is closed when it has exited and its log has
// been read to the end.
func StartWorker(name string, argv []string, args ...string) (*Worker, error) {
	return StartWorkerLogged(name, nil, argv, args...)
}

// StartWorkerLogged is StartWorker that also copies every line of the
// worker's log to logTo, if not nil. logTo is written from the goroutine
// following the log and must not be closed before Done.
func StartWorkerLogged(name string, logTo io.Writer, argv []string, args ...string) (*Worker, error) {
	if len(argv) == 0 {
		return nil, ErrWorkerArgs
	}
	cmd := exec.Command(argv[0], append(slices.Clone(argv[1:]), args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	w := &Worker{name: name, cmd: cmd, done: make(chan struct{}), claims: map[int32]Claim{}, counts: map[string]int{}}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cluster: starting worker %s: %w", name, err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			if logTo != nil {
				fmt.Fprintln(logTo, sc.Text())
			}
			w.observe(sc.Text())
		}
		_ = cmd.Wait()
	}()
	return w, nil
}

// observe reads one of the worker's log lines (slog text format).
func (w *Worker) observe(line string) {
	kv := ParseLogfmt(line)
	w.mu.Lock()
	defer w.mu.Unlock()
	part64, _ := strconv.ParseInt(kv["partition"], 10, 32)
	epoch64, _ := strconv.ParseInt(kv["epoch"], 10, 32)
	part, epoch := int32(part64), int32(epoch64)
	msg := kv["msg"]
	w.counts[msg]++
	if m := kv["member"]; m != "" && msg == MsgClaimed {
		w.member = m
	}
	switch msg {
	case MsgClaimed:
		next, _ := strconv.ParseInt(kv["next_offset"], 10, 64)
		w.claims[part] = Claim{Epoch: epoch, Member: kv["member"], Next: next}
	case MsgRevoked, MsgLost:
		if c, ok := w.claims[part]; ok && c.Epoch == epoch {
			delete(w.claims, part)
		}
	case MsgApplyFenced, MsgClaimFenced:
		delete(w.claims, part)
		w.fenced = append(w.fenced, kv["err"])
	case MsgFreezing:
		w.freezes = append(w.freezes, Freeze{Partition: part, Epoch: epoch, Member: kv["member"]})
	}
	if kv["level"] == "ERROR" && !strings.Contains(msg, "fenced") {
		w.errs = append(w.errs, msg+": "+kv["err"])
	}
}

// Name is the worker's name (its client ID).
func (w *Worker) Name() string { return w.name }

// Pid is the worker's process ID.
func (w *Worker) Pid() int { return w.cmd.Process.Pid }

// Owned returns the partitions the worker's log says it holds, with the
// claim of each.
func (w *Worker) Owned() map[int32]Claim {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.claims)
}

// Member is the group member ID of the worker's latest claim ("" before
// its first claim).
func (w *Worker) Member() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.member
}

// Freezes returns the batches the worker froze itself before, in order.
func (w *Worker) Freezes() []Freeze {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.freezes)
}

// FencedCount is how many fenced claims and applies the worker logged.
func (w *Worker) FencedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.fenced)
}

// FencedLines returns the errors of the worker's fenced claims and applies.
func (w *Worker) FencedLines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.fenced)
}

// Count is how many log lines with message msg the worker wrote.
func (w *Worker) Count(msg string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[msg]
}

// Exited reports whether the process has exited.
func (w *Worker) Exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Done is closed once the process has exited and its log is read.
func (w *Worker) Done() <-chan struct{} { return w.done }

// LastErr is the last error the worker logged (fenced outcomes aside).
func (w *Worker) LastErr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) == 0 {
		return "no error logged"
	}
	return w.errs[len(w.errs)-1]
}

// Errors returns the errors the worker logged at level ERROR, fenced
// outcomes aside, as "message: error".
func (w *Worker) Errors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.errs)
}

// Stopped reports whether the process is stopped (SIGSTOP).
func (w *Worker) Stopped() bool { return faults.Stopped(w.cmd.Process.Pid) }

// Signal sends sig to the process.
func (w *Worker) Signal(sig os.Signal) error { return w.cmd.Process.Signal(sig) }

// Stop resumes the process if it is stopped, asks it to leave the group
// (SIGTERM) and waits up to grace for it to exit, then kills it. It reports
// whether the process exited by itself.
func (w *Worker) Stop(grace time.Duration) bool {
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
		return true
	case <-time.After(grace):
		_ = w.cmd.Process.Kill()
		<-w.done
		return false
	}
}

// Kill kills the process (SIGKILL) and waits for it to exit.
func (w *Worker) Kill() {
	_ = w.cmd.Process.Kill()
	<-w.done
}

// StopAll stops every worker concurrently (see Worker.Stop).
func StopAll(workers []*Worker, grace time.Duration) {
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.Stop(grace) })
	}
	wg.Wait()
}

// OwnerOf returns the worker among workers whose latest claim of part has
// the greatest epoch, with that claim; nil if none holds it.
func OwnerOf(workers []*Worker, part int32) (*Worker, Claim) {
	var best *Worker
	var bc Claim
	for _, w := range workers {
		if c, ok := w.Owned()[part]; ok && (best == nil || c.Epoch > bc.Epoch) {
			best, bc = w, c
		}
	}
	return best, bc
}

// Describe formats owned partitions as "p0@epoch3 p4@epoch5".
func Describe(owned map[int32]Claim) string {
	if len(owned) == 0 {
		return "no partitions"
	}
	parts := make([]int32, 0, len(owned))
	for p := range owned {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = fmt.Sprintf("p%d@epoch%d", p, owned[p].Epoch)
	}
	return strings.Join(out, " ")
}

// ParseLogfmt parses a slog text line: key=value pairs, values optionally
// quoted.
func ParseLogfmt(line string) map[string]string {
	out := map[string]string{}
	for len(line) > 0 {
		line = strings.TrimLeft(line, " ")
		eq := strings.IndexByte(line, '=')
		if eq <= 0 {
			break
		}
		key := line[:eq]
		line = line[eq+1:]
		var val string
		if strings.HasPrefix(line, `"`) {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				break
			}
			val, _ = strconv.Unquote(q)
			line = line[len(q):]
		} else {
			sp := strings.IndexByte(line, ' ')
			if sp < 0 {
				sp = len(line)
			}
			val, line = line[:sp], line[sp:]
		}
		out[key] = val
	}
	return out
}
