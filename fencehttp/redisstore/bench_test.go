package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/memstore"
	"github.com/workrouter/workrouter/fencehttp/redisstore"
)

// BenchmarkGuard: one fenced request after another over loopback HTTP,
// each with a new key in one scope, the handler writing one HINCRBY
// (redisstore) or nothing (memstore, the Guard and HTTP alone).
func BenchmarkGuard(b *testing.B) {
	for _, c := range []struct {
		name  string
		store func(testing.TB) fencehttp.Store
		write func(ctx context.Context, key string)
	}{
		{"redisstore", func(tb testing.TB) fencehttp.Store { return open(tb, redisstore.Config{}) },
			func(ctx context.Context, key string) { redisstore.TxFrom(ctx).HIncrBy("effects", key, 1) }},
		{"memstore", func(testing.TB) fencehttp.Store { return memstore.New() }, func(context.Context, string) {}},
	} {
		b.Run(c.name, func(b *testing.B) {
			store := c.store(b)
			g, err := fencehttp.New(fencehttp.Config{Store: store})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				f, _ := fencehttp.FenceFrom(r.Context())
				c.write(r.Context(), f.Key)
				w.WriteHeader(http.StatusCreated)
			})))
			defer srv.Close()
			client := &http.Client{Transport: &fencehttp.Transport{Base: srv.Client().Transport}}
			tok := tok(0, 1, "a")
			i := 0
			for b.Loop() {
				i++
				ctx := fencehttp.WithFence(context.Background(), fencehttp.Fence{Token: tok, Key: fmt.Sprint("k", i)})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Fatalf("request %d: %d", i, resp.StatusCode)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
		})
	}
}
