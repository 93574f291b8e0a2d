package doccheck

import (
	"bufio"
	"regexp"
	"strings"
	"testing"
)

// directRequirements returns the module paths the root go.mod requires
// directly (every requirement not marked // indirect).
func directRequirements(t *testing.T) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(readDoc(t, "go.mod")))
	block := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			block = true
			continue
		case block && line == ")":
			block = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !block:
			continue
		}
		if line == "" || strings.HasPrefix(line, "//") || strings.Contains(line, "// indirect") {
			continue
		}
		out = append(out, strings.Fields(line)[0])
	}
	if len(out) == 0 {
		t.Fatal("go.mod: no direct requirement found")
	}
	return out
}

// dependencyBullet is a bullet of CONTRIBUTING.md that names a module
// first: "- `github.com/redis/go-redis/v9`: …".
var dependencyBullet = regexp.MustCompile("^- `([a-z0-9.-]+\\.[a-z]+/[^`\\s]+)`")

// TestContributingNamesTheDependencies: CONTRIBUTING.md's list of the
// library's dependencies (one bullet per module, the module path first
// in a code span) names exactly the root go.mod's direct requirements.
func TestContributingNamesTheDependencies(t *testing.T) {
	named := map[string]bool{}
	for _, line := range strings.Split(readDoc(t, "CONTRIBUTING.md"), "\n") {
		if m := dependencyBullet.FindStringSubmatch(line); m != nil {
			named[m[1]] = true
		}
	}
	required := map[string]bool{}
	for _, m := range directRequirements(t) {
		required[m] = true
		if !named[m] {
			t.Errorf("CONTRIBUTING.md does not list %s, a direct requirement of the root go.mod (a bullet \"- `%s`: what it is for\")", m, m)
		}
	}
	for m := range named {
		if !required[m] {
			t.Errorf("CONTRIBUTING.md lists %s, which the root go.mod does not require directly", m)
		}
	}
}
