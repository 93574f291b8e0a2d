package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// labPackages are the packages of the repository that only the lab
// (cmd/workrouter-lab) and the tests may link: the embedded broker, the
// harness and its fault hooks, the checker, the benchmarks' baselines and
// the tests' helpers.
var labPackages = []string{
	"cmd/internal/bench",
	"cmd/internal/broker",
	"cmd/internal/brokerproc",
	"cmd/internal/chaos",
	"cmd/internal/cluster",
	"cmd/internal/demo",
	"cmd/internal/faults",
	"cmd/internal/fencedcall",
	"cmd/internal/netfault",
	"cmd/internal/timeline",
	"internal/invariants",
	"internal/kafkacluster",
	"internal/unfenced",
}

// TestProductLinksNoLab: `go list -deps ./cmd/workrouter`, the deployed
// binary's packages, has no kfake (the embedded broker), no fault hook or
// package of the harness, no package of the repository's cmd/ but this
// command and cmd/internal/cli, no test helper, and no Sarama (the
// benchmarks' baseline). .ci/run checks the same with go list.
func TestProductLinksNoLab(t *testing.T) {
	goBin := "go"
	if _, err := exec.LookPath(goBin); err != nil {
		t.Fatalf("the go command is not in PATH: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", ".")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps .: %v", err)
	}
	deps := strings.Fields(string(out))
	const repo = "github.com/workrouter/workrouter/"
	if !slices.Contains(deps, repo+"cmd/internal/cli") || !slices.Contains(deps, repo+"cmd/workrouter") {
		t.Fatalf("go list -deps . lists neither cmd/workrouter nor cmd/internal/cli: is this the right directory?\n%s", out)
	}
	var bad []string
	for _, p := range deps {
		rel, ours := strings.CutPrefix(p, repo)
		switch {
		case strings.Contains(p, "/kfake"), strings.Contains(strings.ToLower(p), "sarama"), strings.Contains(p, "toxiproxy"):
			bad = append(bad, p)
		case ours && slices.Contains(labPackages, rel):
			bad = append(bad, p)
		case ours && strings.HasPrefix(rel, "internal/test"):
			bad = append(bad, p)
		case ours && strings.HasPrefix(rel, "cmd/") && rel != "cmd/workrouter" && rel != "cmd/internal/cli":
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Errorf("the product binary links %d packages of the lab, the tests or the benchmarks (move what it needs into cmd/internal/cli, the rest into cmd/workrouter-lab):\n\t%s",
			len(bad), strings.Join(bad, "\n\t"))
	}
}
