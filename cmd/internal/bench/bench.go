// Package bench runs workrouter's benchmark workloads and their baselines in
// one process, against an embedded broker, and reports throughput ratios
// measured in the same run (see docs/performance.md).
package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// Env is what every workload runs against. Brokers is an embedded kfake
// broker (or a real cluster); Topic holds Records pre-loaded commands of
// Size bytes over Partitions partitions, produced with the router's
// envelope and partitioner, keyed over Keys keys. An Env is used by one
// goroutine at a time.
type Env struct {
	Brokers    []string
	Topic      string
	Partitions int32
	Records    int
	Keys       int
	Size       int
	// PostgresDSN, if set, enables the PostgreSQL workloads.
	PostgresDSN string
	// RedisURL, if set, enables the Redis workloads.
	RedisURL string
	// TempDir holds SQLite files and the like.
	TempDir string
	// Worker starts a `workrouter worker` process (see SetupConfig).
	Worker cluster.Binary

	cluster   *kfake.Cluster // the embedded broker's, nil with external brokers
	fileJSONL string         // see commandFiles
	fileKcat  string
	payload   []byte   // see payload
	idPrefix  string   // see CommandID
	drops     *dropLog // topics a row could not delete (see dropTopics)
}

// dropLog collects the deletions that failed; an Env's copies share it.
type dropLog struct {
	mu   sync.Mutex
	errs []error
}

// Result is one workload's or baseline's measurement.
type Result struct {
	Name    string        // e.g. "W1 worker, no-op handler, memory sink"
	ID      string        // short id: "W1", "B0", …
	Records int           // records processed
	Elapsed time.Duration // wall time of the measured part
	// CPU is the user+system CPU time of this whole process during the
	// measured part: the workload's, the embedded broker's (it runs in
	// this process) and the garbage collector's.
	CPU     time.Duration
	PeakRSS int64  // process max RSS in bytes at the end (ru_maxrss; monotonic across workloads)
	Extra   string // free-form (latency percentiles, takeover time, …)
	// P50 and P99 are the latency percentiles of a latency row (W9),
	// zero for the others (see Latencies).
	P50, P99 time.Duration
	Skipped  string // non-empty: not run, and why
}

// Throughput is records per second.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Records) / r.Elapsed.Seconds()
}

// CPUPerRecord is CPU time per record.
func (r Result) CPUPerRecord() time.Duration {
	if r.Records == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Records)
}

// Workload is one measured run: it does its own setup, then calls Measure
// once around the measured part, and cleans up.
type Workload func(ctx context.Context, env *Env) (Result, error)

// Measure runs run, returning wall time, CPU time and peak RSS around it.
func Measure(id, name string, records int, run func() error) (Result, error) {
	runtime.GC()
	cpu0 := cpuTime()
	t0 := time.Now()
	err := run()
	el := time.Since(t0)
	r := Result{ID: id, Name: name, Records: records, Elapsed: el, CPU: cpuTime() - cpu0, PeakRSS: maxRSS()}
	if err != nil {
		return r, fmt.Errorf("%s: %w", id, err)
	}
	return r, nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func maxRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024 // kilobytes on Linux
}
