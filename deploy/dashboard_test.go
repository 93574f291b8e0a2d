package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/consumer/consumerprom"
	"github.com/workrouter/workrouter/router/routerprom"
)

type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Query any `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

var metricName = regexp.MustCompile(`workrouter_[a-z_]+`)

// TestDashboard: the dashboard parses, has the panels operators rely on,
// and queries only metrics the code exports.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana/workrouter.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana/workrouter.json: %v", err)
	}
	exported := append(consumerprom.MetricNames(), routerprom.MetricNames()...)

	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok {
			exprs = append(exprs, q)
		}
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(exported, base) {
					name = base
				}
			}
			used[name] = true
			if !slices.Contains(exported, name) {
				t.Errorf("the dashboard queries %s, which the code does not export (exported: %v)", name, exported)
			}
		}
	}
	for _, name := range []string{
		"workrouter_consumer_records_applied_total",    // throughput
		"workrouter_consumer_apply_duration_seconds",   // apply latency
		"workrouter_consumer_handler_duration_seconds", // handler latency
		"workrouter_consumer_lag",                      // lag
		"workrouter_consumer_owned_partitions",         // owned partitions
		"workrouter_consumer_tenure_epoch",             // tenure epochs
		"workrouter_consumer_fenced_total",             // fenced rejections
	} {
		if !used[name] {
			t.Errorf("no panel queries %s", name)
		}
	}
}
