// Package jsonl sends a stream of commands, one JSON object per line,
// through a [router.Router]: what `workrouter produce --file` runs.
//
// # The line format
//
//	{"key":"acct-42","type":"deposit","id":"dep-7","payload":{"cents":100},"headers":{"trace":"abc"}}
//
// "key" and "type" are required, "id" (the command ID, see package router)
// and "headers" are optional, and no other field is allowed. "payload" is
// any JSON value: a JSON string is sent as its text, anything else as its
// JSON encoding; null or absent is an empty payload. Empty lines are
// skipped. See [ParseLine].
//
// # Pipelined, in order per key
//
// [Producer.Run] reads the lines in order and hands each command to
// [router.Router.SendAsync] without waiting for the previous one's
// acknowledgement, with at most Config.MaxInFlight commands sent and not
// yet acknowledged or failed. The order of one key's commands is the
// file's: all of a key's commands go to one partition, SendAsync is called
// by one goroutine in line order, and the router's client is kgo's
// idempotent producer (the default, unless the caller's options disable
// it), which writes a partition's records in the order they were buffered,
// across the up to five produce requests it has in flight per broker and
// across its own retries: every batch carries the producer ID and its
// sequence number, and the broker refuses a batch out of sequence instead
// of writing it out of order, and one it already wrote instead of writing
// it twice.
//
// # Failures: the run stops
//
// A line that cannot be parsed or is refused (an invalid command, one too
// large for a record batch, a send the broker or the client failed) stops
// the run: no line after the first such line is sent. Stopping rather than
// skipping keeps each key's sequence whole: skipping a key's deposit and
// sending its withdrawal would apply the key's commands without one of
// them. A bad line is seen before anything after it is sent. A failed send
// is seen when its outcome comes back, by when up to MaxInFlight later
// lines may have been sent; those complete, and every failed one is
// reported too. Whether a later command of the failed one's key can still
// be written depends on the failure: when kgo gives up on a record
// (delivery timeout, retries exhausted, an interrupted run) it fails every
// record buffered for the partition with it, but a batch the broker
// refuses (an invalid record, an authorization error) fails alone, and
// the partition's later batches, already in flight, are written. So Run
// checks every acknowledged command against the keys that had a failed
// command, and reports each one written after an earlier command of its
// key failed ([Report].OutOfOrder, [ErrOutOfOrder]): what was written
// out of sequence is never silent. (An acknowledged command's outcome
// reaches Run after its key's earlier failure: kgo calls a partition's
// callbacks in order.)
//
// Each line is handed to the router once: an acknowledged command is never
// sent twice by Run (the client's own retries resend a batch under the
// same sequence number, which the broker writes once). A failed command
// may nevertheless have been written (a timeout, a lost connection); its
// [LineError] carries the command ID it was sent with, so that sending the
// line again with that "id" makes it the same command for workers that
// deduplicate.
package jsonl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/router"
)

// Defaults of [Config].
const (
	// DefaultMaxInFlight is the default Config.MaxInFlight.
	DefaultMaxInFlight = 20_000
	// DefaultMaxLineBytes is the default Config.MaxLineBytes.
	DefaultMaxLineBytes = 64 << 20
	// DefaultFlushTimeout is the default Config.FlushTimeout.
	DefaultFlushTimeout = 30 * time.Second
	// DefaultMaxReported is the default Config.MaxReported.
	DefaultMaxReported = 20
)

// Sentinel errors of [Producer.Run]; match them with errors.Is.
var (
	// ErrLinesFailed means at least one line failed (it could not be
	// parsed, or its command was refused or its send failed): see
	// Report.Failures.
	ErrLinesFailed = errors.New("jsonl: lines failed")
	// ErrOutOfOrder means a command was written after an earlier command
	// of the same key failed: see Report.OutOfOrder.
	ErrOutOfOrder = errors.New("jsonl: a command was written after an earlier command of its key failed")
	// ErrConfig means New was given an unusable Config.
	ErrConfig = errors.New("jsonl: invalid config")
)

