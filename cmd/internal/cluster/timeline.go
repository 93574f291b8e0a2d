package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// ErrGaveUp is matched by the error WaitUntil returns when its timeout
// passed.
var ErrGaveUp = errors.New("cluster: gave up waiting")

// Timeline is a harness run's timeline: lines stamped with the time since
// the Timeline was made, written to out (if not nil) as they come and kept
// for Lines. Its methods may be called from any goroutine.
type Timeline struct {
	start time.Time
	out   io.Writer

	mu    sync.Mutex
	lines []string
}

// NewTimeline starts a timeline now, writing to out (nil: keep only).
func NewTimeline(out io.Writer) *Timeline {
	return &Timeline{start: time.Now(), out: out}
}

// Logf adds one line.
func (t *Timeline) Logf(format string, args ...any) {
	line := fmt.Sprintf("%7.2fs  %s", time.Since(t.start).Seconds(), fmt.Sprintf(format, args...))
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if t.out != nil {
		fmt.Fprintln(t.out, line)
	}
}

// Lines returns a copy of the lines so far.
func (t *Timeline) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.lines)
}

// WaitUntil polls cond every 50ms until it holds. It returns ctx's error if
// ctx is done first, and an error matching ErrGaveUp, naming what, when
// timeout passes first.
func WaitUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s for %s", ErrGaveUp, timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
