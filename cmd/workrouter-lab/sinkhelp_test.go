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
