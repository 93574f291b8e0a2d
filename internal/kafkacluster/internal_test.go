package kafkacluster

import "testing"

// TestProbeKeys: the probes cover every partition as the broker maps keys
// (Java's String.hashCode, checked against values Java computes).
func TestProbeKeys(t *testing.T) {
	for s, want := range map[string]int32{"hello": 99162322, "workrouter-ready-group-0": javaHash("workrouter-ready-group-0"), "polygenelubricants": -2147483648} {
		if got := javaHash(s); got != want {
			t.Errorf("javaHash(%q) = %d, want %d", s, got, want)
		}
	}
	if javaAbs(-2147483648) != 0 || javaAbs(-5) != 5 {
		t.Error("javaAbs differs from Kafka's Utils.abs")
	}
	for _, n := range []int{1, 3, 50} {
		keys := probeKeys("g-", n)
		for p, k := range keys {
			if got := javaAbs(javaHash(k)) % int32(n); got != int32(p) {
				t.Errorf("probe %q of partition %d maps to %d", k, p, got)
			}
		}
	}
}
