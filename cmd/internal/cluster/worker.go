// Package cluster runs and observes a cluster of workrouter worker
// processes for the demo, the chaos harness, the process-level fault tests
// and the takeover benchmark: it starts the harness's worker (the workrouter
// binary with EnvHarnessWorker=1: the product worker of the ledger example
// plus the fault hooks of package faults), follows each worker's event
// stream (consumer/eventlog on an inherited pipe: claims, revokes, fenced
// writes, applied batches, the hooks' own fault events) — never its log —
// produces ledger commands (and, for the chaos harness, poison records
// from a foreign producer), opens the ledger sink (SQLite or PostgreSQL) to
// read back its own records, dead letters included, and checks the
// invariants over them with internal/invariants.
//
// It is internal: the harnesses are its only users.
package cluster

import (
	"bufio"
	"bytes"
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
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/eventlog"
)

// EnvHarnessWorker, set to 1 in a workrouter-lab process's environment,
// makes the binary run the harness's worker instead of the CLI (see
// cmd/workrouter-lab/harness.go; the product binary, cmd/workrouter, has
// no harness). Only this package sets it.
const EnvHarnessWorker = "WORKROUTER_INTERNAL_HARNESS_WORKER"

// eventsFD is the file descriptor a worker writes its events to: the
// first of exec.Cmd.ExtraFiles.
const eventsFD = 3

// ErrWorkerArgs is matched by the error StartWorker returns for an empty
// command line.
var ErrWorkerArgs = errors.New("cluster: no worker command")

// Binary is how to start the workrouter-lab binary: Argv (the executable
// and any leading arguments) and extra environment entries ("K=V"). The
// lab's commands pass their own executable; tests pass their re-executed
// test binary.
type Binary struct {
	Argv []string
	Env  []string
	// EventsOnStdout reads the worker's events from its standard output
	// (lines that are not JSON objects, such as the worker's banner, go to
	// the log) instead of an inherited pipe: for a worker in a container
	// (`docker run`), which inherits no file descriptor but its standard
	// streams. Its WorkerOptions need EventsPath "/dev/stdout".
	EventsOnStdout bool
}

// Claim is a tenure a worker claimed: its epoch, member ID and the
// NextOffset the sink returned.
type Claim struct {
	Epoch  int32
	Member string
	Next   int64
}

// Batch is a batch a fault hook acted on (a freeze, a hang): its token's
// partition, epoch and member, its first and last offsets and its number
// of records (fewer than Last-First+1 for a lane's batch, which holds its
// keys' records only), and for a hang the database session's backend ID
// (0 if unknown).
type Batch struct {
	Partition int32
	Epoch     int32
	Member    string
	First     int64
	Last      int64
	Records   int
	PID       int
}

// Freeze is the batch a worker froze itself before.
type Freeze = Batch

// Transition is a partition a worker claimed (Kind consumer.KindClaimed)
// or let go (KindRevoked, KindLost, KindFenced), with its tenure's epoch
// and the time the worker reported it (its event's time).
type Transition struct {
	Kind      string
	Partition int32
	Epoch     int32
	At        time.Time
}

// WorkerOptions are the common flags of a ledger worker process: its
// brokers, topic, group, --sink value and name (client ID, also the
// worker's name in timelines), and the fault hooks it installs.
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
	// KeyConcurrency is the worker's --key-concurrency, its lanes per
	// partition (consumer.Config.KeyConcurrency); 0 or 1 passes no flag:
	// the worker's default, one lane.
	KeyConcurrency int
	// Hooks are fault-hook flags of the harness's worker, such as
	// "--chaos" or "--freeze-before-batch=4".
	Hooks []string
	// Conn are the connection flags (TLS, SASL) of the worker; a password
	// goes in the Binary's Env, never here.
	Conn []string
	// EventsPath is the worker's --events; default the inherited pipe
	// StartWorker makes ("/dev/fd/3"); "/dev/stdout" with a Binary whose
	// EventsOnStdout is set.
	EventsPath string
}