// Config configures a [Producer]. Zero fields take the defaults.
type Config struct {
	// MaxInFlight bounds the commands sent and not yet acknowledged or
	// failed; Run waits for one to complete before sending more. Default
	// DefaultMaxInFlight. The router's client bounds its buffer too
	// (kgo.MaxBufferedRecords, 50,000 by default).
	MaxInFlight int
	// MaxLineBytes is the longest line accepted; a longer one fails the
	// run. Default DefaultMaxLineBytes (64 MiB).
	MaxLineBytes int
	// FlushTimeout bounds the wait, once the last line was sent or the run
	// stopped, for the outcomes of the commands in flight. Default
	// DefaultFlushTimeout. The router's client fails a record it could not
	// deliver within its kgo.RecordDeliveryTimeout.
	FlushTimeout time.Duration
	// MaxReported is how many failures (and out-of-order writes) a Report
	// lists; all are counted. Default DefaultMaxReported.
	MaxReported int
}

// LineError is one failed line: its number (from 1), the ID of the
// command if it was handed to the router (it may have been written: send
// the line again with this "id"), and why. Values are immutable.
type LineError struct {
	Line int64
	// ID is the command's ID if it was handed to the router, else "".
	ID  string
	Err error
}

// Error is "line N: <why>", with the command ID if there is one. Safe to
// call from any goroutine.
func (e *LineError) Error() string {
	if e.ID != "" {
		return fmt.Sprintf("line %d (command ID %s): %v", e.Line, e.ID, e.Err)
	}
	return fmt.Sprintf("line %d: %v", e.Line, e.Err)
}

// Unwrap returns the cause. Safe to call from any goroutine.
func (e *LineError) Unwrap() error { return e.Err }

// OutOfOrderWrite is a command that was written after an earlier command
// of its key failed.
type OutOfOrderWrite struct {
	Line       int64  // the line written
	FailedLine int64  // the earlier line of the same key that failed
	Key        string // their key
	Partition  int32
	Offset     int64
}

// Report is what a run did.
type Report struct {
	// Lines is the number of lines read, empty ones included.
	Lines int64
	// Sent is the number of commands handed to the router.
	Sent int64
	// LastSent is the number of the last line handed to the router (0:
	// none); no line after it was sent.
	LastSent int64
	// Acked is the number of commands Kafka acknowledged.
	Acked int64
	// Failed is the number of failed lines: not parsed, refused, or sent
	// and failed.
	Failed int64
	// Failures are the first MaxReported failed lines, by line number.
	Failures []LineError
	// StoppedAt is the line number of the first failure seen, after which
	// nothing more was sent; 0 if the run read every line.
	StoppedAt int64
	// OutOfOrder counts commands written after an earlier command of
	// their key failed; OutOfOrderWrites lists the first MaxReported.
	OutOfOrder       int64
	OutOfOrderWrites []OutOfOrderWrite
	// Interrupted is set if ctx ended before every line was sent.
	Interrupted bool
	// Elapsed is the run's wall time, from the first read to the last
	// outcome.
	Elapsed time.Duration
}

// Producer sends JSON-lines commands through a Router. One Producer makes
// one run at a time: Run must not be called concurrently with itself.
type Producer struct {
	rt  *router.Router
	cfg Config

	acked atomic.Int64
	sent  atomic.Int64
}

