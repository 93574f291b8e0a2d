package memory

import (
	"errors"
	"fmt"
	"hash/maphash"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
)

// ErrConfig is matched by the error [NewWithConfig] returns for an invalid
// [Config].
var ErrConfig = errors.New("memory: invalid config")

// Config configures [NewWithConfig]. The zero value of every field is a
// documented default.
type Config struct {
	// DedupeWindow is the retention horizon of applied command IDs, in
	// offsets of a scope ([sink.Features].DedupeWindow); default
	// 100,000 offsets. Negative is invalid.
	DedupeWindow int64
}

// NewWithConfig returns an empty sink configured by cfg; it fails with an
// error matching [ErrConfig] for an invalid cfg. New() is
// NewWithConfig(Config{}). It may be called from any goroutine.
func NewWithConfig(cfg Config) (*Sink, error) {
	if cfg.DedupeWindow < 0 {
		return nil, fmt.Errorf("%w: negative DedupeWindow %d", ErrConfig, cfg.DedupeWindow)
	}
	s := New()
	s.window = cmdids.WindowOf(cfg.DedupeWindow)
	return s, nil
}

// idKey is a command ID as the sink keeps it: its 128-bit hash under the
// sink's two random maphash seeds. A key holds no pointer, so the index
// and the ring of applied IDs (idSet) cost the garbage collector nothing
// to scan, and a probe compares 16 bytes instead of strings. Two different IDs
// have the same key with a probability of about 2^-128 (then the later
// one would be taken for a duplicate): for a window of 10^5 IDs and 10^12
// lookups, about 10^-22.
type idKey [2]uint64

// keyOf returns the idKey of id. It may be called from any goroutine.
func (s *Sink) keyOf(id string) idKey {
	return idKey{maphash.String(s.seeds[0], id), maphash.String(s.seeds[1], id)}
}

// CommandIDs returns how many applied command IDs the sink remembers for
// scope. It may be called from any goroutine.
func (s *Sink) CommandIDs(scope epochs.Scope) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if set := s.ids[scope]; set != nil {
		return set.len()
	}
	return 0
}
