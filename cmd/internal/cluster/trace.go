package cluster

import (
	"time"

	"github.com/workrouter/workrouter/consumer/eventlog"
)

// Trace is what a harness run's typed events said, for its report
// (package timeline): the worker processes' events and the faults the
// harness injected, never log text. A harness fills it on its own
// goroutine; read it after the run returned.
type Trace struct {
	// Start is when the run began, End when the events were read (when
	// the run counted its figures, so that the report and the figures
	// agree).
	Start, End time.Time
	// Topic and Partitions are the run's topic.
	Topic      string
	Partitions int32
	// Workers are every worker process the run started, in the order
	// started (a restarted worker is a new process under the same name).
	Workers []WorkerTrace
	// Faults are the faults that happened (those the run counted), in
	// the order they began.
	Faults []FaultSpan
}

// WorkerTrace is one worker process's events: Records every event but
// the applied batches, Applied the applied batches (Worker.Records and
// Worker.Applied).
type WorkerTrace struct {
	Name    string
	Records []eventlog.Record
	Applied []eventlog.Record
}

// FaultSpan is one fault that happened: its kind (a chaos.Kind, or
// "pause" for the demo's), the worker it hit ("" for one of the whole
// cluster: a broker restart, poison records, re-sent commands), when it
// began and ended, and what it did.
type FaultSpan struct {
	Kind   string
	Victim string
	Start  time.Time
	End    time.Time
	Detail string
}

// TraceOf returns the events of workers so far; the caller sets the
// Trace's other fields. It may be called from any goroutine.
func TraceOf(workers []*Worker) []WorkerTrace {
	out := make([]WorkerTrace, 0, len(workers))
	for _, w := range workers {
		out = append(out, WorkerTrace{Name: w.Name(), Records: w.Records(), Applied: w.Applied()})
	}
	return out
}

// Count is how many of the worker's Records are of kind.
func (w WorkerTrace) Count(kind string) int {
	n := 0
	for _, r := range w.Records {
		if r.Kind == kind {
			n++
		}
	}
	return n
}
