package cluster

import "testing"

func TestParseLogfmt(t *testing.T) {
	kv := ParseLogfmt(`time=2026-11-29T14:00:00Z level=INFO msg="partition claimed" group=g partition=3 epoch=4 member=w1-abc next_offset=128 err="sink: apply fenced for g/t/3: offered epoch 1"`)
	want := map[string]string{"level": "INFO", "msg": "partition claimed", "partition": "3", "epoch": "4",
		"member": "w1-abc", "next_offset": "128", "err": "sink: apply fenced for g/t/3: offered epoch 1"}
	for k, v := range want {
		if kv[k] != v {
			t.Errorf("%s = %q, want %q", k, kv[k], v)
		}
	}
}
