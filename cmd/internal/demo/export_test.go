package demo

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// Bypass starts the demo's w1 without its dial mapping (Config.bypass).
func Bypass(c *Config) { c.bypass = true }

var (
	labOnce sync.Once
	labDir  string // removed by TestMain
	labErr  error
)

// LabBinary builds workrouter-lab, whose harness worker the demo starts,
// once for the package's tests.
func LabBinary(t *testing.T) cluster.Binary {
	t.Helper()
	labOnce.Do(func() {
		if labDir, labErr = os.MkdirTemp("", "workrouter-demo-test-"); labErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(labDir, "workrouter-lab"),
			"github.com/workrouter/workrouter/cmd/workrouter-lab").CombinedOutput()
		if err != nil {
			labErr = &buildError{err: err, out: string(out)}
		}
	})
	if labErr != nil {
		t.Fatalf("building workrouter-lab for the demo's workers: %v", labErr)
	}
	return cluster.Binary{Argv: []string{filepath.Join(labDir, "workrouter-lab")}}
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }
