// Package faults holds the fault-injection hooks of the harness's worker
// (the demo, the process-level tests and the chaos harness start it; the
// product's `workrouter worker` has none of them): sink wrappers that
// freeze the process between transactions, hold a batch before its write,
// cut a transaction mid-way or hang at a chosen point, and a dialer whose
// broker connections can be cut or stalled. Every wrapper implements sink.Unwrapper. Nothing in it is
// meant for production use.
package faults

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// FreezeBeforeBatch wraps s so that the process stops itself with SIGSTOP
// right before its nth write (n ≥ 1): an Apply, serial or a lane's, or a
// DeadLetter; after every other write in the process has finished and
// while no other may start: the process freezes
// between transactions, holding no database lock. (A process frozen inside
// an SQLite transaction would hold the database's single write lock and
// stall every other worker until it resumed.) When the process is resumed
// with SIGCONT, the frozen Apply proceeds with the token it had — the late
// write of a zombie. before, if set, runs just before the SIGSTOP with the
// frozen batch's token and offsets.
//
// The returned sink may be used from any goroutine.
func FreezeBeforeBatch[Tx any](s sink.Sink[Tx], n int64, before func(tok epochs.Token, offsets []int64)) sink.Sink[Tx] {
	return &Freezer[Tx]{Sink: s, at: n, before: before}
}

// HoldBeforeBatch wraps s like FreezeBeforeBatch, except that the process
// does not stop itself: the nth call waits, at the same point and holding
// the same lock, until the file gate exists (or ctx ends), and then
// proceeds with the token it had. Something outside freezes the process
// meanwhile — `docker pause` of its container, the cgroup freezer, which
// a process cannot do to itself — or cuts its links to the broker (the
// demo's --fault partition), so that its session expires with a batch in
// hand.
func HoldBeforeBatch[Tx any](s sink.Sink[Tx], n int64, gate string, before func(tok epochs.Token, offsets []int64)) sink.Sink[Tx] {
	return &Freezer[Tx]{Sink: s, at: n, gate: gate, before: before}
}

// NewFreezer wraps s like FreezeBeforeBatch, except that it freezes the
// process before the Apply that follows each call of Arm, not before a
// fixed one.
func NewFreezer[Tx any](s sink.Sink[Tx], before func(tok epochs.Token, offsets []int64)) *Freezer[Tx] {
	return &Freezer[Tx]{Sink: s, before: before}
}

// NewHolder wraps s like HoldBeforeBatch, except that it holds the write
// that follows each call of Arm, not a fixed one: it waits until the file
// gate exists (or ctx ends) while the process goes on running, so that a
// worker cut off from its broker has a batch in hand when the group moves
// its partition away. Remove gate before Arm; create it to release.
func NewHolder[Tx any](s sink.Sink[Tx], gate string, before func(tok epochs.Token, offsets []int64)) *Freezer[Tx] {
	return &Freezer[Tx]{Sink: s, gate: gate, before: before}
}

// Freezer is a sink that stops its own process with SIGSTOP between
// transactions (see FreezeBeforeBatch and NewFreezer). Its methods may be
// called from any goroutine.
type Freezer[Tx any] struct {
	sink.Sink[Tx]
	at       int64
	n        atomic.Int64
	armed    atomic.Bool
	before   func(epochs.Token, []int64)
	gate     string // HoldBeforeBatch's file; "" to SIGSTOP
	inflight sync.RWMutex
}

// Unwrap returns the wrapped sink, so that sink.As finds its capabilities.
func (f *Freezer[Tx]) Unwrap() sink.Sink[Tx] { return f.Sink }

// Arm makes the next write (Apply or DeadLetter) freeze the process
// before it runs.
func (f *Freezer[Tx]) Arm() { f.armed.Store(true) }

// Apply counts the call and freezes the process before it at the
// configured write or when armed.
func (f *Freezer[Tx]) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[Tx]) (sink.Result, error) {
	f.freeze(ctx, tok, b.Offsets)
	defer f.inflight.RUnlock()
	return f.Sink.Apply(ctx, tok, b, effect)
}

// DeadLetter counts the call and freezes the process before it at the
// configured write or when armed, as Apply does: a dead letter is a
// fenced write too.
func (f *Freezer[Tx]) DeadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	f.freeze(ctx, tok, []int64{rec.Offset})
	defer f.inflight.RUnlock()
	return f.Sink.DeadLetter(ctx, tok, rec)
}

// freeze counts a write and freezes the process at the configured one or
// when armed; it returns holding the read side of inflight, which the
// write releases when it is done.
func (f *Freezer[Tx]) freeze(ctx context.Context, tok epochs.Token, offsets []int64) {
	if f.n.Add(1) == f.at || f.armed.CompareAndSwap(true, false) {
		f.inflight.Lock()
		if f.before != nil {
			f.before(tok, offsets)
		}
		if f.gate != "" {
			for ctx.Err() == nil {
				if _, err := os.Stat(f.gate); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		} else {
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			// The group stop reaches the other threads asynchronously:
			// keep every other write out until it surely has. The sleep
			// has long elapsed when the process is resumed.
			time.Sleep(200 * time.Millisecond)
		}
		f.inflight.Unlock()
	}
	f.inflight.RLock()
}

// Stopped reports whether every thread of process pid is in the stopped
// state (SIGSTOP), as Linux's /proc/PID/task/TID/stat shows it. A group
// stop reaches the threads asynchronously: kill(2) returns when one of them
// has been told, and until that one has run, the others keep running (and
// may, for instance, take in a fetched record and begin its batch), so a
// caller that needs the process to have stopped polls this, not the
// signal's return. It returns false if pid has no thread left or one
// cannot be read.
func Stopped(pid int) bool {
	states, ok := threadStates(pid)
	if !ok || len(states) == 0 {
		return false
	}
	for _, st := range states {
		if st != 'T' && st != 't' {
			return false
		}
	}
	return true
}

// threadStates returns the state letter of every thread of process pid
// (/proc/PID/task/TID/stat), or false if one cannot be read.
func threadStates(pid int) ([]byte, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, false
	}
	states := make([]byte, 0, len(tasks))
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			return nil, false
		}
		i := bytes.LastIndexByte(b, ')')
		if i <= 0 || i+2 >= len(b) {
			return nil, false
		}
		states = append(states, b[i+2])
	}
	return states, true
}
