package demo

import (
	"context"
	"errors"
	"testing"
)

// The full demo runs worker processes of the workrouter binary; it is
// tested end to end in cmd/workrouter (TestDemoCommand).

func TestRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"one worker":     {Workers: 1, WorkerArgv: []string{"x"}},
		"no worker argv": {},
		"few commands":   {Commands: 10, WorkerArgv: []string{"x"}},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}

func TestParseLogfmt(t *testing.T) {
	kv := parseLogfmt(`time=2026-11-29T14:00:00Z level=INFO msg="partition claimed" group=g partition=3 epoch=4 member=w1-abc next_offset=128 err="sink: apply fenced for g/t/3: offered epoch 1"`)
	want := map[string]string{"level": "INFO", "msg": "partition claimed", "partition": "3", "epoch": "4",
		"member": "w1-abc", "next_offset": "128", "err": "sink: apply fenced for g/t/3: offered epoch 1"}
	for k, v := range want {
		if kv[k] != v {
			t.Errorf("%s = %q, want %q", k, kv[k], v)
		}
	}
}
