package demo

import (
	"context"
	"errors"
	"testing"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// The full demo runs worker processes of the workrouter-lab binary; it is
// tested end to end in cmd/workrouter-lab (TestDemoCommand).

func TestRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"one worker":         {Workers: 1, Worker: cluster.Binary{Argv: []string{"x"}}},
		"no worker argv":     {},
		"few commands":       {Commands: 10, Worker: cluster.Binary{Argv: []string{"x"}}},
		"no lane":            {KeyConcurrency: -2, Worker: cluster.Binary{Argv: []string{"x"}}},
		"protocol":           {Protocol: "eager", Worker: cluster.Binary{Argv: []string{"x"}}},
		"fault":              {Fault: "freeze", Worker: cluster.Binary{Argv: []string{"x"}}},
		"partition over TLS": {Fault: FaultPartition, WorkerConn: []string{"--tls"}, Worker: cluster.Binary{Argv: []string{"x"}}},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}
