// Package promgolden checks a component's Prometheus series against a
// golden file: every descriptor the collectors registered on a Registerer
// describe (name, help, constant and variable labels), one per line,
// sorted. The golden files pin the series a scrape of /metrics shows, so
// that moving where they are built changes none of them.
package promgolden

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Recorder is a prometheus.Registerer that keeps what is registered on it.
type Recorder struct{ collectors []prometheus.Collector }

// Register keeps c.
func (r *Recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister keeps cs.
func (r *Recorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}

// Unregister forgets c.
func (r *Recorder) Unregister(c prometheus.Collector) bool {
	i := slices.Index(r.collectors, c)
	if i < 0 {
		return false
	}
	r.collectors = slices.Delete(r.collectors, i, i+1)
	return true
}

// Descs returns the descriptors of the kept collectors, as strings, sorted.
func (r *Recorder) Descs() []string {
	ch := make(chan *prometheus.Desc, 1024)
	go func() {
		for _, c := range r.collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []string
	for d := range ch {
		out = append(out, d.String())
	}
	slices.Sort(out)
	return out
}

// Check fails t unless r's descriptors are the lines of the file golden.
// With WORKROUTER_UPDATE_GOLDEN=1 it writes the file instead.
func Check(t *testing.T, r *Recorder, golden string) {
	t.Helper()
	got := strings.Join(r.Descs(), "\n") + "\n"
	if os.Getenv("WORKROUTER_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the series differ from %s (WORKROUTER_UPDATE_GOLDEN=1 rewrites it)\ngot:\n%s\nwant:\n%s", golden, got, want)
	}
}
