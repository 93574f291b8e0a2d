package faults

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/workrouter/workrouter/internal/testwait"
)

// stoppedChildEnv makes the test binary a busy child for TestStopped.
const stoppedChildEnv = "WORKROUTER_FAULTS_STOPPED_CHILD"

func init() {
	if os.Getenv(stoppedChildEnv) != "1" {
		return
	}
	// Busy goroutines on several threads until killed.
	runtime.GOMAXPROCS(4)
	for range 4 {
		go func() {
			for {
				runtime.Gosched()
			}
		}()
	}
	time.Sleep(time.Hour)
	os.Exit(0)
}

// TestStopped: Stopped turns true only once every thread of a busy
// multi-threaded process has stopped after SIGSTOP, and false again after
// SIGCONT; a process that is gone is not stopped.
func TestStopped(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stoppedChildEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if Stopped(pid) {
			t.Error("Stopped is true for a process that has exited")
		}
	}()
	threads := func() string {
		states, _ := threadStates(pid)
		return string(states)
	}
	testwait.For(t, 20*time.Second, "the child to run several threads", func() bool { return len(threads()) >= 3 })
	if Stopped(pid) {
		t.Fatalf("Stopped is true for a running process (threads %q)", threads())
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "Stopped after SIGSTOP", func() bool { return Stopped(pid) })
	for _, st := range threads() {
		if st != 'T' && st != 't' {
			t.Fatalf("Stopped is true while a thread is in state %c (threads %q)", st, threads())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "not Stopped after SIGCONT", func() bool { return !Stopped(pid) })
}
