package timeline

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/cmd/internal/timeline/browsertest"
)

// withPartition is the synthetic run with a partition of w2 (its broker
// links cut, the demo's --fault partition) after the pause of w1.
func withPartition() Report {
	r := synthetic()
	tr := &r.Trace
	tr.Faults = append(tr.Faults, cluster.FaultSpan{Kind: "partition-broker", Victim: "w2",
		Start: tr.Start.Add(6600 * time.Millisecond), End: tr.Start.Add(7900 * time.Millisecond), Detail: "broker links cut both ways; 1343 bytes dropped"})
	r.Faults = append(r.Faults, Count{"partition-broker", 1})
	return r
}

// TestPartitionDrawnApart: a partition is a fault of its own look, apart
// from the pause: labelled with what it cut, marked data-network, hatched,
// with its legend entry; a run without one has no such entry.
func TestPartitionDrawnApart(t *testing.T) {
	v := layout(withPartition())
	if v.FaultsDrawn != 3 || v.NetworkFaults != 1 {
		t.Fatalf("faults drawn %d, network faults %d; want 3 and 1", v.FaultsDrawn, v.NetworkFaults)
	}
	pause, part := v.FaultMarks[0], v.FaultMarks[2]
	if pause.Network != "" || pause.Label != "pause w1" {
		t.Errorf("the pause: network %q, label %q", pause.Network, pause.Label)
	}
	if part.Network != "broker links cut" || part.Label != "partition-broker (broker links cut) w2" || !strings.HasPrefix(part.Tip, "network fault partition-broker (broker links cut) on w2, ") {
		t.Errorf("the partition: network %q, label %q, tip %q", part.Network, part.Label, part.Tip)
	}
	var b bytes.Buffer
	if err := Write(&b, withPartition()); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{`data-fault="partition-broker" data-network="broker links cut"`, `data-legend="network-fault"`, `fill="url(#network-fault)"`} {
		if strings.Count(page, want) != 1 {
			t.Errorf("the page has %d of %s, want 1", strings.Count(page, want), want)
		}
	}
	b.Reset()
	if err := Write(&b, synthetic()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "data-network=") || strings.Contains(b.String(), `data-legend="network-fault"`) {
		t.Errorf("a run without a network fault draws one, or its legend entry")
	}
}

// TestPartitionInBrowser opens the run with a partition in headless
// Chromium: the partition's bar is drawn hatched, the pause's solid, each
// with its label, and the legend has the network faults' entry.
func TestPartitionInBrowser(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.html")
	if err := WriteFile(path, withPartition()); err != nil {
		t.Fatal(err)
	}
	p := browsertest.Load(t, path)
	if len(p.Console) > 0 || len(p.Resources) > 0 {
		t.Fatalf("console %q, resources %q", p.Console, p.Resources)
	}
	if p.FaultMarks["partition-broker"] != 1 || p.NetworkFaults["partition-broker"] != 1 || browsertest.Sum(p.NetworkFaults) != 1 || p.FaultCounts["partition-broker"] != "1" {
		t.Errorf("fault marks %v, network %v, table %v", p.FaultMarks, p.NetworkFaults, p.FaultCounts)
	}
	if p.FaultFills["partition-broker"] != "url(#network-fault)" || p.FaultFills["pause"] != faultColour {
		t.Errorf("fills %v: want the partition hatched, the pause %s", p.FaultFills, faultColour)
	}
	if want := []string{"pause w1", "broker-restart", "partition-broker (broker links cut) w2"}; strings.Join(p.FaultLabels, "|") != strings.Join(want, "|") {
		t.Errorf("fault labels %q, want %q", p.FaultLabels, want)
	}
	if len(p.Legends) != 1 || p.Legends[0] != "network-fault" {
		t.Errorf("legend entries %q, want network-fault", p.Legends)
	}
}
