package main

import (
	"strings"
	"testing"
)

// TestLabSinkHelpNamesEveryBackend: the demo's and chaos's --sink help
// names each backend they accept, as the product's commands' help does
// (cmd/internal/cli's TestSinkHelpNamesEveryBackend).
func TestLabSinkHelpNamesEveryBackend(t *testing.T) {
	root := newRootCmd()
	for _, path := range [][]string{{"demo"}, {"chaos"}} {
		cmd, _, err := root.Find(path)
		if err != nil || cmd.Name() != path[len(path)-1] {
			t.Fatalf("%v: command not found (%v)", path, err)
		}
		fl := cmd.Flags().Lookup("sink")
		if fl == nil {
			t.Fatalf("%v has no --sink flag", path)
		}
		for _, form := range []string{"sqlite:", "postgres://", "redis://", "kafka"} {
			if !strings.Contains(fl.Usage, form) {
				t.Errorf("%s --sink help does not name %s: %q", strings.Join(path, " "), form, fl.Usage)
			}
		}
	}
}

// TestLabUnknownCommandsFail: a mistyped command of the lab exits non-zero
// with one line suggesting the lab's command, as the product's do
// (cmd/internal/cli's TestUnknownCommandsFail).
func TestLabUnknownCommandsFail(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"brokr", "--topic", "x"}, []string{`unknown command "brokr" for "workrouter-lab"`, "did you mean broker?"}},
		{[]string{"chaso"}, []string{`unknown command "chaso"`, "did you mean chaos?"}},
		{[]string{"demo", "now"}, []string{`unexpected argument "now" for "workrouter-lab demo"`}},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) { oneLineFailure(t, tc.args, tc.want...) })
	}
}
