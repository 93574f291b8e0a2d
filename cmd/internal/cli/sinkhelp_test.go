package cli

import (
	"strings"
	"testing"
)

// TestSinkHelpNamesEveryBackend: every command that takes --sink names
// each backend the worker accepts in that flag's help, so that an operator
// reading one command's help learns every form of the flag (demo and
// chaos: cmd/workrouter-lab's TestLabSinkHelpNamesEveryBackend).
func TestSinkHelpNamesEveryBackend(t *testing.T) {
	root := Root()
	for _, path := range [][]string{
		{"worker"}, {"status"},
		{"fences", "list"}, {"fences", "reset"}, {"dlq", "list"},
	} {
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
