package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// marker names the file a Go block of the README shows, on the line
// before the block: <!-- file: examples/billing-worker/main.go -->.
var marker = regexp.MustCompile(`^<!-- file: (\S+) -->$`)

// TestREADMEGoBlocksAreExamplePrograms: every ```go block of the README is
// preceded by a marker naming an example program under examples/, and is
// that file's content exactly.
func TestREADMEGoBlocksAreExamplePrograms(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	blocks := 0
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```go" {
			continue
		}
		blocks++
		end := i + 1
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		if end == len(lines) {
			t.Fatalf("README.md:%d: a Go block that never ends", i+1)
		}
		body := strings.Join(lines[i+1:end], "\n") + "\n"
		m := []string(nil)
		if i > 0 {
			m = marker.FindStringSubmatch(lines[i-1])
		}
		if m == nil || !strings.HasPrefix(m[1], "examples/") {
			t.Errorf("README.md:%d: a Go block without a <!-- file: examples/… --> line before it: every Go block must be an example program a test runs", i+1)
			i = end
			continue
		}
		want, err := os.ReadFile(filepath.Join(root, m[1]))
		if err != nil {
			t.Errorf("README.md:%d: %v", i, err)
		} else if string(want) != body {
			t.Errorf("README.md:%d: the block differs from %s; copy the file into the README again", i+1, m[1])
		}
		i = end
	}
	if blocks < 2 {
		t.Fatalf("found %d Go blocks in the README, want the producer and the worker at least", blocks)
	}
}
