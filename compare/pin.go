package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// pinAuto is --pin-client-cpus's default: pin the clients to the upper
// half of the cores when there are at least minPinCores, else none.
const pinAuto = "auto"

// minPinCores is the fewest cores on which pinAuto pins: with fewer, the
// broker's half and the clients' half would be one or two cores, shared
// with PostgreSQL and the harness itself.
const minPinCores = 4

// resolvePin turns --pin-client-cpus into the CPU list (taskset -c) the
// clients run on, "" for none, and a sentence saying why, for the log.
func resolvePin(flag string, ncpu int) (cpus, why string, err error) {
	switch flag {
	case "", "off":
		return "", "no CPU pinning: --pin-client-cpus=" + flag, nil
	case pinAuto:
		if ncpu < minPinCores {
			return "", fmt.Sprintf("no CPU pinning: %d cores, fewer than %d (--pin-client-cpus=LIST pins anyway)", ncpu, minPinCores), nil
		}
		lo := ncpu / 2
		cpus = fmt.Sprintf("%d-%d", lo, ncpu-1)
		return cpus, fmt.Sprintf("clients pinned to CPUs %s of %d; pin the broker to the others yourself: taskset -apc 0-%d <broker pid>", cpus, ncpu, lo-1), nil
	}
	for _, part := range strings.Split(flag, ",") {
		ends := []string{part}
		if lo, hi, ok := strings.Cut(part, "-"); ok {
			ends = []string{lo, hi}
		}
		for _, n := range ends {
			if v, err := strconv.Atoi(n); err != nil || v < 0 || v >= ncpu {
				return "", "", fmt.Errorf("compare: --pin-client-cpus=%s: %q is not a CPU of 0-%d", flag, part, ncpu-1)
			}
		}
	}
	return flag, fmt.Sprintf("clients pinned to CPUs %s of %d (--pin-client-cpus); the broker is not pinned by the harness: taskset -apc LIST <broker pid>", flag, ncpu), nil
}

// pinned returns cmd run under taskset -c cpus (taskset execs the
// program: the process, its PID and the signals it gets are the client's),
// or cmd itself when cpus is "".
func pinned(cmd *exec.Cmd, cpus string) (*exec.Cmd, error) {
	if cpus == "" {
		return cmd, nil
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return nil, fmt.Errorf("compare: --pin-client-cpus=%s needs taskset (util-linux): %w", cpus, err)
	}
	p := exec.Command(taskset, append([]string{"-c", cpus, cmd.Path}, cmd.Args[1:]...)...)
	p.Env, p.Dir = cmd.Env, cmd.Dir
	return p, nil
}
