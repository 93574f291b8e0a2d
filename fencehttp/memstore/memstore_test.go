package memstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/memstore"
	"github.com/workrouter/workrouter/fencehttp/storetest"
)

// TestConformance: the memory store passes the store suite. Its resource
// is a map the handler writes while the unit holds the store: not undone
// by an abort (Transactional false).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (fencehttp.Store, storetest.Resource) {
		var mu sync.Mutex
		written := map[string]int{}
		return memstore.New(), storetest.Resource{
			Write: func(_ context.Context, key string) error {
				mu.Lock()
				defer mu.Unlock()
				written[key]++
				return nil
			},
			Written: func(testing.TB) map[string]int {
				mu.Lock()
				defer mu.Unlock()
				out := make(map[string]int, len(written))
				for k, v := range written {
					out[k] = v
				}
				return out
			},
		}
	})
}