// New returns a Producer sending through rt, which the caller keeps
// owning (and closes). It fails with an error matching ErrConfig
// for a negative Config field or a nil rt. Safe to call from any
// goroutine.
func New(rt *router.Router, cfg Config) (*Producer, error) {
	switch {
	case rt == nil:
		return nil, fmt.Errorf("%w: nil router", ErrConfig)
	case cfg.MaxInFlight < 0, cfg.MaxLineBytes < 0, cfg.FlushTimeout < 0, cfg.MaxReported < 0:
		return nil, fmt.Errorf("%w: negative field in %+v", ErrConfig, cfg)
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxLineBytes == 0 {
		cfg.MaxLineBytes = DefaultMaxLineBytes
	}
	if cfg.FlushTimeout == 0 {
		cfg.FlushTimeout = DefaultFlushTimeout
	}
	if cfg.MaxReported == 0 {
		cfg.MaxReported = DefaultMaxReported
	}
	return &Producer{rt: rt, cfg: cfg}, nil
}

// Acknowledged returns how many commands of the current (or last) run
// Kafka has acknowledged so far: for a progress line. Safe to call from
// any goroutine.
func (p *Producer) Acknowledged() int64 { return p.acked.Load() }

// Sent returns how many commands of the current (or last) run were handed
// to the router so far. Safe to call from any goroutine.
func (p *Producer) Sent() int64 { return p.sent.Load() }

// run is the shared state of one Run: the reader goroutine (the caller
// of Run) and the router's callbacks.
type run struct {
	p       *Producer
	stopped atomic.Bool // a failure was seen: send no more

	mu         sync.Mutex
	failed     int64
	failures   []LineError
	firstFail  int64
	failedKeys map[string]int64 // key → its first failed line (sends only)
	anyFailed  atomic.Bool      // failedKeys is not empty
	outOfOrder int64
	ooWrites   []OutOfOrderWrite
}

// slot is one in-flight command: its line and key, and its callback,
// made once per slot.
type slot struct {
	line int64
	key  []byte
	fn   func(router.Result, error)
}

// fail records a failed line. Safe from any goroutine.
func (r *run) fail(line int64, key []byte, id string, err error) {
	r.stopped.Store(true)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed++
	if r.firstFail == 0 || line < r.firstFail {
		r.firstFail = line
	}
	r.failures = append(r.failures, LineError{Line: line, ID: id, Err: err})
	if len(r.failures) > 2*r.p.cfg.MaxReported {
		r.trimFailures()
	}
	if key != nil {
		k := string(key)
		if first, ok := r.failedKeys[k]; !ok || line < first {
			r.failedKeys[k] = line
		}
		r.anyFailed.Store(true)
	}
}

// trimFailures keeps the MaxReported failures of the lowest line
// numbers. The caller holds r.mu.
func (r *run) trimFailures() {
	slices.SortFunc(r.failures, func(a, b LineError) int { return int(a.Line - b.Line) })
	if len(r.failures) > r.p.cfg.MaxReported {
		r.failures = r.failures[:r.p.cfg.MaxReported]
	}
}

// acked records an acknowledged command, checking it against its key's
// failures. Called from the router's promise goroutine.
func (r *run) acked(s *slot, res router.Result) {
	r.p.acked.Add(1)
	if !r.anyFailed.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if first, ok := r.failedKeys[string(s.key)]; ok && first < s.line {
		r.outOfOrder++
		if len(r.ooWrites) < r.p.cfg.MaxReported {
			r.ooWrites = append(r.ooWrites, OutOfOrderWrite{Line: s.line, FailedLine: first, Key: string(s.key),
				Partition: res.Partition, Offset: res.Offset})
		}
	}
}

// Run reads in to its end, or to the first failure (see the package
// documentation), sending each line's command through the router, then
// waits for the outcomes of the commands in flight. ctx interrupts the
// run: no more lines are sent, and the sends already made are waited for
// (for at most Config.FlushTimeout; the router's client decides whether
// a buffered command still goes). Run returns the Report, and an error
// that matches [ErrLinesFailed] if a line failed (its message names how
// many and the first), [ErrOutOfOrder] if a command was written after an
// earlier one of its key failed, and ctx's error if ctx ended. Not safe
// to call concurrently with itself; call it from one goroutine.
func (p *Producer) Run(ctx context.Context, in io.Reader) (Report, error) {
	p.acked.Store(0)
	p.sent.Store(0)
	start := time.Now()
	r := &run{p: p, failedKeys: map[string]int64{}}
	free := make(chan *slot, p.cfg.MaxInFlight)
	for range p.cfg.MaxInFlight {
		s := &slot{}
		s.fn = func(res router.Result, err error) {
			if err != nil {
				r.fail(s.line, s.key, res.ID, err)
			} else {
				r.acked(s, res)
			}
			s.key = nil
			free <- s
		}
		free <- s
	}

	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), p.cfg.MaxLineBytes)
	var (
		rep         Report
		line        int64
		lastSent    int64
		interrupted error
	)
	for !r.stopped.Load() {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				if errors.Is(err, bufio.ErrTooLong) {
					err = fmt.Errorf("longer than %d bytes (%w)", p.cfg.MaxLineBytes, err)
				}
				r.fail(line+1, nil, "", fmt.Errorf("reading: %w", err))
			}
			break
		}
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		cmd, err := ParseLine(text)
		if err != nil {
			r.fail(line, nil, "", err)
			break
		}
		var s *slot
		select {
		case s = <-free:
		case <-ctx.Done():
		}
		if s == nil || ctx.Err() != nil {
			if s != nil {
				free <- s
			}
			interrupted = ctx.Err()
			line-- // not sent
			break
		}
		s.line, s.key = line, cmd.Key
		lastSent = line
		p.sent.Add(1)
		p.rt.SendAsync(ctx, cmd, s.fn)
	}
	rep.Lines, rep.LastSent = line, lastSent

	// Wait for every outcome: Flush, then take back every slot (each is
	// returned by its callback, after the outcome is recorded).
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.FlushTimeout)
	defer cancel()
	var flushErr error
	if err := p.rt.Flush(fctx); err != nil {
		flushErr = fmt.Errorf("jsonl: waiting for the commands in flight: %w", err)
	}
	for taken := 0; taken < p.cfg.MaxInFlight && flushErr == nil; taken++ {
		select {
		case <-free:
		case <-fctx.Done():
			flushErr = fmt.Errorf("jsonl: waiting for the commands in flight: %w", fctx.Err())
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.trimFailures()
	rep.Sent, rep.Acked = p.sent.Load(), p.acked.Load()
	rep.Failed, rep.Failures, rep.StoppedAt = r.failed, r.failures, r.firstFail
	rep.OutOfOrder, rep.OutOfOrderWrites = r.outOfOrder, r.ooWrites
	rep.Interrupted = interrupted != nil
	rep.Elapsed = time.Since(start)

	var errs []error
	if rep.Failed > 0 {
		first := rep.Failures[0]
		errs = append(errs, fmt.Errorf("%w: %d %s failed, the first %w; the run stopped there (%s)",
			ErrLinesFailed, rep.Failed, plural(rep.Failed, "line", "lines"), &first, sentUpTo(rep.LastSent)))
	}
	if rep.OutOfOrder > 0 {
		w := rep.OutOfOrderWrites[0]
		errs = append(errs, fmt.Errorf("%w: %d %s, the first line %d (key %q, written at %d@%d) after line %d failed",
			ErrOutOfOrder, rep.OutOfOrder, plural(rep.OutOfOrder, "command", "commands"), w.Line, w.Key, w.Partition, w.Offset, w.FailedLine))
	}
	if interrupted != nil {
		errs = append(errs, fmt.Errorf("jsonl: interrupted after line %d: %w", rep.Lines, interrupted))
	}
	if flushErr != nil {
		errs = append(errs, flushErr)
	}
	return rep, errors.Join(errs...)
}

// sentUpTo says which lines were sent.
func sentUpTo(last int64) string {
	if last == 0 {
		return "no line was sent"
	}
	return fmt.Sprintf("no line after line %d was sent", last)
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// jsonCommand is one line.
type jsonCommand struct {
	Key     string            `json:"key"`
	Type    string            `json:"type"`
	ID      string            `json:"id"`
	Payload json.RawMessage   `json:"payload"`
	Headers map[string]string `json:"headers"`
}

// ErrSyntax is matched by the error of a line that is not a JSON object
// of the line format.
var ErrSyntax = errors.New("jsonl: invalid JSON")

// ParseLine decodes one line (without its newline; surrounding space is
// allowed) into a command, validated as the router validates it
// (envelope.Command.Validate). Headers are in the order of their names.
// The returned command owns its bytes. Its errors match [ErrSyntax] or
// the envelope's validation errors. Safe to call from any goroutine.
func ParseLine(line []byte) (router.Command, error) {
	line = bytes.TrimSpace(line)
	if c, ok := parseFast(line); ok {
		if err := c.Validate(); err != nil {
			return router.Command{}, err
		}
		return c, nil
	}
	return parseSlow(line)
}

// parseSlow is ParseLine with encoding/json.
func parseSlow(line []byte) (router.Command, error) {
	if len(line) == 0 || line[0] != '{' {
		return router.Command{}, fmt.Errorf(`%w: want a JSON object such as {"key":"k","type":"t","payload":…}`, ErrSyntax)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var jc jsonCommand
	if err := dec.Decode(&jc); err != nil {
		return router.Command{}, fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return router.Command{}, fmt.Errorf("%w: more than one value on the line", ErrSyntax)
	}
	c := router.Command{Key: []byte(jc.Key), Type: jc.Type, ID: jc.ID}
	switch p := bytes.TrimSpace(jc.Payload); {
	case len(p) == 0 || string(p) == "null":
	case p[0] == '"':
		var s string
		if err := json.Unmarshal(p, &s); err != nil {
			return router.Command{}, fmt.Errorf("%w: payload: %w", ErrSyntax, err)
		}
		c.Payload = []byte(s)
	default:
		c.Payload = p
	}
	names := make([]string, 0, len(jc.Headers))
	for k := range jc.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		c.Headers = append(c.Headers, envelope.Header{Key: k, Value: []byte(jc.Headers[k])})
	}
	if err := c.Validate(); err != nil {
		return router.Command{}, err
	}
	return c, nil
}
