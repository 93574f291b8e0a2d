package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestResolvePin checks --pin-client-cpus: auto pins the upper half of
// the cores from 4 up and nothing below, with a reason either way; a
// list is checked against the machine's cores.
func TestResolvePin(t *testing.T) {
	for _, tc := range []struct {
		flag    string
		ncpu    int
		want    string
		whyHas  string
		wantErr bool
	}{
		{flag: "auto", ncpu: 2, want: "", whyHas: "2 cores, fewer than 4"},
		{flag: "auto", ncpu: 3, want: "", whyHas: "fewer than 4"},
		{flag: "auto", ncpu: 4, want: "2-3", whyHas: "taskset -apc 0-1 <broker pid>"},
		{flag: "auto", ncpu: 16, want: "8-15", whyHas: "taskset -apc 0-7"},
		{flag: "off", ncpu: 16, want: "", whyHas: "no CPU pinning"},
		{flag: "", ncpu: 16, want: "", whyHas: "no CPU pinning"},
		{flag: "1", ncpu: 2, want: "1", whyHas: "pinned to CPUs 1 of 2"},
		{flag: "0,2-3", ncpu: 4, want: "0,2-3", whyHas: "pinned"},
		{flag: "2", ncpu: 2, wantErr: true},
		{flag: "1-x", ncpu: 4, wantErr: true},
		{flag: ",", ncpu: 4, wantErr: true},
	} {
		got, why, err := resolvePin(tc.flag, tc.ncpu)
		if (err != nil) != tc.wantErr {
			t.Errorf("resolvePin(%q, %d): err = %v, want error %v", tc.flag, tc.ncpu, err, tc.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if got != tc.want || !strings.Contains(why, tc.whyHas) {
			t.Errorf("resolvePin(%q, %d) = %q, %q; want %q and a reason with %q", tc.flag, tc.ncpu, got, why, tc.want, tc.whyHas)
		}
	}
}

// TestPinnedRunsOnTheCPUs runs a process through pinned and reads its
// allowed CPUs from /proc: the process itself (taskset execs it) runs on
// CPU 0 only.
func TestPinnedRunsOnTheCPUs(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		missing(t, "no taskset on PATH")
	}
	cmd, err := pinned(exec.Command("grep", "Cpus_allowed_list", "/proc/self/status"), "0")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(out)); len(f) != 2 || f[1] != "0" {
		t.Errorf("pinned process: %q, want Cpus_allowed_list: 0", out)
	}
	same, err := pinned(exec.Command("true"), "")
	if err != nil || same.Path != exec.Command("true").Path || len(same.Args) != 1 {
		t.Errorf("pinned with no CPUs changed the command: %v %v", same, err)
	}
}
