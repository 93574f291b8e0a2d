package kafkacluster

import "syscall"

// parentDeathSignal does nothing: macOS has no parent-death signal, so a
// test binary killed by its timeout can leave its nodes running.
func parentDeathSignal(*syscall.SysProcAttr) {}
