//go:build linux || darwin

package kafkacluster

import (
	"context"
	"os"
	"syscall"
	"time"
)

// sysProcAttr returns the attributes of a node's process: a process group
// of its own (so that a terminal's Ctrl-C reaches the test, which stops
// the node itself); a detached one gets a session of its own and outlives
// this process, an attached one is killed with this process where the
// platform can (parentDeathSignal).
func sysProcAttr(detached bool) *syscall.SysProcAttr {
	if detached {
		return &syscall.SysProcAttr{Setsid: true}
	}
	a := &syscall.SysProcAttr{Setpgid: true}
	parentDeathSignal(a)
	return a
}

func signalPause(p *os.Process) error  { return p.Signal(syscall.SIGSTOP) }
func signalResume(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

// terminate sends pid SIGTERM, and SIGCONT in case it is stopped.
func terminate(pid int) {
	syscall.Kill(pid, syscall.SIGTERM)
	syscall.Kill(pid, syscall.SIGCONT)
}

func forceKill(pid int) { syscall.Kill(pid, syscall.SIGKILL) }

// alive reports whether a process with pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// lockFile takes an exclusive lock on path (creating it), waiting for
// other holders until ctx is done, and returns its release.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