// Args returns the harness worker's arguments (after the executable) for o.
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
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 10 * time.Second
	}
	if o.EventsPath == "" {
		o.EventsPath = "/dev/fd/" + strconv.Itoa(eventsFD)
	}
	args := []string{
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
		"--events", o.EventsPath,
		// Lag events four times a second: the reports draw the lag from
		// them (a demo lasts a few seconds).
		"--lag-interval", "250ms",
	}
	if o.KeyConcurrency > 1 {
		args = append(args, "--key-concurrency", strconv.Itoa(o.KeyConcurrency))
	}
	args = append(args, o.Conn...)
	return append(args, o.Hooks...)
}

// Worker is one running worker process and what its events have said so
// far. Its methods may be called from any goroutine.
type Worker struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}

	mu     sync.Mutex
	claims map[int32]Claim
	member string
	fenced []string
	// refused are the errors of the batches a resource the handlers
	// called refused (consumer.ErrResourceFenced): each blocked its
	// partition.
	refused []string
	freezes []Batch
	holds   []Batch
	hangs   []Batch
	applied []eventlog.Record
	records []eventlog.Record // every event but the applied batches (in applied)
	trans   []Transition
	counts  map[string]int
	errs    []string
	bad     []string // lines of the event stream that were not events
}

// StartWorker starts the harness's worker from bin with args (see
// WorkerOptions.Args), follows its event stream, and copies its log
// (stderr) to logTo if not nil (else discards it; logTo is written from a
// goroutine of the Worker and must not be closed before Done). The caller
// owns the process: it must end it with Stop or Kill; Done is closed when
// it has exited and its events and log have been read to the end.
func StartWorker(name string, bin Binary, logTo io.Writer, args ...string) (*Worker, error) {
	if len(bin.Argv) == 0 {
		return nil, ErrWorkerArgs
	}
	cmd := exec.Command(bin.Argv[0], append(slices.Clone(bin.Argv[1:]), args...)...)
	cmd.Env = append(os.Environ(), bin.Env...)
	cmd.Env = append(cmd.Env, EnvHarnessWorker+"=1")
	if logTo == nil {
		logTo = io.Discard
	}
	cmd.Stderr = logTo
	var evr io.ReadCloser
	if bin.EventsOnStdout {
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, fmt.Errorf("cluster: stdout of worker %s: %w", name, err)
		}
		evr = out
	} else {
		cmd.Stdout = logTo
		r, evw, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("cluster: event pipe for worker %s: %w", name, err)
		}
		cmd.ExtraFiles = []*os.File{evw}
		evr = r
		defer evw.Close() // after Start, the child holds its copy
	}
	w := &Worker{name: name, cmd: cmd, done: make(chan struct{}), claims: map[int32]Claim{}, counts: map[string]int{}}
	if err := cmd.Start(); err != nil {
		evr.Close()
		return nil, fmt.Errorf("cluster: starting worker %s: %w", name, err)
	}
	src := io.Reader(evr)
	if bin.EventsOnStdout {
		src = splitEvents(evr, logTo)
	}
	go func() {
		defer close(w.done)
		r := eventlog.NewReader(src)
		for {
			rec, err := r.Next()
			if errors.Is(err, eventlog.ErrLine) {
				w.mu.Lock()
				w.bad = append(w.bad, err.Error())
				w.mu.Unlock()
				continue
			}
			if err != nil {
				break
			}
			w.observe(rec)
		}
		evr.Close()
		_ = cmd.Wait()
	}()
	return w, nil
}

// splitEvents returns a reader of the lines of r that are JSON objects (the
// events); every other line is copied to log. The copy runs on a goroutine
// of its own until r ends.
func splitEvents(r io.Reader, log io.Writer) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := append(sc.Bytes(), '\n')
			if bytes.HasPrefix(line, []byte("{")) {
				if _, err := pw.Write(line); err != nil {
					break
				}
				continue
			}
			log.Write(line)
		}
		pw.CloseWithError(sc.Err())
		io.Copy(io.Discard, r)
	}()
	return pr
}

