package ownsink_test

import (
	"context"
	"testing"

	"github.com/workrouter/workrouter/examples/ownsink"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/sinktest"
)

// TestConformance runs the sink contract's conformance suite against
// ownsink: the cases of the features it does not declare (dedupe, gaps,
// dead letters) check that it refuses them.
func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness[*ownsink.Tx]{
		Open: func(testing.TB) sink.Sink[*ownsink.Tx] { return ownsink.New() },
		Put: func(_ context.Context, tx *ownsink.Tx, key, value string) error {
			tx.Put(key, value)
			return nil
		},
		Get: func(_ context.Context, s sink.Sink[*ownsink.Tx], key string) (string, bool, error) {
			v, ok := s.(*ownsink.Sink).Value(key)
			return v, ok, nil
		},
		WritesSerialized: true, // one mutex around every call
	})
}
