// Package eventlog writes a consumer.Worker's events as JSON lines, one
// object per event, and reads them back. A Worker process that writes its
// events to a file or a pipe (`workrouter worker --events PATH`) can be
// followed by another process — a test harness, a dashboard, an audit
// trail — without parsing its log, whose wording is for people and may
// change. The fields of a [Record] and the event kinds
// (consumer.Kind*) are stable.
//
// A line looks like:
//
//	{"time":"2026-11-30T10:00:00.123Z","kind":"claimed","group":"g","topic":"t","partition":3,"epoch":7,"member":"m-1","next_offset":120}
//
// Programs may add events of their own kinds with [Writer.Emit] (the
// workrouter fault harness does, for the faults it injects).
package eventlog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
)

// Record is one event as a JSON object. Which fields are set depends on
// Kind; see the consumer package's event types for their meaning. Token
// fields (Group, Topic, Partition, Epoch, Member) are set for every event
// of one partition's tenure; Partition is -1 for an event of no partition.
type Record struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Group     string    `json:"group,omitempty"`
	Topic     string    `json:"topic,omitempty"`
	Partition int32     `json:"partition"`
	Epoch     int32     `json:"epoch,omitempty"`
	Member    string    `json:"member,omitempty"`

	Op          string `json:"op,omitempty"`
	FirstOffset int64  `json:"first_offset,omitempty"`
	NextOffset  int64  `json:"next_offset,omitempty"`
	// Records is a batch's size, or the records queued when a
	// partition's fetching paused or resumed.
	Records int `json:"records,omitempty"`
	Applied int `json:"applied,omitempty"`
	Skipped int `json:"skipped,omitempty"`
	// Duplicates, OtherGroup and WithoutID are an applied batch's
	// consumer.Applied counts of the same names.
	Duplicates int `json:"duplicates,omitempty"`
	OtherGroup int `json:"other_group,omitempty"`
	WithoutID  int `json:"without_id,omitempty"`
	// Lane is the lane of an applied batch (consumer.Applied.Lane:
	// KeyConcurrency above 1; 0, omitted, otherwise).
	Lane int `json:"lane,omitempty"`
	// ID is a skipped record's command ID (duplicate_skipped,
	// redrive_skipped).
	ID string `json:"id,omitempty"`
	// RedriveFor is the group a skipped redrive was for (redrive_skipped).
	RedriveFor string `json:"redrive_for,omitempty"`
	// Attempt counts a stall's failed attempts, or the checks that found
	// the topic missing.
	Attempt int `json:"attempt,omitempty"`
	// Prefix is a stall's consumer.Stalled.Prefix: the records before
	// the failing one, applied first.
	Prefix int `json:"prefix,omitempty"`
	// Cause is a stall's cause (consumer.CauseEffect, consumer.CauseSink),
	// a block's (consumer.Block*) or a dead letter's reason.
	Cause    string `json:"cause,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	// Since is when a stall began, or when the topic was first found
	// missing (topic_missing, topic_found).
	Since time.Time `json:"since,omitzero"`
	// DurationMs is an Apply attempt's duration, in milliseconds.
	DurationMs float64 `json:"duration_ms,omitempty"`
	// BackoffMs is the wait before a retry, in milliseconds.
	BackoffMs float64 `json:"backoff_ms,omitempty"`
	// Offsets are committed (or not accepted) next offsets, or lags, by
	// partition.
	Offsets map[int32]int64 `json:"offsets,omitempty"`
	// Err is the event's error text.
	Err string `json:"err,omitempty"`
	// Fields carry the details of events added with Writer.Emit, the
	// brokers a topic_missing event asked ("brokers", comma-separated),
	// and a claim's takeover ("took_over_from": the holder it cleared,
	// "group_epoch", "evidence"; absent for a claim that took nothing
	// over).
	Fields map[string]string `json:"fields,omitempty"`
}

// Token returns the record's token fields as a token.
func (r Record) Token() epochs.Token {
	return epochs.Token{Group: r.Group, Topic: r.Topic, Partition: r.Partition, Epoch: r.Epoch, Member: r.Member}
}

// FromEvent converts e to a Record stamped with now. It may be called from
// any goroutine.
func FromEvent(e consumer.Event, now time.Time) Record {
	r := Record{Time: now.UTC(), Kind: e.Kind(), Partition: -1}
	tok := func(t epochs.Token) {
		r.Group, r.Topic, r.Partition, r.Epoch, r.Member = t.Group, t.Topic, t.Partition, t.Epoch, t.Member
	}
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	switch e := e.(type) {
	case consumer.Assigned:
		tok(e.Token)
	case consumer.Claimed:
		tok(e.Token)
		r.NextOffset = e.NextOffset
		if e.TookOver != nil {
			r.Fields = map[string]string{"took_over_from": e.TookOver.Fenced.Stored.String(),
				"group_epoch": strconv.FormatInt(int64(e.TookOver.GroupEpoch), 10), "evidence": e.TookOver.Evidence}
		}
	case consumer.Applied:
		tok(e.Token)
		r.FirstOffset, r.NextOffset = e.FirstOffset, e.NextOffset
		r.Records, r.Applied, r.Skipped = e.Records, e.Applied, e.Skipped
		r.Duplicates, r.OtherGroup, r.WithoutID = e.Duplicates, e.OtherGroup, e.WithoutID
		r.Lane = e.Lane
		r.DurationMs = ms(e.Duration)
	case consumer.Fenced:
		tok(e.Token)
		r.Op, r.FirstOffset, r.Records, r.Err = string(e.Op), e.FirstOffset, e.Records, errText(e.Err)
	case consumer.Stalled:
		tok(e.Token)
		r.Op, r.FirstOffset, r.Attempt, r.Since = string(e.Op), e.FirstOffset, e.Attempt, e.Since.UTC()
		r.BackoffMs, r.Cause, r.Err, r.DurationMs = ms(e.Backoff), e.Cause, errText(e.Err), ms(e.Duration)
		r.Prefix = e.Prefix
	case consumer.Revoked:
		tok(e.Token)
		r.NextOffset, r.TimedOut = e.NextOffset, e.TimedOut
	case consumer.Lost:
		tok(e.Token)
		r.TimedOut = e.TimedOut
	case consumer.Committed:
		r.Group, r.Topic, r.Offsets = e.Group, e.Topic, e.Offsets
	case consumer.CommitFailed:
		r.Group, r.Topic, r.Offsets, r.Err = e.Group, e.Topic, e.Offsets, errText(e.Err)
	case consumer.FetchFailed:
		r.Topic, r.Partition, r.Err = e.Topic, e.Partition, errText(e.Err)
	case consumer.Lag:
		r.Topic, r.Offsets = e.Topic, e.Lag
	case consumer.Stopped:
		r.Err = errText(e.Err)
	case consumer.DeadLettered:
		tok(e.Token)
		r.FirstOffset, r.Cause, r.Err, r.Attempt = e.Offset, e.Reason, errText(e.Err), e.Attempts
		r.Fields = map[string]string{"type": e.Type, "key": string(e.Key), "id": strconv.FormatInt(e.ID, 10)}
	case consumer.LogChanged:
		tok(e.Token)
		r.NextOffset, r.Err = e.Err.NextOffset, errText(e.Err)
		r.Fields = map[string]string{"case": e.Err.Case.Error(), "lost": strconv.FormatInt(e.Err.Lost(), 10), "newly_lost": strconv.FormatInt(e.NewlyLost, 10),
			"stored_topic_id": e.Err.StoredTopicID, "topic_id": e.Err.Observed.TopicID,
			"log_start": strconv.FormatInt(e.Err.Observed.LogStart, 10), "log_end": strconv.FormatInt(e.Err.Observed.LogEnd, 10)}
	case consumer.Blocked:
		tok(e.Token)
		r.Since, r.Err, r.Cause = e.Since.UTC(), errText(e.Err), e.Cause
	case consumer.Paused:
		tok(e.Token)
		r.Records = e.Queued
	case consumer.Resumed:
		tok(e.Token)
		r.Records = e.Queued
	case consumer.TopicMissing:
		r.Topic, r.Since, r.Attempt = e.Topic, e.Since.UTC(), e.Attempts
		r.Fields = map[string]string{"brokers": strings.Join(e.Brokers, ",")}
	case consumer.TopicFound:
		r.Topic, r.Since, r.Attempt = e.Topic, e.MissingSince.UTC(), e.Attempts
	case consumer.TopicRecreated:
		parts := make([]string, len(e.Partitions))
		for i, p := range e.Partitions {
			parts[i] = strconv.Itoa(int(p))
		}
		r.Topic = e.Topic
		r.Fields = map[string]string{"old_topic_id": e.OldID, "new_topic_id": e.NewID, "partitions": strings.Join(parts, ",")}
	case consumer.Discarded:
		tok(e.Token)
		r.Op, r.Err = string(e.Op), errText(e.Err)
	case consumer.DuplicateSkipped:
		tok(e.Token)
		r.FirstOffset, r.ID = e.Offset, e.ID
	case consumer.RedriveSkipped:
		tok(e.Token)
		r.FirstOffset, r.ID, r.RedriveFor = e.Offset, e.ID, e.For
	case consumer.Misrouted:
		tok(e.Token)
		r.FirstOffset = e.Offset
		r.Fields = map[string]string{"key": string(e.Key), "expected_partition": strconv.Itoa(int(e.Expected)),
			"partitions": strconv.Itoa(int(e.Partitions)), "partitioner": e.Partitioner.String(), "refused": strconv.FormatBool(e.Refused)}
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Writer writes events as JSON lines to an io.Writer. It is a
// consumer.Observer: put it in consumer.Config.Observers. Every event is
// written synchronously, one line per write call, so that a reader never
// sees half a line: give it a file, or a pipe that is read continuously,
// since a blocked write blocks the Worker goroutine that reported the
// event. It is safe for concurrent use.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	err     error
	onError func(error)
	now     func() time.Time
}

// NewWriter returns a Writer writing to w. onError, if not nil, is called
// once, with the first write error: from then on the Writer drops every
// event (the Worker never fails because its event stream did), so the
// caller should log it — or stop, if the stream is its audit trail.
func NewWriter(w io.Writer, onError func(error)) *Writer {
	return &Writer{w: w, onError: onError, now: time.Now}
}

// Observe writes e. After a write error it drops e (see NewWriter).
func (w *Writer) Observe(e consumer.Event) { _ = w.Emit(FromEvent(e, w.now())) }

// Emit writes r as one line, stamping its Time if it is zero. Use it for
// events of a program's own kinds. It returns the first write error, also
// for every later call.
func (w *Writer) Emit(r Record) error {
	if r.Time.IsZero() {
		r.Time = w.now().UTC()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("eventlog: encoding a %q event: %w", r.Kind, err)
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = fmt.Errorf("eventlog: writing: %w", err)
		if w.onError != nil {
			w.onError(w.err)
		}
	}
	return w.err
}

// Err returns the first write error, or nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// ErrLine is matched by the error Reader.Next returns for a line that is
// not a Record.
var ErrLine = errors.New("eventlog: malformed line")

// Reader reads Records, one per line. It is not safe for concurrent use.
type Reader struct {
	sc   *bufio.Scanner
	line int
}

// NewReader returns a Reader reading r.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	return &Reader{sc: sc}
}

// Next returns the next Record; io.EOF at the end of r. A malformed line
// fails with an error matching ErrLine (naming the line); Next may be
// called again to skip it.
func (r *Reader) Next() (Record, error) {
	for r.sc.Scan() {
		r.line++
		b := r.sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil || rec.Kind == "" {
			if err == nil {
				err = errors.New("no kind")
			}
			return Record{}, fmt.Errorf("%w %d: %w", ErrLine, r.line, err)
		}
		return rec, nil
	}
	if err := r.sc.Err(); err != nil {
		return Record{}, fmt.Errorf("eventlog: reading: %w", err)
	}
	return Record{}, io.EOF
}