// observe takes in one event of the worker.
func (w *Worker) observe(r eventlog.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[r.Kind]++
	if r.Kind != consumer.KindApplied {
		w.records = append(w.records, r)
	}
	batch := func() Batch {
		b := Batch{Partition: r.Partition, Epoch: r.Epoch, Member: r.Member, First: r.FirstOffset, Last: r.NextOffset - 1, Records: r.Records}
		b.PID, _ = strconv.Atoi(r.Fields["pid"])
		return b
	}
	switch r.Kind {
	case consumer.KindClaimed, consumer.KindRevoked, consumer.KindLost, consumer.KindFenced:
		w.trans = append(w.trans, Transition{Kind: r.Kind, Partition: r.Partition, Epoch: r.Epoch, At: r.Time})
	}
	switch r.Kind {
	case consumer.KindClaimed:
		w.member = r.Member
		w.claims[r.Partition] = Claim{Epoch: r.Epoch, Member: r.Member, Next: r.NextOffset}
	case consumer.KindRevoked, consumer.KindLost:
		if c, ok := w.claims[r.Partition]; ok && c.Epoch == r.Epoch {
			delete(w.claims, r.Partition)
		}
	case consumer.KindBlocked:
		if strings.Contains(r.Err, consumer.ErrResourceFenced.Error()) {
			w.refused = append(w.refused, r.Err)
		}
	case consumer.KindFenced:
		if c, ok := w.claims[r.Partition]; ok && c.Epoch == r.Epoch {
			delete(w.claims, r.Partition)
		}
		w.fenced = append(w.fenced, r.Err)
	case consumer.KindApplied:
		w.applied = append(w.applied, r)
	case consumer.KindStopped:
		if r.Err != "" && r.Err != consumer.ErrClosed.Error() {
			w.errs = append(w.errs, "worker stopped by itself: "+r.Err)
		}
	case faults.KindFreezing:
		w.freezes = append(w.freezes, batch())
	case faults.KindHang:
		w.hangs = append(w.hangs, batch())
	case faults.KindHolding:
		w.holds = append(w.holds, batch())
	}
}

// Name is the worker's name (its client ID).
func (w *Worker) Name() string { return w.name }

// Pid is the worker's process ID.
func (w *Worker) Pid() int { return w.cmd.Process.Pid }

// Owned returns the partitions the worker's events say it holds, with the
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
func (w *Worker) Freezes() []Batch {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.freezes)
}

// Holds returns the batches a holder held before their write (the
// harness worker's --chaos-hold-gate), in order.
func (w *Worker) Holds() []Batch {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.holds)
}

// Hangs returns the batches a hang hook stopped, in order.
func (w *Worker) Hangs() []Batch {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.hangs)
}

// Transitions returns the partitions the worker claimed and let go, in
// order.
func (w *Worker) Transitions() []Transition {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.trans)
}

// Applied returns the worker's applied-batch events, in order.
func (w *Worker) Applied() []eventlog.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.applied)
}

// Records returns every event of the worker but its applied batches (see
// Applied), in order: what a report draws, never the worker's log.
func (w *Worker) Records() []eventlog.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.records)
}

// FencedCount is how many fenced claims and applies the worker reported.
func (w *Worker) FencedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.fenced)
}

// RefusedCount returns how many of the worker's batches a resource its
// handlers called refused (consumer.ErrResourceFenced).
func (w *Worker) RefusedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.refused)
}

// FencedLines returns the errors of the worker's fenced claims and applies.
func (w *Worker) FencedLines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.fenced)
}

// Count is how many events of kind the worker reported.
func (w *Worker) Count(kind string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[kind]
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

// Done is closed once the process has exited and its events are read.
func (w *Worker) Done() <-chan struct{} { return w.done }

// ExitCode is the process's exit code (-1 while it runs or if it was
// killed by a signal).
func (w *Worker) ExitCode() int {
	if !w.Exited() || w.cmd.ProcessState == nil {
		return -1
	}
	return w.cmd.ProcessState.ExitCode()
}

// LastErr describes the last error the worker reported, or its exit.
func (w *Worker) LastErr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		return w.errs[len(w.errs)-1]
	}
	if w.Exited() && w.cmd.ProcessState != nil {
		return "exited: " + w.cmd.ProcessState.String()
	}
	return "no error reported"
}

// Errors returns the errors the worker reported (a worker that stopped by
// itself) and any line of its event stream that was not an event.
func (w *Worker) Errors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append(slices.Clone(w.errs), w.bad...)
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
	parts := slices.Sorted(maps.Keys(owned))
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = fmt.Sprintf("p%d@epoch%d", p, owned[p].Epoch)
	}
	return strings.Join(out, " ")
}
