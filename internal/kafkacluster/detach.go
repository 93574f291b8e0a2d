package kafkacluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stateFile is where Detach records a detached cluster in its directory.
const stateFile = "cluster.json"

// State is what Detach records of a cluster for Down and Running.
type State struct {
	Brokers string      `json:"brokers"`
	Nodes   []NodeState `json:"nodes"`
}

// NodeState is one node of a State.
type NodeState struct {
	ID      int32  `json:"id"`
	PID     int    `json:"pid"`
	Addr    string `json:"addr"`
	LogFile string `json:"log"`
}

// Detach leaves the nodes running after this process exits (start the
// cluster with Config.Detached) and records them in Dir()/cluster.json
// for Down. Close does nothing after it.
func (c *Cluster) Detach() error {
	if !c.cfg.Detached {
		return errors.New("kafkacluster: Detach needs a cluster started with Config.Detached")
	}
	st := State{Brokers: c.BrokersEnv()}
	for _, n := range c.nodes {
		st.Nodes = append(st.Nodes, NodeState{ID: n.ID, PID: n.PID(), Addr: n.Addr, LogFile: n.LogFile})
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, stateFile), append(b, '\n'), 0o644); err != nil {
		return err
	}
	c.closeOnce.Do(func() { c.detached = true })
	return nil
}

// ReadState returns the cluster Detach recorded in dir, and false if there
// is none.
func ReadState(dir string) (State, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, false, fmt.Errorf("kafkacluster: %s: %w", filepath.Join(dir, stateFile), err)
	}
	return st, true, nil
}

// ours reports whether pid is a node process of dir: a live process
// whose command line runs kafka.Kafka on a properties file under dir (so
// that a PID reused by another process is never signalled).
func ours(pid int, dir string) bool {
	if pid <= 0 || !alive(pid) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		// No /proc (macOS): trust the recorded PID while it is alive.
		return true
	}
	cmdline := strings.ReplaceAll(string(b), "\x00", " ")
	return strings.Contains(cmdline, "kafka.Kafka") && strings.Contains(cmdline, dir)
}

// Healthy reports whether every node recorded in dir runs and the cluster
// answers metadata with all of them.
func Healthy(ctx context.Context, dir string) (State, bool) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return State{}, false
	}
	st, ok, err := ReadState(dir)
	if err != nil || !ok {
		return st, false
	}
	var seeds []string
	for _, n := range st.Nodes {
		if !ours(n.PID, dir) {
			return st, false
		}
		seeds = append(seeds, n.Addr)
	}
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return st, false
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := adm.BrokerMetadata(ctx)
	return st, err == nil && len(md.Brokers) == len(st.Nodes)
}

// Down stops the nodes Detach recorded in dir: SIGTERM to each (and
// SIGCONT, in case one is paused), then SIGKILL to any still running after
// grace, and removes the record. With no record it does nothing. It
// returns the PIDs it signalled.
func Down(dir string, grace time.Duration) ([]int, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, ok, err := ReadState(dir)
	if err != nil || !ok {
		return nil, err
	}
	var pids []int
	for _, n := range st.Nodes {
		if ours(n.PID, dir) {
			pids = append(pids, n.PID)
			terminate(n.PID)
		}
	}
	end := time.Now().Add(grace)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(end) {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(pid) {
			forceKill(pid)
			for range 100 {
				if !alive(pid) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	var errs []error
	for _, pid := range pids {
		if alive(pid) && ours(pid, dir) {
			errs = append(errs, fmt.Errorf("kafkacluster: node process %d did not exit", pid))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.Remove(filepath.Join(dir, stateFile)))
	}
	return pids, errors.Join(errs...)
}
