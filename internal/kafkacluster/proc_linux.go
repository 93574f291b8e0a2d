package kafkacluster

import "syscall"

// parentDeathSignal has the kernel SIGKILL the node if the process that
// started it dies, so that a test binary killed by its timeout leaves no
// JVM behind.
func parentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
