// Package promset registers a group of Prometheus collectors all or
// nothing, and unregisters them again: the lifecycle every workrouter
// component with metrics (consumer, router, sinkmetrics) shares.
package promset

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Set is a named group of collectors. Add them, then Register once. It is
// not safe for concurrent Add/Register; the collectors themselves are.
type Set struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector
	names      []string
}

// Add appends c, known by name, to the set.
func (s *Set) Add(name string, c prometheus.Collector) {
	s.collectors = append(s.collectors, c)
	s.names = append(s.names, name)
}

// Names returns the names of the collectors, in the order added.
func (s *Set) Names() []string { return s.names }

// Register registers every collector on reg, or none: on a failure the ones
// already registered are unregistered again and the error names the
// collector that failed.
func (s *Set) Register(reg prometheus.Registerer) error {
	for i, c := range s.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range s.collectors[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("registering %s: %w", s.names[i], err)
		}
	}
	s.reg = reg
	return nil
}

// Unregister removes the collectors from the registerer they were
// registered on. A nil or unregistered set is fine.
func (s *Set) Unregister() {
	if s == nil || s.reg == nil {
		return
	}
	for _, c := range s.collectors {
		s.reg.Unregister(c)
	}
}
