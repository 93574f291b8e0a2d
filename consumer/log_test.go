package consumer_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
)

// TestLogObserverWording pins two log lines an operator reads: a group
// error (kgo reports it as partition 0 of no topic) is logged as a group
// or client error without a made-up topic and partition, and a revoke of
// a tenure that never claimed does not print next_offset=-1.
func TestLogObserverWording(t *testing.T) {
	var buf bytes.Buffer
	obs := consumer.NewLogObserver(slog.New(slog.NewTextHandler(&buf, nil)))
	obs.Observe(consumer.FetchFailed{Topic: "", Partition: 0, Err: &kgo.ErrGroupSession{Err: errors.New("join refused")}})
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 3, Epoch: 2, Member: "m"}
	obs.Observe(consumer.Revoked{Token: tok, NextOffset: -1})
	obs.Observe(consumer.Revoked{Token: tok, NextOffset: 7})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	if strings.Contains(lines[0], "fetch error") || strings.Contains(lines[0], `topic=""`) || strings.Contains(lines[0], "partition=") ||
		!strings.Contains(lines[0], "join refused") {
		t.Errorf("a group error is logged as %s", lines[0])
	}
	if strings.Contains(lines[1], "next_offset") {
		t.Errorf("a revoke before any claim is logged as %s", lines[1])
	}
	if !strings.Contains(lines[2], "next_offset=7") {
		t.Errorf("a revoke after applying is logged as %s", lines[2])
	}
}

// TestDuplicatesLoggedOncePerBatch: a batch with many duplicates logs one
// INFO line with their count; each duplicate's offset and ID are at DEBUG
// only.
func TestDuplicatesLoggedOncePerBatch(t *testing.T) {
	var buf bytes.Buffer
	obs := consumer.NewLogObserver(slog.New(slog.NewTextHandler(&buf, nil)))
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 1, Epoch: 2, Member: "m"}
	for i := range 50 {
		obs.Observe(consumer.DuplicateSkipped{Token: tok, Offset: int64(i), ID: "same"})
	}
	obs.Observe(consumer.Applied{Token: tok, FirstOffset: 0, NextOffset: 50, Records: 50, Duplicates: 50})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[0], "duplicates=50") {
		t.Fatalf("50 duplicates in one batch logged at INFO as %d lines, want one with duplicates=50:\n%s", len(lines), buf.String())
	}
	buf.Reset()
	dbg := consumer.NewLogObserver(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	dbg.Observe(consumer.DuplicateSkipped{Token: tok, Offset: 7, ID: "x"})
	if !strings.Contains(buf.String(), "level=DEBUG") || !strings.Contains(buf.String(), "offset=7 id=x") {
		t.Fatalf("a duplicate at DEBUG: %q", buf.String())
	}
}

// TestLogObserverRetriesAndPauses: a retry after a good prefix is logged
// as one, with the prefix's size; a blocked partition's line names its
// cause; fetch pauses and resumes are logged at DEBUG.
func TestLogObserverRetriesAndPauses(t *testing.T) {
	var buf bytes.Buffer
	obs := consumer.NewLogObserver(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 3, Epoch: 2, Member: "m"}
	obs.Observe(consumer.Stalled{Token: tok, Op: "apply", FirstOffset: 13, Attempt: 1, Since: time.Now(), Cause: consumer.CauseEffect, Err: errors.New("flaky"), Prefix: 3})
	other := tok
	other.Partition = 4 // a block of partition 3 right after its stall is rate-limited
	obs.Observe(consumer.Blocked{Token: other, Err: consumer.ErrFenceReset, Cause: consumer.BlockFenceReset})
	obs.Observe(consumer.Paused{Token: tok, Queued: 64})
	obs.Observe(consumer.Resumed{Token: tok, Queued: 32})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "behind a good prefix") || !strings.Contains(lines[0], "prefix=3") || !strings.Contains(lines[0], "offset=13") {
		t.Errorf("a retry after a good prefix is logged as %s", lines[0])
	}
	if !strings.Contains(lines[1], "cause=fence_reset") {
		t.Errorf("a block is logged without its cause: %s", lines[1])
	}
	if !strings.Contains(lines[2], "level=DEBUG") || !strings.Contains(lines[2], "paused") || !strings.Contains(lines[2], "queued=64") ||
		!strings.Contains(lines[3], "level=DEBUG") || !strings.Contains(lines[3], "resumed") {
		t.Errorf("a pause and a resume are logged as:\n%s\n%s", lines[2], lines[3])
	}
}
