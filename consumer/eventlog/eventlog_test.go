package eventlog_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/eventlog"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

func TestRoundTrip(t *testing.T) {
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 7, Member: "m-1"}
	since := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	lc := &sink.LogChangedError{Scope: tok.Scope(), Case: sink.ErrRetentionLoss, StoredTopicID: "id", NextOffset: 10,
		Observed: sink.Observed{TopicID: "id", LogStart: 15, LogEnd: 20}}
	events := []consumer.Event{
		consumer.Assigned{Token: tok},
		consumer.Claimed{Token: tok, NextOffset: 0},
		consumer.Claimed{Token: tok, NextOffset: 3, TookOver: &consumer.EpochRegressedError{
			Fenced:     &sink.FencedError{Op: sink.OpClaim, Offered: tok, Stored: epochs.Token{Group: "g", Topic: "t", Epoch: 9, Member: "old"}},
			GroupEpoch: 7, Evidence: "the coordinator's group epoch is 7"}},
		consumer.Paused{Token: tok, Queued: 64},
		consumer.Resumed{Token: tok, Queued: 32},
		consumer.Stalled{Token: tok, Op: sink.OpApply, FirstOffset: 13, Attempt: 1, Since: since, Cause: consumer.CauseEffect, Err: errors.New("flaky"), Prefix: 3},
		consumer.Applied{Token: tok, FirstOffset: 0, NextOffset: 10, Records: 10, Applied: 6, Skipped: 1, Duplicates: 2, OtherGroup: 1, WithoutID: 3, Duration: 1500 * time.Microsecond, Lane: 5},
		consumer.DuplicateSkipped{Token: tok, Offset: 4, ID: "order-1"},
		consumer.RedriveSkipped{Token: tok, Offset: 5, ID: "order-2", For: "billing"},
		consumer.Stalled{Token: tok, Op: sink.OpApply, FirstOffset: 10, Attempt: 2, Since: since, Backoff: 100 * time.Millisecond, Cause: consumer.CauseEffect, Err: errors.New("boom")},
		consumer.Fenced{Token: tok, Op: sink.OpApply, FirstOffset: 10, Records: 5, Err: &sink.FencedError{Op: sink.OpApply, Offered: tok}},
		consumer.Revoked{Token: tok, NextOffset: 10, TimedOut: true},
		consumer.Lost{Token: tok},
		consumer.Committed{Group: "g", Topic: "t", Offsets: map[int32]int64{0: 10, 1: 3}},
		consumer.CommitFailed{Group: "g", Topic: "t", Offsets: map[int32]int64{0: 10}, Err: errors.New("rebalance")},
		consumer.FetchFailed{Topic: "t", Partition: -1, Err: errors.New("unknown topic")},
		consumer.Lag{Topic: "t", Lag: map[int32]int64{0: 4}},
		consumer.Stopped{Err: consumer.ErrClosed},
		consumer.TopicMissing{Topic: "t", Brokers: []string{"b1:9092", "b2:9092"}, Since: since, Attempts: 3},
		consumer.TopicFound{Topic: "t", MissingSince: since, Attempts: 3},
		consumer.DeadLettered{Token: tok, Offset: 12, Key: []byte("k"), Type: "pay", Reason: consumer.ReasonHandlerError, Err: errors.New("bad"), Attempts: 8, ID: 42},
		consumer.LogChanged{Token: tok, Err: lc},
		consumer.Blocked{Token: tok, Since: since, Err: lc, Cause: consumer.BlockLogChanged},
		consumer.TopicRecreated{Topic: "t", OldID: "old", NewID: "new", Partitions: []int32{0, 2}},
		consumer.Discarded{Token: tok, Op: sink.OpClaim, Err: &sink.FencedError{Op: sink.OpClaim, Offered: tok}},
	}
	var buf bytes.Buffer
	w := eventlog.NewWriter(&buf, nil)
	for _, e := range events {
		w.Observe(e)
	}
	if err := w.Emit(eventlog.Record{Kind: "fault.freeze", Partition: 2, Fields: map[string]string{"signal": "SIGSTOP"}}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(events)+1 {
		t.Fatalf("%d lines for %d events", n, len(events)+1)
	}
	r := eventlog.NewReader(&buf)
	for i, e := range events {
		rec, err := r.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if rec.Kind != e.Kind() || rec.Time.IsZero() {
			t.Errorf("event %d: kind %q time %v, want %q", i, rec.Kind, rec.Time, e.Kind())
		}
		switch e := e.(type) {
		case consumer.Claimed:
			if rec.Token() != e.Token || rec.NextOffset != e.NextOffset || (rec.Fields["took_over_from"] != "") != (e.TookOver != nil) {
				t.Errorf("claimed round trip: %+v", rec)
			}
			if e.TookOver != nil && (rec.Fields["took_over_from"] != e.TookOver.Fenced.Stored.String() || rec.Fields["group_epoch"] != "7" || rec.Fields["evidence"] != e.TookOver.Evidence) {
				t.Errorf("claimed (a takeover) round trip: %+v", rec)
			}
		case consumer.Paused:
			if rec.Token() != e.Token || rec.Records != 64 {
				t.Errorf("paused round trip: %+v", rec)
			}
		case consumer.Resumed:
			if rec.Token() != e.Token || rec.Records != 32 {
				t.Errorf("resumed round trip: %+v", rec)
			}
		case consumer.Applied:
			if rec.Token() != e.Token || rec.FirstOffset != 0 || rec.NextOffset != 10 || rec.Applied != 6 || rec.Skipped != 1 || rec.DurationMs != 1.5 ||
				rec.Duplicates != 2 || rec.OtherGroup != 1 || rec.WithoutID != 3 || rec.Lane != 5 {
				t.Errorf("applied round trip: %+v", rec)
			}
		case consumer.DuplicateSkipped:
			if rec.Token() != e.Token || rec.FirstOffset != 4 || rec.ID != "order-1" {
				t.Errorf("duplicate_skipped round trip: %+v", rec)
			}
		case consumer.RedriveSkipped:
			if rec.Token() != e.Token || rec.FirstOffset != 5 || rec.ID != "order-2" || rec.RedriveFor != "billing" {
				t.Errorf("redrive_skipped round trip: %+v", rec)
			}
		case consumer.Stalled:
			if rec.Attempt != e.Attempt || !rec.Since.Equal(since) || rec.Cause != consumer.CauseEffect || rec.Err != e.Err.Error() || rec.BackoffMs != float64(e.Backoff.Milliseconds()) ||
				rec.Op != "apply" || rec.Prefix != e.Prefix || rec.FirstOffset != e.FirstOffset {
				t.Errorf("stalled round trip: %+v", rec)
			}
		case consumer.Fenced:
			if rec.Op != "apply" || !strings.Contains(rec.Err, "fenced") || rec.Records != 5 {
				t.Errorf("fenced round trip: %+v", rec)
			}
		case consumer.Committed:
			if rec.Offsets[0] != 10 || rec.Offsets[1] != 3 || rec.Partition != -1 {
				t.Errorf("committed round trip: %+v", rec)
			}
		case consumer.Stopped:
			if rec.Err != consumer.ErrClosed.Error() {
				t.Errorf("stopped round trip: %+v", rec)
			}
		case consumer.TopicMissing:
			if rec.Topic != "t" || !rec.Since.Equal(since) || rec.Attempt != 3 || rec.Fields["brokers"] != "b1:9092,b2:9092" || rec.Partition != -1 {
				t.Errorf("topic_missing round trip: %+v", rec)
			}
		case consumer.TopicFound:
			if rec.Topic != "t" || !rec.Since.Equal(since) || rec.Attempt != 3 {
				t.Errorf("topic_found round trip: %+v", rec)
			}
		case consumer.DeadLettered:
			if rec.Token() != e.Token || rec.FirstOffset != 12 || rec.Cause != consumer.ReasonHandlerError || rec.Err != "bad" || rec.Attempt != 8 ||
				rec.Fields["id"] != "42" || rec.Fields["key"] != "k" || rec.Fields["type"] != "pay" {
				t.Errorf("dead_lettered round trip: %+v", rec)
			}
		case consumer.LogChanged:
			if rec.Token() != e.Token || rec.NextOffset != 10 || rec.Fields["lost"] != "5" || rec.Fields["log_start"] != "15" || !strings.Contains(rec.Err, "deleted") {
				t.Errorf("log_changed round trip: %+v", rec)
			}
		case consumer.Blocked:
			if rec.Token() != e.Token || !rec.Since.Equal(since) || rec.Err == "" || rec.Cause != consumer.BlockLogChanged {
				t.Errorf("blocked round trip: %+v", rec)
			}
		case consumer.Discarded:
			if rec.Token() != e.Token || rec.Op != "claim" || !strings.Contains(rec.Err, "fenced") {
				t.Errorf("discarded round trip: %+v", rec)
			}
		case consumer.TopicRecreated:
			if rec.Topic != "t" || rec.Fields["old_topic_id"] != "old" || rec.Fields["new_topic_id"] != "new" || rec.Fields["partitions"] != "0,2" {
				t.Errorf("topic_recreated round trip: %+v", rec)
			}
		}
	}
	rec, err := r.Next()
	if err != nil || rec.Kind != "fault.freeze" || rec.Partition != 2 || rec.Fields["signal"] != "SIGSTOP" {
		t.Fatalf("custom event: %+v %v", rec, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v, want io.EOF", err)
	}
}

func TestReaderMalformed(t *testing.T) {
	r := eventlog.NewReader(strings.NewReader("not json\n{\"kind\":\"assigned\",\"partition\":1}\n{}\n"))
	if _, err := r.Next(); !errors.Is(err, eventlog.ErrLine) || !strings.Contains(err.Error(), "1") {
		t.Fatalf("malformed line: %v", err)
	}
	if rec, err := r.Next(); err != nil || rec.Kind != "assigned" || rec.Partition != 1 {
		t.Fatalf("after a malformed line: %+v %v", rec, err)
	}
	if _, err := r.Next(); !errors.Is(err, eventlog.ErrLine) {
		t.Fatalf("line without kind: %v", err)
	}
}

type failing struct{ n int }

func (f *failing) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("disk full")
}

func TestWriteErrorKept(t *testing.T) {
	f := &failing{}
	var reported []error
	w := eventlog.NewWriter(f, func(err error) { reported = append(reported, err) })
	w.Observe(consumer.Stopped{})
	w.Observe(consumer.Stopped{})
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Err = %v", err)
	}
	if len(reported) != 1 {
		t.Fatalf("onError called %d times, want once", len(reported))
	}
	if f.n != 1 {
		t.Fatalf("wrote %d times after the first error, want 1", f.n)
	}
}
